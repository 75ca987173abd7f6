"""A training run's forecast export and accuracy table, read from S3 for the CLI.

pyarrow reads them: it is what the training job writes them with, already a dependency
of the CLI and the containers, and it reads the parts of a run straight from the bytes S3
returns. SQL over them is Athena's (the Glue tables in template.yaml, docs/export.md).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from fleetcast_common.registry import ModelRegistry
from fleetcast_contracts import layout
from fleetcast_training.run_exports import (
    ACCURACY_SCHEMA,
    FORECAST_SCHEMA,
    FORECASTS,
    exports_prefix,
    is_part_key,
)

SCHEMAS = {FORECASTS: FORECAST_SCHEMA, "accuracy": ACCURACY_SCHEMA}
OUTPUT_FORMATS = (".parquet", ".csv")


class ExportNotFoundError(Exception):
    """The run has no export of that table: the text says why it may not."""


def read_run_table(s3: Any, bucket: str, run_id: str, table: str) -> pa.Table:
    """Every part of ``table`` (forecasts or accuracy) the run's instances wrote."""
    prefix = exports_prefix(run_id, table)
    keys = [
        entry["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for entry in page.get("Contents", [])
        if is_part_key(entry["Key"])
    ]
    if not keys:
        raise ExportNotFoundError(
            f"run {run_id} has no {table} export at s3://{bucket}/{prefix} (a run trained "
            "before exports existed or with ForecastExportDays=0, or one still training)"
        )
    parts = []
    for key in sorted(keys):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            parts.append(pq.read_table(io.BytesIO(body), schema=SCHEMAS[table]))
        except (pa.ArrowInvalid, OSError) as error:
            raise ExportNotFoundError(
                f"s3://{bucket}/{key} is not a readable part: {error}"
            ) from None
    return pa.concat_tables(parts)


def runs_with_exports(s3: Any, bucket: str) -> list[str]:
    """Run ids under ``models/`` whose forecast export has a part, in run order."""
    runs = []
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=layout.MODELS_PREFIX, Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            run_id = common["Prefix"][len(layout.MODELS_PREFIX) :].rstrip("/")
            listed = s3.list_objects_v2(
                Bucket=bucket, Prefix=exports_prefix(run_id, FORECASTS), MaxKeys=1
            )
            if listed.get("KeyCount", 0):
                runs.append(run_id)
    return sorted(runs)


def latest_registered_run(s3: Any, bucket: str, registry: ModelRegistry) -> str:
    """The newest run with an export whose registration is complete."""
    runs = runs_with_exports(s3, bucket)
    for run_id in reversed(runs):
        registration = registry.run(run_id)
        if registration is not None and registration.complete:
            return run_id
    if runs:
        raise ExportNotFoundError(
            f"no run with an export is registered yet (the latest is {runs[-1]}): "
            "wait for `fleetcast status` to say registered, or pass --run"
        )
    raise ExportNotFoundError(f"no run in s3://{bucket}/{layout.MODELS_PREFIX} has an export yet")


def with_live_column(table: pa.Table, run_id: str, registry: ModelRegistry) -> pa.Table:
    """``table`` and a ``live`` column: true where this run's model is the customer's live
    model now, by the registry's LIVE records (read in batches, not one per row)."""
    customers = pc.unique(table.column("customer_id")).to_pylist()
    states = registry.states(customers, run_id)
    live = {
        customer
        for customer, state in states.items()
        if state.live is not None and state.live.run_id == run_id
    }
    flags = pc.is_in(table.column("customer_id"), value_set=pa.array(sorted(live), pa.string()))
    return table.append_column(pa.field("live", pa.bool_(), nullable=False), flags)


def write_table(table: pa.Table, path: Path) -> None:
    """Parquet or CSV by ``path``'s suffix."""
    if path.suffix not in OUTPUT_FORMATS:
        raise ValueError(f"{path}: the output must end in {' or '.join(OUTPUT_FORMATS)}")
    if path.suffix == ".csv":
        pa_csv.write_csv(table, path)
    else:
        pq.write_table(table, path, compression="zstd")
