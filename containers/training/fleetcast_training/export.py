"""The run's forecast export and accuracy table (:mod:`fleetcast_common.run_exports`).

A worker forecasts each customer from the model it has just fitted (or the archive it
resumed), with the inference container's own math (:mod:`fleetcast_common.prophet_forecaster`)
and the seed the endpoint uses for a request of the same period, so an exported row equals
what ``invoke_endpoint`` answers for that model and period. The parent process writes the
shard's rows once, at the end of the job, under names fixed by the host: a job restarted
after a spot interruption writes the same parts again, each customer in them once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from fleetcast_common.contracts.training_manifest import CustomerResult
from fleetcast_common.prophet_forecaster import compile_model, forecast_seed
from fleetcast_common.quantiles import FORECAST_FLOOR
from fleetcast_common.run_exports import (
    ACCURACY,
    ACCURACY_SCHEMA,
    CUSTOMERS_PER_PART,
    EXPORTS_DIR,
    FORECAST_SCHEMA,
    FORECASTS,
    MEASURES,
    PARQUET_SUFFIX,
    PART_PREFIX,
    accuracy_part_name,
    forecast_part_name,
)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ExportedForecast:
    """One customer's exported forecast: ``periods`` rows from the end of its history."""

    dates: npt.NDArray[np.datetime64]
    yhat: FloatArray
    yhat_lower: FloatArray | None
    yhat_upper: FloatArray | None


def forecast_for_export(
    customer_id: str,
    run_id: str,
    model: str | dict[str, Any],
    frequency: str,
    periods: int,
    last_history: np.datetime64 | None = None,
) -> ExportedForecast:
    """What the endpoint serves for ``period=periods`` of this model (its JSON, or the
    ``model_to_dict`` that JSON is made from): the same seed (customer, model version =
    run, period) and the same floor. ``last_history`` is the model's last history time,
    if known. ``ValueError`` for a model the forecaster cannot compile."""
    forecaster = compile_model(
        model, frequency, horizon=periods, one_period=periods == 1, last_history=last_history
    )
    seed = forecast_seed(run_id, periods)
    forecast, _ = forecaster.forecast(periods, seed).clipped_at(FORECAST_FLOOR)
    return ExportedForecast(forecast.dates, forecast.yhat, forecast.yhat_lower, forecast.yhat_upper)


@dataclass(frozen=True)
class ExportedCustomer:
    """What the export knows of one customer of the shard."""

    result: CustomerResult
    forecast: ExportedForecast | None = None
    export_error: str | None = None


def write_forecast_parts(
    checkpoint_dir: Path, host: str, run_id: str, customers: Sequence[ExportedCustomer]
) -> list[Path]:
    """The shard's forecasts in ``exports/forecasts/part-{host}-{n}.parquet``, customers in
    id order, :data:`CUSTOMERS_PER_PART` to a part; the parts this host wrote before (an
    attempt interrupted after writing them) are replaced."""
    directory = checkpoint_dir / EXPORTS_DIR / FORECASTS
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"{PART_PREFIX}{host}-*{PARQUET_SUFFIX}"):
        stale.unlink()
    exported = sorted(
        (c for c in customers if c.forecast is not None), key=lambda c: c.result.customer_id
    )
    paths = []
    for number, start in enumerate(range(0, len(exported), CUSTOMERS_PER_PART)):
        table = forecast_table(run_id, exported[start : start + CUSTOMERS_PER_PART])
        path = directory / forecast_part_name(host, number)
        _write_atomically(table, path)
        paths.append(path)
    return paths


def forecast_table(run_id: str, customers: Sequence[ExportedCustomer]) -> pa.Table:
    forecasts = [c.forecast for c in customers if c.forecast is not None]
    ids = [c.result.customer_id for c in customers if c.forecast is not None]
    counts = [len(f.yhat) for f in forecasts]
    if not forecasts:
        return FORECAST_SCHEMA.empty_table()

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
    return pa.table(
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


def write_accuracy_part(
    checkpoint_dir: Path, host: str, run_id: str, customers: Sequence[ExportedCustomer]
) -> Path:
    """One row per customer of the shard, in id order, in ``exports/accuracy/part-{host}``."""
    directory = checkpoint_dir / EXPORTS_DIR / ACCURACY
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / accuracy_part_name(host)
    _write_atomically(accuracy_table(run_id, customers), path)
    return path


def accuracy_table(run_id: str, customers: Sequence[ExportedCustomer]) -> pa.Table:
    rows = []
    for customer in sorted(customers, key=lambda c: c.result.customer_id):
        result, metrics = customer.result, customer.result.metrics
        row: dict[str, object] = {
            "customer_id": result.customer_id,
            "run_id": run_id,
            "outcome": result.outcome.value,
            "failure_reason": result.reason,
            "rows": result.rows,
            "holdout_days": metrics.holdout_days if metrics else None,
            "beats_naive": metrics.smape < metrics.naive_smape if metrics else None,
            "forecast_rows": 0 if customer.forecast is None else len(customer.forecast.yhat),
            "export_error": customer.export_error,
        }
        for name in MEASURES:
            row[name] = getattr(metrics, name) if metrics else None
            row[f"naive_{name}"] = getattr(metrics, f"naive_{name}") if metrics else None
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=ACCURACY_SCHEMA)


def _write_atomically(table: pa.Table, path: Path) -> None:
    # ".partial": the checkpoint sync skips it, so S3 never holds half a part.
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial, compression="zstd")
    partial.replace(path)
