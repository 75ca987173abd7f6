"""A training run's forecast export and accuracy table: where they live and their schemas.

The training job writes both as Parquet into its checkpoint directory, which is the one
way out of a job with network isolation; SageMaker syncs it to ``models/{run_id}/``
(:func:`fleetcast_contracts.layout.checkpoint_prefix`), so a run's files are

- ``models/{run_id}/exports/forecasts/part-{host}-{n}.parquet``: every trained (or
  resumed) customer's forecast, :data:`FORECAST_SCHEMA`, a few parts per instance;
- ``models/{run_id}/exports/accuracy/part-{host}.parquet``: one row per customer of the
  instance's shard, failed ones included, :data:`ACCURACY_SCHEMA`.

The Glue tables in template.yaml read them with ``run_id`` as a projected partition. The
CLI (``fleetcast export``, ``report``, ``status``) reads them; no Lambda function does, so
pyarrow stays out of the functions' layer.
"""

from __future__ import annotations

import pyarrow as pa

from fleetcast_contracts import families
from fleetcast_contracts.layout import checkpoint_prefix

EXPORTS_DIR = "exports"
FORECASTS = "forecasts"
ACCURACY = "accuracy"
PART_PREFIX = "part-"
PARQUET_SUFFIX = ".parquet"

# Customers per forecast part: an instance writes a part per this many customers (30
# daily rows each: 600,000 rows, ~10 MB), so the objects per instance stay few.
CUSTOMERS_PER_PART = 20_000

FORECAST_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        # Milliseconds: what Athena's timestamp reads from Parquet without surprises.
        pa.field("ds", pa.timestamp("ms"), nullable=False),
        pa.field("yhat", pa.float64(), nullable=False),
        # Null for a model fitted with uncertainty_samples=0: Prophet gives no interval.
        pa.field("yhat_lower", pa.float64()),
        pa.field("yhat_upper", pa.float64()),
    ]
)

# The measures of the model and of seasonal-naive, in this order, with ``naive_`` before
# the second set (fleetcast_contracts.model_archive.HoldoutMetrics has the same names).
MEASURES = ("smape", "wape", "mase", "rmse", "mae")
# The model families a customer's backtest scores (every candidate a job may train, their
# combination and naive blend: the family catalogue's), each with a ``backtest_wape_``
# column (null where it was not a candidate or could not be fitted).
SCORED_KINDS = families.SCORED_KINDS

ACCURACY_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        # trained, resumed (kept from before a spot interruption) or failed.
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("failure_reason", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("holdout_days", pa.int32()),
        *(pa.field(name, pa.float64()) for name in MEASURES),
        *(pa.field(f"naive_{name}", pa.float64()) for name in MEASURES),
        # The model's holdout sMAPE is below seasonal-naive's (null for a failed customer).
        pa.field("beats_naive", pa.bool_()),
        # The customer's rows in the forecast export, and why there are none if so.
        pa.field("forecast_rows", pa.int32(), nullable=False),
        pa.field("export_error", pa.string()),
        # Which family's model the customer was served, the next best on its backtest,
        # the backtest's windows and every candidate's WAPE over them (the measures
        # above are then the served model's and naive's on the same windows).
        pa.field("model_kind", pa.string()),
        pa.field("runner_up", pa.string()),
        pa.field("backtest_windows", pa.int32()),
        *(pa.field(f"backtest_wape_{kind}", pa.float64()) for kind in SCORED_KINDS),
        # A level shift this many days before the end of the history, which the members
        # that cannot follow it were left out for (fleetcast_training.level_shift).
        pa.field("level_shift_days", pa.int32()),
    ]
)


def exports_prefix(run_id: str, table: str) -> str:
    """``models/{run_id}/exports/{table}/``: where the run's parts of ``table`` land."""
    return f"{checkpoint_prefix(run_id)}{EXPORTS_DIR}/{table}/"


def forecast_part_name(host: str, number: int) -> str:
    return f"{PART_PREFIX}{host}-{number:05d}{PARQUET_SUFFIX}"


def accuracy_part_name(host: str) -> str:
    return f"{PART_PREFIX}{host}{PARQUET_SUFFIX}"


def is_part_key(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return name.startswith(PART_PREFIX) and name.endswith(PARQUET_SUFFIX)
