"""Prophet as a training candidate: its fit on a customer's whole history, and its
backtest forecasts from fits on the rows before each origin.

The whole-history fit is Prophet's MAP solved exactly in-process, from the template of
the customer's model shape where the worker has one (:mod:`fleetcast_training.grid_fit`),
else through Prophet itself. Each backtest fit is built in numpy from that fit's Stan data
(:mod:`fleetcast_training.holdout`), through Prophet only where the solver does not solve
it. The served model is the whole-history fit, loadable with
``prophet.serialize.model_from_json``; an hourly one's JSON keeps only the last four
weeks of its history (:data:`KEPT_HISTORY_DAYS`).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_to_dict

from fleetcast_contracts.families import PROPHET
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import HolidayCalendar, calendar_years, holidays_frame
from fleetcast_training.exact_map import NotSolvedExactly
from fleetcast_training.grid_fit import (
    SHAPES_KEPT,
    FeaturesAt,
    ShapeTemplate,
    ShapeTemplates,
    kept_history,
    shape_key,
)
from fleetcast_training.history import History
from fleetcast_training.holdout import holdout_forecast
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.prophet_model import FleetcastProphet
from fleetcast_training.stan_backend import IN_PROCESS, FleetcastStanBackend

logger = logging.getLogger(__name__)

SEASONALITIES = ("yearly", "weekly", "daily")
# ProphetCandidate.preprocessing's keys: SHARED (from a shape's template) and PROPHET.
SHARED = "shared"
YEAR = pd.Timedelta(days=365)
# The history a served model's JSON keeps, in days, by model frequency (None: all of it).
# An hourly model of two years is 17,520 rows of history in its JSON (1.6 MB, with its
# dates and the fitted trend along it) that Prophet's predict never reads for later times
# but for their mean step (its trend uncertainty for a one-period forecast, which the last
# four weeks of a regular series give as well): building, encoding and compressing that
# text was 18 of an hourly customer's 77 ms of worker CPU (make bench's hourly row). The
# fit, and so every forecast, is on the whole history as before.
KEPT_HISTORY_DAYS: dict[Frequency, int | None] = {Frequency.DAILY: None, Frequency.HOURLY: 28}
YEARLY_FOURIER_ORDER = 10  # Prophet's default for yearly seasonality
# Prophet's default Fourier order of each seasonality.
DEFAULT_ORDERS = {"yearly": YEARLY_FOURIER_ORDER, "weekly": 3, "daily": 4}


def _fourier_order(setting: str | bool | int, auto_disabled: bool, name: str) -> int:
    """Prophet's ``parse_seasonality_args``, for a model without custom seasonalities."""
    if setting == "auto":
        return 0 if auto_disabled else DEFAULT_ORDERS[name]
    if setting is True:
        return DEFAULT_ORDERS[name]
    if setting is False:
        return 0
    return int(setting)


def _date(time: np.datetime64) -> date:
    return pd.Timestamp(time).date()


def _features_at(model: Prophet) -> FeaturesAt:
    """Prophet's feature rows of the fitted ``model`` at other times: what its
    ``predict`` builds (every row depends on its own time alone)."""

    def features(stamps: npt.NDArray[np.datetime64]) -> npt.NDArray[np.float64]:
        frame = model.setup_dataframe(pd.DataFrame({"ds": stamps}))
        built, _, _, _ = model.make_all_seasonality_features(frame)
        return np.asarray(built.to_numpy(dtype=np.float64))

    return features


@dataclass(frozen=True)
class _Holidays:
    """A customer's calendar, added to each of its models the way
    :mod:`fleetcast_contracts.holiday_calendar` says serving expects: Prophet's
    ``add_country_holidays`` for a country, a ``holidays=`` frame over
    :func:`calendar_years` of the whole history for a subdivision (the scored model gets
    the same frame, so its holiday columns are the served model's)."""

    calendar: HolidayCalendar | None
    frame: pd.DataFrame | None = None

    @classmethod
    def of(cls, calendar: HolidayCalendar | None, history: History) -> _Holidays:
        if calendar is None or calendar.subdivision is None:
            return cls(calendar)
        years = calendar_years(_date(history.times[0]), _date(history.times[-1]))
        return cls(calendar, holidays_frame(calendar, years))


