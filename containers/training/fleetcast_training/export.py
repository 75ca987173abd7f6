"""The run's forecast export and accuracy table (:mod:`fleetcast_training.run_exports`).

A worker forecasts each customer from the model it has just fitted (or the archive it
resumed), with the inference container's own math (the family's compile, through
:func:`fleetcast_forecasters.families.compile_archive`)
and the seed the endpoint uses for a request of the same period, so an exported row equals
what ``invoke_endpoint`` answers for that model and period. The parent process writes the
shard's parts at the end of the job (:class:`ShardExport`), under names fixed by the host:
a job restarted after a spot interruption writes the same parts again, each customer in
them once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetcast_contracts.files import written_whole
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import HoldoutMetrics
from fleetcast_contracts.quantiles import FORECAST_FLOOR
from fleetcast_contracts.training_manifest import CustomerResult
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.forecast import forecast_seed
from fleetcast_training.grid import period
from fleetcast_training.run_exports import (
    ACCURACY,
    ACCURACY_SCHEMA,
    CUSTOMERS_PER_PART,
    EXPORTS_DIR,
    FORECAST_SCHEMA,
    FORECASTS,
    MEASURES,
    PARQUET_SUFFIX,
    PART_PREFIX,
    SCORED_KINDS,
    accuracy_part_name,
    forecast_part_name,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ExportedForecast:
    """One customer's exported forecast: every period after its last reading through the
    export's horizon after the run's last period (:func:`forecast_for_export`)."""

    dates: npt.NDArray[np.datetime64]
    yhat: FloatArray
    yhat_lower: FloatArray | None
    yhat_upper: FloatArray | None


def forecast_for_export(
    customer_id: str,
    run_id: str,
    model: str | dict[str, Any],
    model_kind: str,
    frequency: Frequency,
    periods: int,
    last_history: np.datetime64 | None = None,
    readings_end: np.datetime64 | None = None,
    run_last_period: np.datetime64 | None = None,
) -> ExportedForecast:
    """The customer's export of this model of ``model_kind`` (its JSON, or the object that
    JSON is made from): every period after its last reading (``readings_end``) through
    ``periods`` after the run's last period (``run_last_period``), or after its own when
    that is later or the run's is unknown, or when its readings end more than
    :data:`MAX_LAG_DAYS` before the run's (a customer long gone is not forecast for a
    year).

    The model's history ends at ``last_history``, which is earlier when the customer's
    last periods were left out of the fit (incomplete or inactive): the forecast runs over
    them first, as the endpoint's does, and they are not exported. The rows are what the
    endpoint serves for ``period`` = every period from the model's end through the last
    exported one: the same compile, the same seed (model version = run, period) and the
    same floor. ``last_history`` None: the model's own (its readings' end and the run's are
    then taken to be the same). ``ValueError`` for a model the forecaster cannot compile."""
    skipped = periods_between(last_history, readings_end, frequency)
    lag = periods_between(readings_end, run_last_period, frequency)
    if lag * period(frequency) > np.timedelta64(MAX_LAG_DAYS, "D"):
        lag = 0
    horizon = skipped + lag + periods
    forecaster = compile_archive(
        model,
        model_kind,
        frequency.pandas_alias,
        horizon=horizon,
        one_period=horizon == 1,
        last_history=last_history,
    )
    seed = forecast_seed(run_id)
    forecast, _ = forecaster.forecast(horizon, seed).clipped_at(FORECAST_FLOOR)

    def exported(values: FloatArray | None) -> FloatArray | None:
        return None if values is None else values[skipped:]

    return ExportedForecast(
        forecast.dates[skipped:],
        forecast.yhat[skipped:],
        exported(forecast.yhat_lower),
        exported(forecast.yhat_upper),
    )


# A customer whose readings end more than this before the run's last period is exported
# for the periods after its own readings only.
MAX_LAG_DAYS = 366


def periods_between(
    earlier: np.datetime64 | None, later: np.datetime64 | None, frequency: Frequency
) -> int:
    """Whole periods from ``earlier`` to ``later`` (0 when either is unknown or ``later``
    is not later)."""
    if earlier is None or later is None or later <= earlier:
        return 0
    return int((later - earlier) // period(frequency))


@dataclass(frozen=True)
class ExportedCustomer:
    """What the export knows of one customer of the shard."""

    result: CustomerResult
    forecast: ExportedForecast | None = None
    export_error: str | None = None


class ShardExport:
    """The shard's forecast parts and accuracy part, gathered as its customers finish in
    memory that does not grow with their forecasts: every :data:`_BATCH` customers, their
    forecast rows are appended to a spill file (Arrow IPC, in ``spill_dir`` on the
    instance's disk) and their accuracy rows kept as one small columnar batch. ``write``
    then writes the parts, customers in id order."""

    def __init__(self, spill_dir: Path, run_id: str) -> None:
        spill_dir.mkdir(parents=True, exist_ok=True)
        self._run_id = run_id
        self._spill_path = spill_dir / "forecasts.arrows"
        self._spill: pa.RecordBatchStreamWriter | None = None
        # Per exported customer, where its rows start in the spill and how many there are.
        self._rows: dict[str, tuple[int, int]] = {}
        self._spilled = 0
        self._pending: list[ExportedCustomer] = []
        self._accuracy: list[pa.RecordBatch] = []
        # The customers with a model but no forecast (the forecaster could not read it).
        self.unexported: list[str] = []

    @property
    def exported(self) -> int:
        """Customers with a forecast so far (those gathered but not yet spilled too)."""
        return len(self._rows) + sum(1 for c in self._pending if c.forecast is not None)

    def add(self, customer: ExportedCustomer) -> None:
        if customer.export_error is not None:
            self.unexported.append(customer.result.customer_id)
        self._pending.append(customer)
        if len(self._pending) >= _BATCH:
            self._flush()

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        self._accuracy.append(accuracy_batch(self._run_id, pending))
        exported = [c for c in pending if c.forecast is not None]
        if not exported:
            return
        batch = forecast_batch(self._run_id, exported)
        if self._spill is None:
            self._spill = pa.ipc.new_stream(self._spill_path, FORECAST_SCHEMA)
        self._spill.write_batch(batch)
        for customer in exported:
            assert customer.forecast is not None
            rows = len(customer.forecast.yhat)
            self._rows[customer.result.customer_id] = (self._spilled, rows)
            self._spilled += rows

    def write(self, checkpoint_dir: Path, host: str) -> tuple[list[Path], Path]:
        """The forecast parts (``exports/forecasts/part-{host}-{n}.parquet``,
        :data:`CUSTOMERS_PER_PART` customers to a part, replacing those this host wrote
        before: an attempt interrupted after writing them) and the accuracy part
        (``exports/accuracy/part-{host}.parquet``, one row per customer of the shard)."""
        self._flush()
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        return self._write_forecast_parts(checkpoint_dir, host), self._write_accuracy_part(
            checkpoint_dir, host
        )

    def _write_forecast_parts(self, checkpoint_dir: Path, host: str) -> list[Path]:
        directory = checkpoint_dir / EXPORTS_DIR / FORECASTS
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(f"{PART_PREFIX}{host}-*{PARQUET_SUFFIX}"):
            stale.unlink()
        if not self._rows:
            return []
        # Uncompressed and memory-mapped: the rows are read from the page cache, not copied.
        with pa.memory_map(str(self._spill_path)) as source:
            spilled = pa.ipc.open_stream(source).read_all()
        ordered = sorted(self._rows)
        paths = []
        for number, first in enumerate(range(0, len(ordered), CUSTOMERS_PER_PART)):
            indices = np.concatenate(
                [
                    np.arange(start, start + rows)
                    for start, rows in map(
                        self._rows.__getitem__, ordered[first : first + CUSTOMERS_PER_PART]
                    )
                ]
            )
            path = directory / forecast_part_name(host, number)
            _write_atomically(spilled.take(indices), path)
            paths.append(path)
        return paths

    def _write_accuracy_part(self, checkpoint_dir: Path, host: str) -> Path:
        directory = checkpoint_dir / EXPORTS_DIR / ACCURACY
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / accuracy_part_name(host)
        table = pa.Table.from_batches(self._accuracy, schema=ACCURACY_SCHEMA)
        _write_atomically(table.take(pc.sort_indices(table, [("customer_id", "ascending")])), path)
        return path


# Customers gathered before their rows are spilled: a few hundred KB of forecasts.
_BATCH = 1000


def forecast_batch(run_id: str, customers: Sequence[ExportedCustomer]) -> pa.RecordBatch:
    """The forecast rows of ``customers`` (each with a forecast), in their order."""
    forecasts = [c.forecast for c in customers if c.forecast is not None]
    ids = [c.result.customer_id for c in customers if c.forecast is not None]
    counts = [len(f.yhat) for f in forecasts]
    if not forecasts:
        return pa.RecordBatch.from_pylist([], schema=FORECAST_SCHEMA)

    def bound(name: str) -> pa.Array:
        parts = [getattr(f, name) for f in forecasts]
        mask = np.concatenate(
            [np.full(n, part is None) for n, part in zip(counts, parts, strict=True)]
        )
        values = np.concatenate(
            [np.zeros(n) if part is None else part for n, part in zip(counts, parts, strict=True)]
        )
        return pa.array(values, type=pa.float64(), mask=mask)

    dates = np.concatenate([f.dates.astype("datetime64[ms]") for f in forecasts])
    return pa.RecordBatch.from_pydict(
        {
            "customer_id": pa.array(np.repeat(ids, counts), type=pa.string()),
            "run_id": pa.array([run_id] * len(dates), type=pa.string()),
            "ds": pa.array(dates, type=pa.timestamp("ms")),
            "yhat": pa.array(np.concatenate([f.yhat for f in forecasts]), type=pa.float64()),
            "yhat_lower": bound("yhat_lower"),
            "yhat_upper": bound("yhat_upper"),
        },
        schema=FORECAST_SCHEMA,
    )


def accuracy_batch(run_id: str, customers: Sequence[ExportedCustomer]) -> pa.RecordBatch:
    """One accuracy row per customer, in their order."""
    rows = []
    for customer in customers:
        result, metrics = customer.result, customer.result.metrics
        row: dict[str, object] = {
            "customer_id": result.customer_id,
            "run_id": run_id,
            "outcome": result.outcome.value,
            "failure_reason": result.reason,
            "rows": result.rows,
            "holdout_days": metrics.holdout_days if metrics else None,
            "beats_naive": _beats_naive(metrics) if metrics else None,
            "forecast_rows": 0 if customer.forecast is None else len(customer.forecast.yhat),
            "export_error": customer.export_error,
        }
        for name in MEASURES:
            row[name] = getattr(metrics, name) if metrics else None
            row[f"naive_{name}"] = getattr(metrics, f"naive_{name}") if metrics else None
        metadata = result.metadata
        backtest = metadata.backtest if metadata else None
        row["model_kind"] = metadata.model_kind if metadata else None
        row["runner_up"] = backtest.runner_up if backtest else None
        row["backtest_windows"] = backtest.windows if backtest else None
        row["level_shift_days"] = backtest.level_shift_days if backtest else None
        for kind in SCORED_KINDS:
            score = backtest.score(kind) if backtest else None
            row[f"backtest_wape_{kind}"] = score.wape if score else None
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=ACCURACY_SCHEMA)


def _beats_naive(metrics: HoldoutMetrics) -> bool:
    """Strictly better than seasonal naive: on the backtest's MAE where there is one (the
    measure the gate uses), else on the holdout's sMAPE."""
    if metrics.windows is not None:
        return metrics.mae < metrics.naive_mae
    return metrics.smape < metrics.naive_smape


def _write_atomically(table: pa.Table, path: Path) -> None:
    # (The checkpoint sync skips the partial file, so S3 never holds half a part.)
    with written_whole(path) as partial:
        pq.write_table(table, partial, compression="zstd")
