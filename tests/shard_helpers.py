"""Reading and writing the jobs' Parquet shards in tests (contracts.shards), as rows per
customer: ``{customer_id: [(ds, y), ...]}`` with ``ds`` as processing labels it
(``YYYY-MM-DD`` for daily data, ``YYYY-MM-DDTHH:00:00`` for hourly)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fleetcast_common.contracts.shards import (
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
        ds = table.column("ds").cast(pa.timestamp("us")).to_numpy()
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


def parts_in(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*{SHARD_SUFFIX}")) if folder.is_dir() else []


def write_history(folder: Path, customer_id: str, rows: Rows) -> Path:
    """Add a customer's rows to its history shard in ``folder`` (what an earlier run left)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / history_shard_name(history_shard_of(customer_id))
    table = pa.table(
        {
            "customer_id": pa.array([customer_id] * len(rows), pa.string()),
            "ds": pa.array(np.array([ds for ds, _ in rows], dtype="datetime64[us]")),
            "y": pa.array([y for _, y in rows], pa.float64()),
        }
    )
    if path.is_file():
        table = pa.concat_tables([pq.read_table(path), table])
    pq.write_table(table, path)
    return path


__all__ = ["HISTORY_SHARDS", "parts_in", "read_rows", "write_history"]