@dataclass(frozen=True)
class ProphetFit:
    """A customer's Prophet model on its whole history (``model_to_dict``, its history
    cut to :data:`KEPT_HISTORY_DAYS`) and, per origin asked for, the forecast of the rows
    from it on (each from a fit before it)."""

    model: dict[str, Any]
    backtests: list[npt.NDArray[np.float64]]


class ProphetCandidate:
    """Fits one customer after another; each worker process holds one."""

    def __init__(
        self,
        hyperparameters: Hyperparameters,
        scratch: Path,
        shapes: ShapeTemplates | None = None,
        shapes_kept: int = SHAPES_KEPT,
    ):
        self._hyperparameters = hyperparameters
        self.backend = FleetcastStanBackend(scratch)
        # The templates of the model shapes seen so far (shared with the trainer that
        # made ``shapes``, or in a forked worker a copy of them).
        self._shapes = shapes if shapes is not None else ShapeTemplates(shapes_kept)
        # How each whole-history fit was preprocessed: from a shape's template, or by Prophet.
        self.preprocessing: Counter[str] = Counter()

    def fit(
        self, history: History, calendar: HolidayCalendar | None, backtest_rows: list[int]
    ) -> ProphetFit:
        """The whole-history model, and for each of ``backtest_rows`` the forecast of the
        history's last that many rows by a model fitted on the rows before them."""
        orders = self._seasonality_orders(history)
        holidays = _Holidays.of(calendar, history)
        model = self._fit_whole_history(history, orders, calendar, holidays)
        full = self.backend.last_stan_data
        backtests = [
            self._holdout_forecast(history, orders, holidays, model, rows, full)
            for rows in backtest_rows
        ]
        return ProphetFit(model, backtests)

    def _fit_whole_history(
        self,
        history: History,
        orders: dict[str, int],
        calendar: HolidayCalendar | None,
        holidays: _Holidays,
    ) -> dict[str, Any]:
        """``model_to_dict`` of Prophet's fit on the whole history (its history cut to
        :data:`KEPT_HISTORY_DAYS`): from the template of the customer's model shape when
        the worker has one that holds its times (:mod:`fleetcast_training.grid_fit`),
        else through Prophet, whose fit then makes or grows the shape's template. Leaves
        the fit's Stan data in the backend's ``last_stan_data`` (None for a constant
        series)."""
        stamps, values = history.times, history.values
        key = shape_key(stamps, tuple(sorted(orders.items())), calendar)
        template = self._shapes.get(key)
        if template is not None:
            fitted: tuple[dict[str, Any], dict[str, Any], Any] | None = None
            try:
                fitted = template.fit(stamps, values, self._kept_rows)
            except NotSolvedExactly as reason:
                logger.debug("fitting through Prophet: %s", reason)
            if fitted is not None:
                self.backend.fit_methods[IN_PROCESS] += 1
                self.backend.last_stan_data = fitted[1]
                self.preprocessing[SHARED] += 1
                return fitted[0]
        # A constant history never reaches the backend: no Stan data from another customer.
        self.backend.last_stan_data = None
        solved_before = self.backend.fit_methods[IN_PROCESS]
        prophet_model = self._new_model(orders, holidays)
        changepoints_setting = prophet_model.n_changepoints
        served = prophet_model.fit(history.frame())
        self.preprocessing[PROPHET] += 1
        model = model_to_dict(served)
        stan_data: dict[str, Any] | None = self.backend.last_stan_data
        if stan_data is not None and self.backend.fit_methods[IN_PROCESS] > solved_before:
            if not self._shapes.known(key):
                made = ShapeTemplate.of(
                    model, served.history, stan_data, changepoints_setting, _features_at(served)
                )
                self._shapes.remember(key, made)
            elif template is not None:
                template.table.add(stamps.view(np.int64), np.asarray(stan_data["X"]))
        return model if self._kept_rows is None else kept_history(served, model, self._kept_rows)

    @property
    def _kept_rows(self) -> int | None:
        """How many of its last history rows a served model's JSON keeps (None: all)."""
        frequency = self._hyperparameters.frequency
        days = KEPT_HISTORY_DAYS[frequency]
        return None if days is None else days * frequency.periods_per_day

    def _new_model(
        self, orders: dict[str, int] | None = None, holidays: _Holidays | None = None
    ) -> Prophet:
        settings = self._hyperparameters
        seasonality: dict[str, Any] = {
            f"{name}_seasonality": getattr(settings, f"{name}_seasonality")
            for name in SEASONALITIES
        }
        if orders is not None:
            seasonality = {f"{name}_seasonality": orders[name] or False for name in SEASONALITIES}
        calendar = holidays.calendar if holidays is not None else None
        frame = holidays.frame if holidays is not None else None
        model = FleetcastProphet(
            seasonality_mode=settings.seasonality_mode,
            uncertainty_samples=settings.uncertainty_samples,
            holidays=None if frame is None else frame.copy(),
            **seasonality,
        )
        model.stan_backend = self.backend
        if calendar is not None and frame is None:
            model.add_country_holidays(country_name=calendar.country)
        return model

    def _seasonality_orders(self, history: History) -> dict[str, int]:
        """Resolve "auto" seasonalities once, on the whole history, the way Prophet would
        for the served model, so the scored model has the same terms as the served one
        (Prophet's yearly "auto" needs two years, which the shorter scored window can miss)."""
        settings = self._hyperparameters
        times = history.times.astype("datetime64[ns]")
        span = pd.Timedelta(times[-1] - times[0])
        steps = np.diff(times)
        steps = steps[steps != np.timedelta64(0, "ns")]
        shortest = pd.Timedelta(steps.min()) if steps.size else None
        # Prophet's set_auto_seasonalities: when "auto" turns each one off.
        disabled = {
            "yearly": span < pd.Timedelta(days=730),
            "weekly": span < pd.Timedelta(weeks=2)
            or (shortest is not None and shortest >= pd.Timedelta(weeks=1)),
            "daily": span < pd.Timedelta(days=2)
            or (shortest is not None and shortest >= pd.Timedelta(days=1)),
        }
        orders = {
            name: _fourier_order(getattr(settings, f"{name}_seasonality"), disabled[name], name)
            for name in SEASONALITIES
        }
        # Prophet's yearly "auto" waits for two full years. Energy use has a strong yearly
        # cycle, and with a year or more of history a trend left to chase it extrapolates
        # badly: on 23 months of daily data the holdout sMAPE fell from 10.9% to 2.4% with
        # yearly terms on (seasonal-naive: 3.7%). So "auto" here means: on after a year.
        if settings.yearly_seasonality == "auto" and span >= YEAR:
            orders["yearly"] = orders["yearly"] or YEARLY_FOURIER_ORDER
        return orders

    def _holdout_forecast(
        self,
        history: History,
        orders: dict[str, int],
        holidays: _Holidays,
        served: dict[str, Any],
        rows: int,
        full: dict[str, Any] | None,
    ) -> npt.NDArray[np.float64]:
        """The forecast of the last ``rows`` rows by a model fitted on the rows before
        them, built from the full-history fit just made (``served``, its model dict, and
        ``full``, its Stan data: its noise level is where the window's search for its own
        starts; :mod:`fleetcast_training.holdout`); through Prophet itself when the
        in-process solver does not solve the model."""
        if full is not None and len(full["y"]) == len(history):
            try:
                noise = float(np.ravel(served["params"]["sigma_obs"])[0]) * served["y_scale"]
                forecast = holdout_forecast(full, history.times, history.values, rows, noise)
            except NotSolvedExactly:
                pass
            else:
                self.backend.fit_methods[IN_PROCESS] += 1
                return forecast
        scored = self._new_model(orders, holidays).fit(history.head(-rows).frame())
        return self._point_forecast(scored, history.times[-rows:])

    @staticmethod
    def _point_forecast(model: Prophet, times: np.ndarray) -> np.ndarray:
        """``yhat`` only: the uncertainty samples do not change it and cost most of predict."""
        samples = model.uncertainty_samples
        model.uncertainty_samples = 0
        try:
            predicted = model.predict(pd.DataFrame({"ds": times}))
        finally:
            model.uncertainty_samples = samples
        return predicted["yhat"].to_numpy(dtype=np.float64)
