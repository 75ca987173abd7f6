"""Reading and writing the jobs' Parquet shards in tests (contracts.shards), as rows per
customer: ``{customer_id: [(time, y), ...]}``, the time of a training part's period
(``ds``) or of a history shard's reading (``ts``) as ``YYYY-MM-DD`` when every time of
the file is a midnight, else ``YYYY-MM-DDTHH:MM:SS``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleetcast_contracts.processing import ProcessingSummary
from fleetcast_contracts.shards import (
    HISTORY_SHARDS,
    SHARD_SUFFIX,
    history_shard_name,
    history_shard_of,
)

Rows = list[tuple[str, float]]


def read_rows(paths: Iterable[Path]) -> dict[str, Rows]:
    """Every customer's rows in these Parquet files, in file order."""
    found: dict[str, Rows] = {}
    for path in sorted(paths):
        table = pq.read_table(path)
        time = "ds" if "ds" in table.column_names else "ts"
        ds = table.column(time).cast(pa.timestamp("us")).to_numpy()
        daily = bool((ds.astype("datetime64[D]") == ds).all())
        labels = np.datetime_as_string(ds, unit="D" if daily else "s")
        for customer_id, label, y in zip(
            table.column("customer_id").to_pylist(),
            labels.tolist(),
            table.column("y").to_pylist(),
            strict=True,
        ):
            found.setdefault(customer_id, []).append((label, float(y)))
    return found


def read_periods(paths: Iterable[Path]) -> dict[str, list[tuple[str, float, int, float | None]]]:
    """Every customer's training rows with their reading counts and interval:
    ``(ds, y, readings, interval_s)``."""
    found: dict[str, list[tuple[str, float, int, float | None]]] = {}
    for path in sorted(paths):
        table = pq.read_table(path)
        labels = read_rows([path])
        counts = table.column("readings").to_pylist()
        intervals = table.column("interval_s").to_pylist()
        rows = iter(zip(counts, intervals, strict=True))
        for customer_id, customer_rows in labels.items():
            found.setdefault(customer_id, []).extend(
                (ds, y, *next(rows)) for ds, y in customer_rows
            )
    return found


def parts_in(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SHARD_SUFFIX}")) if folder.is_dir() else []


def write_history(folder: Path, customer_id: str, rows: Rows) -> Path:
    """Add a customer's readings (``(ts, y)``) to its history shard in ``folder`` (what an
    earlier run left), keeping the shard sorted by customer, then time."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / history_shard_name(history_shard_of(customer_id))
    table = pa.table(
        {
            "customer_id": pa.array([customer_id] * len(rows), pa.string()),
            "ts": pa.array(np.array([ts for ts, _ in rows], dtype="datetime64[us]")),
            "y": pa.array([y for _, y in rows], pa.float64()),
        }
    )
    if path.is_file():
        table = pa.concat_tables([pq.read_table(path), table])
    pq.write_table(table.sort_by([("customer_id", "ascending"), ("ts", "ascending")]), path)
    return path


__all__ = ["HISTORY_SHARDS", "parts_in", "read_periods", "read_rows", "write_history"]


def processing_summary_json(customers: list[str], rows_rejected: int = 0) -> str:
    """The ``summary.json`` of a processing run that sent ``customers`` to training, one
    accepted reading each."""
    return ProcessingSummary(
        source_name="readings.csv",
        frequency="D",
        rows_read=len(customers) + rows_rejected,
        rows_accepted=len(customers),
        rows_rejected=rows_rejected,
        rejected_by_reason={"bad_timestamp": rows_rejected} if rows_rejected else {},
        customers=len(customers),
        new_customers=len(customers),
        days_written=len(customers),
        days_uploaded=len(customers),
        customers_list=customers,
    ).model_dump_json()
