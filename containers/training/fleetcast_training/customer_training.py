"""Train a batch of customers: every candidate family on the same rolling-origin
backtest, the model chosen per customer (:mod:`fleetcast_training.selection`) fitted on
the whole history and archived, then the export's forecasts.

The numpy families (seasonal naive, ETS, Theta) fit the whole batch at once, as arrays
(:mod:`fleetcast_training.grid`); Prophet fits one customer after another
(:mod:`fleetcast_training.prophet_candidate`).
"""

from __future__ import annotations

import importlib
import logging
import platform
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import cmdstanpy
import numpy as np
import pandas as pd
import prophet
from prophet.models import CmdStanPyBackend

from fleetcast_contracts.families import BY_KIND, PROPHET, Fit, kinds_fitted
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import HolidayCalendar
from fleetcast_contracts.model_archive import (
    Backtest,
    HoldoutMetrics,
    ModelMetadata,
    read_archive,
    write_archive,
)
from fleetcast_contracts.shards import reads_less_often
from fleetcast_contracts.training import MODEL_ARCHIVE_SUFFIX
from fleetcast_contracts.training_manifest import CustomerOutcome, CustomerResult
from fleetcast_forecasters import cold_start, seasonal_naive
from fleetcast_forecasters.candidates import BacktestPlan, CandidateFamily, Histories
from fleetcast_forecasters.fleet import KIND as fleet_kind
from fleetcast_forecasters.gaussian import common_fields
from fleetcast_training import level_shift
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.export import ExportedForecast, forecast_for_export
from fleetcast_training.failures import CustomerFailure, FailureKind
from fleetcast_training.fleet import FleetForecast
from fleetcast_training.grid import INTERVAL_WIDTH, on_grids, period, positions
from fleetcast_training.grid_fit import SHAPES_KEPT, ShapeTemplates
from fleetcast_training.history import (
    IMPLAUSIBLE_FACTOR,
    IMPLAUSIBLE_PERCENTILE,
    History,
    read_series,
)
from fleetcast_training.holiday_fits import fit_families
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.model_json import encode_model
from fleetcast_training.prophet_candidate import SHARED, ProphetCandidate
from fleetcast_training.selection import Candidate, choose

logger = logging.getLogger(__name__)

__all__ = ["SHARED", "CustomerReport", "CustomerTrainer"]

# The families fitted a batch at once, as arrays (the family catalogue's Fit.BATCH).
NUMPY_FAMILIES: dict[str, CandidateFamily] = {
    kind: importlib.import_module(BY_KIND[kind].module).FAMILY for kind in kinds_fitted(Fit.BATCH)
}


@dataclass(frozen=True)
class CustomerReport:
    """What the job learns about one customer; ``failure_kind`` groups failures;
    ``forecast`` is its model's exported forecast (``export_error`` says why there is none),
    which took ``export_cpu_seconds`` of its worker's CPU."""

    result: CustomerResult
    failure_kind: FailureKind | None = None
    forecast: ExportedForecast | None = None
    export_error: str | None = None
    export_cpu_seconds: float = 0.0

    @classmethod
    def failed(cls, customer_id: str, kind: FailureKind, reason: str) -> CustomerReport:
        result = CustomerResult(
            customer_id=customer_id, outcome=CustomerOutcome.FAILED, reason=reason, kind=kind
        )
        return cls(result=result, failure_kind=kind)


@dataclass(frozen=True)
class _Fitted:
    """A customer's trained (or resumed) model, before the export's forecast of it."""

    result: CustomerResult
    model: str | dict[str, Any]
    last_history: np.datetime64 | None = None
    # The customer's last reading, later than last_history when its last periods were
    # left out of the fit: its export covers the periods after it.
    readings_end: np.datetime64 | None = None


@dataclass(frozen=True)
class _Loaded:
    """A customer read and ready to fit."""

    customer_id: str
    history: History
    calendar: HolidayCalendar | None
    started: float
    # The last stored period's time, those left out of the fit included.
    readings_end: np.datetime64
    # Its ok periods left out of the fit as implausible (history.IMPLAUSIBLE_FACTOR).
    implausible: int = 0


