"""The instance's training parts (``part-00000.parquet``: many customers each), unpacked.

Each part is read once, in the parent process, and each customer's rows are saved to a
small ``{customer_id}.series`` in a local folder (the raw records of
:data:`SERIES_DTYPE`, with no header to parse): workers then load one customer at a time,
in microseconds, and the parent never holds more than one part in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetcast_common.contracts.ids import is_valid_customer_id
from fleetcast_common.contracts.shards import COLUMNS

SERIES_SUFFIX = ".series"
# One customer's rows: what processing wrote, as numpy reads it back without parsing
# (written and read by the same job on the same machine: native byte order).
SERIES_DTYPE = np.dtype([("ds", "datetime64[us]"), ("y", "float64")])


@dataclass
class UnpackedParts:
    """``series``: customer id -> its ``.series`` file and row count; ``problems``: the
    entries of the parts that could not be used, each with why."""

    series: dict[str, tuple[Path, int]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    repeated: set[str] = field(default_factory=set)


def unpack_parts(parts: list[Path], target: Path) -> UnpackedParts:
    target.mkdir(parents=True, exist_ok=True)
    unpacked = UnpackedParts()
    for part in parts:
        try:
            table = pq.read_table(part)
        except (pa.ArrowInvalid, OSError) as error:
            unpacked.problems.append((part.name, f"is not a readable Parquet file: {error}"))
            continue
        if table.schema.names != list(COLUMNS):
            unpacked.problems.append(
                (part.name, f"has the columns {table.schema.names}, not {list(COLUMNS)}")
            )
            continue
        _unpack(part.name, table, target, unpacked)
    return unpacked


def _unpack(name: str, table: pa.Table, target: Path, unpacked: UnpackedParts) -> None:
    ids = table.column("customer_id").combine_chunks()
    encoded = pc.dictionary_encode(ids)
    # Each customer's rows are together: sort by customer keeps their order within.
    order = np.argsort(encoded.indices.to_numpy(zero_copy_only=False), kind="stable")
    codes = encoded.indices.to_numpy(zero_copy_only=False)[order]
    ds = table.column("ds").cast(pa.timestamp("us")).to_numpy()[order]
    y = table.column("y").cast(pa.float64()).to_numpy(zero_copy_only=False)[order]
    starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    ends = np.append(starts[1:], len(codes))
    dictionary = encoded.dictionary.to_pylist()
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        customer_id = dictionary[codes[start]]
        if not is_valid_customer_id(customer_id):
            shown = customer_id if len(customer_id) <= 80 else customer_id[:77] + "..."
            unpacked.problems.append((shown, f"in {name} is not a valid customer id"))
            continue
        if customer_id in unpacked.series or customer_id in unpacked.repeated:
            # Which copy is right cannot be known: neither is trained.
            unpacked.series.pop(customer_id, None)
            if customer_id not in unpacked.repeated:
                unpacked.repeated.add(customer_id)
                unpacked.problems.append(
                    (customer_id, f"appears in {name} and in another part: which is right?")
                )
            continue
        series = np.empty(end - start, dtype=SERIES_DTYPE)
        series["ds"], series["y"] = ds[start:end], y[start:end]
        path = target / f"{customer_id}{SERIES_SUFFIX}"
        series.tofile(path)
        unpacked.series[customer_id] = (path, end - start)
