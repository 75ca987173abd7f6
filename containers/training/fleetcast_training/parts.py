"""The instance's training parts (``part-00000.parquet``: many customers each), unpacked.

Each part is read once, in the parent process, and each customer's rows are saved to a
small ``{customer_id}.series`` in a local folder (the raw records of
:data:`SERIES_DTYPE`, with no header to parse): workers then load one customer at a time,
in microseconds, and the parent holds a slice of a part at a time, never a whole one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetcast_contracts.ids import is_valid_customer_id
from fleetcast_contracts.shards import RUN_LAST_PERIOD_KEY, TRAIN_COLUMNS, USES

logger = logging.getLogger(__name__)

SERIES_SUFFIX = ".series"
# One customer's rows: what processing wrote, as numpy reads it back without parsing
# (written and read by the same job on the same machine: native byte order). The reading
# interval is the customer's, on every row (NaN: unknown, a single reading); use is the
# index of the period's use in contracts.shards.USES.
SERIES_DTYPE = np.dtype(
    [
        ("ds", "datetime64[us]"),
        ("y", "float64"),
        ("readings", "int64"),
        ("interval_s", "float64"),
        ("use", "uint8"),
    ]
)
_USES = pa.array(USES, type=pa.string())


@dataclass
class UnpackedParts:
    """``series``: customer id -> its ``.series`` file and row count; ``problems``: the
    entries of the parts that could not be used, each with why; ``run_last_period``: the
    run's last period, as the parts say (None: none says)."""

    series: dict[str, tuple[Path, int]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    repeated: set[str] = field(default_factory=set)
    run_last_period: np.datetime64 | None = None

    def saw_run_last_period(self, metadata: dict[bytes, bytes] | None) -> None:
        said = (metadata or {}).get(RUN_LAST_PERIOD_KEY.encode())
        if said is None:
            return
        try:
            period = np.datetime64(said.decode(), "us")
        except ValueError:
            logger.warning(
                "a training part's %s is not a time (%r): exports start after each "
                "customer's own last reading",
                RUN_LAST_PERIOD_KEY,
                said[:40],
            )
            return
        if self.run_last_period is None or period > self.run_last_period:
            self.run_last_period = period


def unpack_parts(parts: list[Path], target: Path) -> UnpackedParts:
    target.mkdir(parents=True, exist_ok=True)
    unpacked = UnpackedParts()
    for part in parts:
        before = set(unpacked.series)
        try:
            reader = pq.ParquetFile(part)
            if reader.schema_arrow.names != list(TRAIN_COLUMNS):
                unpacked.problems.append(
                    (
                        part.name,
                        f"has the columns {reader.schema_arrow.names}, not {list(TRAIN_COLUMNS)}",
                    )
                )
                continue
            _unpack(part.name, reader, target, unpacked)
            unpacked.saw_run_last_period(reader.metadata.metadata)
        except (pa.ArrowInvalid, OSError) as error:
            # Half read: none of its customers is trained, as if none of it could be read.
            for customer_id in set(unpacked.series) - before:
                unpacked.series.pop(customer_id)[0].unlink(missing_ok=True)
            unpacked.problems.append((part.name, f"is not a readable Parquet file: {error}"))
    return unpacked


# Rows read at a time: a part of 12,500 two-year customers is 9 million rows, read in
# slices of a few MB rather than whole (each customer's rows are together in a part).
ROWS_PER_READ = 1 << 18


def _unpack(name: str, reader: pq.ParquetFile, target: Path, unpacked: UnpackedParts) -> None:
    """Each customer of the part to its ``.series`` file, read :data:`ROWS_PER_READ` rows
    at a time; the last customer of a slice waits for the next slice, which may go on
    with its rows."""
    finished: set[str] = set()
    carried: pa.Table | None = None
    for batch in reader.iter_batches(batch_size=ROWS_PER_READ):
        table = pa.Table.from_batches([batch])
        if carried is not None:
            table = pa.concat_tables([carried, table])
        carried = _unpack_customers(name, table, target, unpacked, finished, keep_last=True)
    if carried is not None:
        _unpack_customers(name, carried, target, unpacked, finished, keep_last=False)


def _unpack_customers(
    name: str,
    table: pa.Table,
    target: Path,
    unpacked: UnpackedParts,
    finished: set[str],
    keep_last: bool,
) -> pa.Table | None:
    """Unpack the runs of rows of one customer in ``table``; with ``keep_last``, return
    the last run instead (it may go on in the next slice)."""
    if table.num_rows == 0:
        return None
    encoded = pc.dictionary_encode(table.column("customer_id").combine_chunks())
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
    ends = np.append(starts[1:], len(codes))
    kept = table.slice(int(starts[-1])) if keep_last else None
    if keep_last:
        starts, ends = starts[:-1], ends[:-1]
    ds = table.column("ds").cast(pa.timestamp("us")).to_numpy()
    y = table.column("y").cast(pa.float64()).to_numpy(zero_copy_only=False)
    readings = table.column("readings").cast(pa.int64()).to_numpy(zero_copy_only=False)
    interval = (
        table.column("interval_s")
        .cast(pa.float64())
        .fill_null(np.nan)
        .to_numpy(zero_copy_only=False)
    )
    use_codes = pc.index_in(table.column("use"), value_set=_USES)
    use = use_codes.fill_null(-1).to_numpy(zero_copy_only=False)
    dictionary = encoded.dictionary.to_pylist()
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        customer_id = dictionary[codes[start]]
        if not is_valid_customer_id(customer_id):
            shown = customer_id if len(customer_id) <= 80 else customer_id[:77] + "..."
            unpacked.problems.append((shown, f"in {name} is not a valid customer id"))
            continue
        if customer_id in finished:
            # Parts keep each customer's rows together: which rows are all of them?
            if unpacked.series.pop(customer_id, None) is None:
                continue
            unpacked.problems.append(
                (
                    customer_id,
                    f"has rows in more than one place in {name}, which keeps each "
                    "customer's rows together",
                )
            )
            continue
        finished.add(customer_id)
        if customer_id in unpacked.series or customer_id in unpacked.repeated:
            # Which copy is right cannot be known: neither is trained.
            unpacked.series.pop(customer_id, None)
            if customer_id not in unpacked.repeated:
                unpacked.repeated.add(customer_id)
                unpacked.problems.append(
                    (customer_id, f"appears in {name} and in another part: which is right?")
                )
            continue
        if (use[start:end] < 0).any():
            unknown = table.column("use")[start + int(np.argmin(use[start:end]))].as_py()
            unpacked.problems.append(
                (customer_id, f"in {name} has a period of use {unknown!r:.40}, not one of {USES}")
            )
            continue
        series = np.empty(end - start, dtype=SERIES_DTYPE)
        series["ds"], series["y"] = ds[start:end], y[start:end]
        series["readings"], series["interval_s"] = readings[start:end], interval[start:end]
        series["use"] = use[start:end]
        path = target / f"{customer_id}{SERIES_SUFFIX}"
        series.tofile(path)
        unpacked.series[customer_id] = (path, end - start)
    return kept