def _date(time: np.datetime64) -> date:
    return pd.Timestamp(time).date()


def archive_path(checkpoint_dir: Path, customer_id: str) -> Path:
    return checkpoint_dir / f"{customer_id}{MODEL_ARCHIVE_SUFFIX}"


def library_versions() -> dict[str, str]:
    return {
        "prophet": prophet.__version__,
        "cmdstanpy": cmdstanpy.__version__,
        "cmdstan": CmdStanPyBackend.CMDSTAN_VERSION,
        "pandas": pd.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


class CustomerTrainer:
    """Trains batches of customers one after another; each worker process holds one."""

    def __init__(
        self,
        hyperparameters: Hyperparameters,
        checkpoint_dir: Path,
        scratch: Path,
        calendars: CustomerCalendars | None = None,
        shapes: ShapeTemplates | None = None,
        shapes_kept: int = SHAPES_KEPT,
        run_last_period: np.datetime64 | None = None,
        fleet: Mapping[str, FleetForecast] | None = None,
    ):
        self._hyperparameters = hyperparameters
        # The fleet family's forecasts of the shard's customers (fleetcast_training.fleet).
        self._fleet = fleet or {}
        # The run's last period (contracts.shards.RUN_LAST_PERIOD_KEY): every export runs
        # through the export's horizon after it.
        self._run_last_period = run_last_period
        self._calendars = calendars or CustomerCalendars()
        self._checkpoint_dir = checkpoint_dir
        self._prophet = ProphetCandidate(hyperparameters, scratch, shapes, shapes_kept)
        self._backend = self._prophet.backend
        self._versions = library_versions()

    @property
    def preprocessing(self) -> Counter[str]:
        """How each Prophet whole-history fit was preprocessed (shared template or Prophet)."""
        return self._prophet.preprocessing

    def prepare(self, customer_id: str, source: Path) -> None:
        """Fit Prophet's whole-history model of this customer, only to make its model
        shape's template (:mod:`fleetcast_training.grid_fit`): workers forked after it
        start with the template. Nothing is archived or reported; the customer is trained
        like any other. A customer Prophet cannot fit leaves no template, and no error."""
        settings = self._hyperparameters
        if PROPHET not in settings.candidates:
            return
        try:
            history = read_series(source).for_fitting()
            if len(history) >= settings.required_rows:
                self._prophet.fit(history, self._calendars.of(customer_id), [])
        except Exception:
            logger.info("no shape template from %s", customer_id, exc_info=True)

    def train(self, customer_id: str, source: Path) -> CustomerReport:
        """Never raises: a customer that cannot be trained comes back FAILED with a reason."""
        return self.train_batch([(customer_id, source)])[0]

    def train_batch(
        self,
        batch: Sequence[tuple[str, Path]],
        starting: Callable[[str], object] | None = None,
    ) -> list[CustomerReport]:
        """:meth:`train` each customer of ``batch``: read them all, fit the numpy
        families on the batch at once, Prophet one after another, choose and archive; then
        make the export's forecasts of the models, one after another (with their code and
        shared arrays still in the CPU's caches a forecast costs about two thirds of one
        made right after its fit). ``starting`` is told each customer before its fit and
        before its forecast."""
        items: list[CustomerReport | _Fitted | _Loaded] = []
        for customer_id, source in batch:
            if starting is not None:
                starting(customer_id)
            items.append(self._load(customer_id, source))
        loaded = [item for item in items if isinstance(item, _Loaded)]
        if loaded:
            fitted = dict(
                zip((c.customer_id for c in loaded), self._fit(loaded, starting), strict=True)
            )
            items = [fitted[i.customer_id] if isinstance(i, _Loaded) else i for i in items]
        reports = []
        for item in items:
            assert not isinstance(item, _Loaded)
            if isinstance(item, _Fitted):
                if starting is not None:
                    starting(item.result.customer_id)
                item = self._with_forecast(item)
            reports.append(item)
        return reports

    def _load(self, customer_id: str, source: Path) -> CustomerReport | _Fitted | _Loaded:
        started = time.perf_counter()
        try:
            resumed = self._resume(customer_id)
            if resumed is not None:
                return self._resumed(*resumed, source)
            stored = read_series(source)
            # Incomplete, inactive and implausible periods are gaps for every family, never
            # low (or huge) values.
            history = stored.for_fitting()
            settings = self._hyperparameters
            implausible = stored.implausible()
            if len(implausible):
                _say_implausible(customer_id, implausible)
            loaded = _Loaded(
                customer_id,
                history,
                self._calendars.of(customer_id),
                started,
                stored.times[-1],
                len(implausible),
            )
            cold = self._fleet.get(customer_id)
            if 0 < len(history) < settings.required_rows and cold is not None:
                return self._cold_start(
                    loaded,
                    cold,
                    f"{len(history)} periods to fit, fewer than the {settings.required_rows} "
                    "a model of its own needs",
                )
            if len(history) < settings.required_rows:
                raise CustomerFailure(
                    FailureKind.TOO_FEW_ROWS,
                    _too_few_rows(stored, len(history), settings.required_rows, settings.frequency),
                )
            return loaded
        except CustomerFailure as failure:
            return CustomerReport.failed(customer_id, failure.kind, failure.reason)
        except Exception as error:
            logger.warning("customer %s failed", customer_id, exc_info=True)
            reason = f"{type(error).__name__}: {error}"
            return CustomerReport.failed(customer_id, FailureKind.UNREADABLE, reason)

    def _fit(
        self, loaded: list[_Loaded], starting: Callable[[str], object] | None
    ) -> list[CustomerReport | _Fitted]:
        """Each loaded customer's model (or its failure), in their order."""
        settings = self._hyperparameters
        grids = on_grids([customer.history for customer in loaded], settings)
        plan = BacktestPlan.of(grids.periods, settings.backtest_periods, settings.backtest_windows)
        scorable = np.zeros(grids.customers, dtype=bool)
        fits: dict[str, Any] = {}
        # (a batch shorter than the windows has every customer backtested on its own)
        if plan.origins[0] > 0:
            try:
                fits, fitted = self._numpy_fits(grids, plan, [c.calendar for c in loaded])
            except Exception as error:
                # The batch's arrays are one fit: a fault in it is every customer's.
                logger.warning("the batch's numpy families failed", exc_info=True)
                reason = f"{type(error).__name__}: {error}"
                return [
                    CustomerReport.failed(c.customer_id, FailureKind.FIT_FAILED, reason)
                    for c in loaded
                ]
            for origin in plan.origins:
                scorable |= fitted.fits_before(origin)
        outcomes: list[CustomerReport | _Fitted] = []
        for column, customer in enumerate(loaded):
            if starting is not None:
                starting(customer.customer_id)
            try:
                if scorable[column]:
                    outcome = self._train(customer, column, grids, plan, fits)
                else:
                    outcome = self._train_short(customer)
                outcomes.append(outcome)
            except CustomerFailure as failure:
                outcomes.append(
                    CustomerReport.failed(customer.customer_id, failure.kind, failure.reason)
                )
            except Exception as error:
                logger.warning("customer %s failed", customer.customer_id, exc_info=True)
                reason = f"{type(error).__name__}: {error}"
                outcomes.append(
                    CustomerReport.failed(customer.customer_id, FailureKind.FIT_FAILED, reason)
                )
        return outcomes

    def _numpy_fits(
        self,
        grids: Histories,
        plan: BacktestPlan,
        calendars: list[HolidayCalendar | None],
    ) -> tuple[dict[str, Any], Histories]:
        """The numpy families' fits, with each customer's holidays, and the histories
        they were fitted on (holiday periods left out)."""
        # Seasonal naive is always fitted: it is every model's yardstick, served or not.
        wanted = {seasonal_naive.KIND, *self._hyperparameters.candidates}
        families = {kind: f for kind, f in NUMPY_FAMILIES.items() if kind in wanted}
        return fit_families(
            families, grids, plan, calendars, period(self._hyperparameters.frequency)
        )

    def _train_short(self, customer: _Loaded) -> _Fitted:
        """A customer too short for the batch's windows: backtested alone on windows of
        ``holdout_days`` (fewer periods if it must), the same number of them."""
        settings = self._hyperparameters
        grids = on_grids([customer.history], settings)
        spare = grids.periods - 3 * grids.season
        windows = max(1, min(settings.backtest_windows, spare))
        horizon = min(settings.holdout_rows, spare // windows)
        if horizon < 1:
            # (an hourly customer of two to three weeks: enough rows for a model of its
            # own, too few for three weeks of lags and a window after them)
            forecast = self._fleet.get(customer.customer_id)
            if forecast is not None:
                return self._cold_start(
                    customer,
                    forecast,
                    f"{len(customer.history)} periods to fit, too few for a backtest (it "
                    f"needs {3 * grids.season + windows})",
                )
            raise CustomerFailure(
                FailureKind.TOO_FEW_ROWS,
                f"spans {grids.periods} periods: a backtest of {windows} window(s) needs "
                f"at least {3 * grids.season + windows}",
            )
        plan = BacktestPlan.of(grids.periods, horizon, windows)
        fits, _ = self._numpy_fits(grids, plan, [customer.calendar])
        return self._train(customer, 0, grids, plan, fits)

    def _train(
        self,
        customer: _Loaded,
        column: int,
        grids: Histories,
        plan: BacktestPlan,
        fits: dict[str, Any],
    ) -> _Fitted:
        settings = self._hyperparameters
        fits_before = self._backend.fit_methods.copy()
        history = customer.history
        values = grids.values[:, column]
        actual = np.stack([values[o : o + plan.horizon] for o in plan.origins])
        candidates = [
            Candidate(kind, fit.backtest[column], fit.models[column]) for kind, fit in fits.items()
        ]
        if PROPHET in settings.candidates:
            candidates.append(self._prophet_candidate(customer, column, grids, plan))
        fleet = self._fleet_candidate(customer, plan)
        if fleet is not None:
            candidates.append(fleet)
        last = history.times[-1]
        step = period(settings.frequency)
        origins = [
            pd.Timestamp(last + (origin - grids.periods + 1) * step).to_pydatetime()
            for origin in plan.origins
        ]
        choice = choose(
            candidates,
            actual,
            origins,
            _naive_scale(values[: plan.origins[0]], grids.season),
            common_fields(last, settings.uncertainty_samples, INTERVAL_WIDTH),
            settings.periods_per_day,
            servable=set(settings.candidates),
            shift=level_shift.find(values, settings.periods_per_day),
        )
        if choice is None:
            raise CustomerFailure(FailureKind.FIT_FAILED, "no candidate could be fitted and scored")
        return self._archived(
            customer, choice.kind, choice.model, choice.metrics, choice.backtest, fits_before
        )

    def _cold_start(self, customer: _Loaded, forecast: FleetForecast, short: str) -> _Fitted:
        """A customer too short for a model of its own, or for a backtest (``short`` says
        which), served the fleet's forecast of a customer of its level and shape
        (:mod:`fleetcast_forecasters.cold_start`): no backtest (none of its windows has the
        weeks before it a forecast starts from), so no metrics, and the gate, which
        compares backtests, does not judge it."""
        settings = self._hyperparameters
        model = forecast.model(settings.uncertainty_samples, cold_start.KIND)
        why = f"{short}: the fleet's forecast for a customer of its level and shape, not backtested"
        backtest = Backtest(
            horizon=settings.backtest_periods,
            windows=0,
            origins=[],
            chosen=cold_start.KIND,
            why=why,
            candidates=[],
        )
        return self._archived(customer, cold_start.KIND, model, None, backtest, Counter())

    def _fleet_candidate(self, customer: _Loaded, plan: BacktestPlan) -> Candidate | None:
        """The fleet family's forecast of the customer, backtested on the batch's windows
        (the fleet's are the same: its last periods, the backtest's horizon); None where
        the family is not a candidate, did not forecast the customer or could not backtest
        it (a customer whose history ends before the fleet's, or one backtested alone on
        shorter windows): candidates are compared on the points all of them forecast."""
        forecast = self._fleet.get(customer.customer_id)
        if forecast is None or forecast.last_history != customer.history.times[-1]:
            return None
        backtest = forecast.backtest
        if backtest.shape != (plan.windows, plan.horizon) or not np.isfinite(backtest).any():
            return None
        settings = self._hyperparameters
        return Candidate(fleet_kind, backtest, forecast.model(settings.uncertainty_samples))

    def _prophet_candidate(
        self, customer: _Loaded, column: int, grids: Histories, plan: BacktestPlan
    ) -> Candidate:
        """Prophet's whole-history model and its backtest on the batch's windows (NaN where
        the numpy families had too little history too, so all are scored alike)."""
        backtest = np.full((plan.windows, plan.horizon), np.nan)
        rows = positions(customer.history, self._hyperparameters.frequency)
        grid_rows = grids.periods - (int(rows[-1]) + 1) + rows
        windows = [
            (window, origin, int((grid_rows >= origin).sum()))
            for window, origin in enumerate(plan.origins)
            if grids.fits_before(origin)[column]
        ]
        try:
            fit = self._prophet.fit(
                customer.history, customer.calendar, [count for _, _, count in windows]
            )
        except Exception:
            logger.warning("no Prophet model for %s", customer.customer_id, exc_info=True)
            return Candidate(PROPHET, backtest, None)
        for (window, origin, count), forecast in zip(windows, fit.backtests, strict=True):
            ahead = grid_rows[-count:] - origin
            inside = ahead < plan.horizon
            backtest[window, ahead[inside]] = forecast[inside]
        return Candidate(PROPHET, backtest, fit.model)

    def _archived(
        self,
        customer: _Loaded,
        kind: str,
        model: dict[str, Any],
        metrics: HoldoutMetrics | None,
        backtest: Backtest,
        fits_before: Counter[str],
    ) -> _Fitted:
        settings = self._hyperparameters
        history = customer.history
        metadata = ModelMetadata(
            customer_id=customer.customer_id,
            run_id=settings.run_id,
            trained_at=datetime.now(UTC),
            frequency=settings.frequency,
            data_start=_date(history.times[0]),
            data_end=_date(history.times[-1]),
            rows=len(history),
            metrics=metrics,
            library_versions=self._versions,
            holiday_calendar=customer.calendar,
            model_kind=kind,
            backtest=backtest,
        )
        # The export's forecaster takes the model object as it is rather than parsing
        # the JSON back.
        write_archive(
            archive_path(self._checkpoint_dir, customer.customer_id),
            encode_model(model),
            metadata,
        )
        trained = CustomerResult(
            customer_id=customer.customer_id,
            outcome=CustomerOutcome.TRAINED,
            rows=len(history),
            implausible_periods=customer.implausible or None,
            metrics=metrics,
            fit_seconds=round(time.perf_counter() - customer.started, 4),
            fit_methods=dict(self._backend.fit_methods - fits_before),
            metadata=metadata,
        )
        return _Fitted(trained, model, history.times[-1], customer.readings_end)

    def _resumed(self, result: CustomerResult, model: str, source: Path) -> _Fitted:
        """A resumed customer, with the ends of its history and of its readings from its
        series when the export needs them (else the export starts after the model's own
        history)."""
        if not self._hyperparameters.forecast_export_days:
            return _Fitted(result, model)
        try:
            stored = read_series(source)
            fitted = stored.for_fitting()
        except Exception:
            logger.warning("%s: series unreadable on resume", result.customer_id, exc_info=True)
            return _Fitted(result, model)
        if not len(fitted):
            return _Fitted(result, model)
        return _Fitted(result, model, fitted.times[-1], stored.times[-1])

    def _with_forecast(self, fitted: _Fitted) -> CustomerReport:
        """The report with the model's forecast for the run's export (the periods after the
        customer's last reading through the export's horizon after the run's last period);
        a model the forecaster cannot compile keeps its result and says why it has no
        forecast."""
        result, model = fitted.result, fitted.model
        settings = self._hyperparameters
        if not settings.forecast_export_days:
            return CustomerReport(result)
        started = time.thread_time()
        try:
            forecast = forecast_for_export(
                result.customer_id,
                settings.run_id,
                model,
                result.metadata.model_kind if result.metadata else PROPHET,
                settings.frequency,
                settings.export_periods,
                fitted.last_history,
                fitted.readings_end,
                self._run_last_period,
            )
        except Exception as error:  # the model is archived: no export error may fail it
            logger.warning("no exported forecast for %s: %s", result.customer_id, error)
            return CustomerReport(
                result,
                export_error=f"{type(error).__name__}: {error}",
                export_cpu_seconds=time.thread_time() - started,
            )
        return CustomerReport(
            result, forecast=forecast, export_cpu_seconds=time.thread_time() - started
        )

    def _resume(self, customer_id: str) -> tuple[CustomerResult, str] | None:
        """The result of an earlier attempt at this job (before a spot interruption), if
        its archive is complete and for this run."""
        path = archive_path(self._checkpoint_dir, customer_id)
        if not path.is_file():
            return None
        try:
            model_json, metadata = read_archive(path)
        except ValueError as error:
            logger.warning(
                "refitting %s: its checkpointed archive is unusable: %s", customer_id, error
            )
            return None
        if metadata.customer_id != customer_id or metadata.run_id != self._hyperparameters.run_id:
            logger.warning(
                "refitting %s: its checkpointed archive is from another run", customer_id
            )
            return None
        resumed = CustomerResult(
            customer_id=customer_id,
            outcome=CustomerOutcome.RESUMED,
            rows=metadata.rows,
            metrics=metadata.metrics,
            metadata=metadata,
        )
        return resumed, model_json


def _say_implausible(customer_id: str, implausible: History) -> None:
    """A warning naming the customer's ``implausible`` periods (history.IMPLAUSIBLE_FACTOR),
    left out of its fit: the largest, and how many."""
    largest = int(np.argmax(implausible.values))
    logger.warning(
        "customer %s: %d period(s) over %g times its %gth percentile left out of fitting as "
        "implausible (a meter's glitch, not use; the largest %s: %g); the stored readings "
        "keep them",
        customer_id,
        len(implausible),
        IMPLAUSIBLE_FACTOR,
        IMPLAUSIBLE_PERCENTILE,
        np.datetime_as_string(implausible.times[largest], unit="s"),
        implausible.values[largest],
    )


def _naive_scale(values: np.ndarray, season: int) -> float | None:
    """MASE's scale: the in-sample MAE of seasonal naive on the rows before the backtest."""
    changes = np.abs(values[season:] - values[:-season]) if values.shape[0] > season else None
    if changes is None:
        return None
    changes = changes[np.isfinite(changes)]
    return float(changes.mean()) if changes.size else None


def _too_few_rows(stored: History, fitted: int, needed: int, frequency: Frequency) -> str:
    """Why a customer with ``fitted`` rows to fit gets no model of its own (``needed``): the
    rows left out, by use, or, for a meter that reads less often than the model's periods
    (contracts.shards' ``reads_less_often``: every period of it is left out), that."""
    interval = stored.interval_s
    if interval is not None and reads_less_often(interval, frequency.period_seconds):
        every = f"{interval / 3600:g} h" if interval >= 3600 else f"{interval / 60:g} min"
        return (
            f"has {fitted} rows to fit: its meter reads every {every}, less often than the "
            f"model's {frequency.units}, so none of its {frequency.periods(len(stored))} has "
            f"a total of its own ({frequency.adjective} models need readings at least every "
            f"{frequency.unit}); needs at least {needed}"
        )
    unused = ", ".join(f"{n} {use}" for use, n in stored.left_out().items())
    left_out = f" to fit ({unused} left out)" if unused else ""
    return f"has {fitted} rows{left_out}, needs at least {needed}"
