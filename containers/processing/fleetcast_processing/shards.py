"""History shards read and written, and the run's training parts.

The shards are fleetcast's own output, so anything unreadable in one fails the job with
its name rather than being dropped: the merged shard replaces the stored one, and
silently losing customers' past is worse than a failed job. A shard in the totals format
of earlier releases is refused the same way: merged as if its totals were readings, a day
uploaded again would count twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetcast_contracts.files import written_whole
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.ids import is_valid_customer_id
from fleetcast_contracts.shards import (
    HISTORY_COLUMNS,
    HISTORY_SHARDS,
    RUN_LAST_PERIOD_KEY,
    SHARD_SUFFIX,
    TRAIN_COLUMNS,
    USES,
    history_shard_name,
    history_shard_of,
    parse_history_shard_name,
    train_part_count,
    train_part_name,
)
from fleetcast_contracts.training import FLEET_FILE, FLEET_TEACHERS
from fleetcast_processing.aggregate import period_us
from fleetcast_processing.duplicates import reading_keys
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.history import Periods, Readings, training_periods
from fleetcast_processing.usage import UseCounts, UseRules
from fleetcast_processing.validation import EARLIEST, US_PER_SECOND

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us"), nullable=False),
        pa.field("y", pa.float64(), nullable=False),
    ]
)
assert tuple(HISTORY_SCHEMA.names) == HISTORY_COLUMNS
TRAIN_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("ds", pa.timestamp("us"), nullable=False),
        pa.field("y", pa.float64(), nullable=False),
        pa.field("readings", pa.int64(), nullable=False),
        pa.field("interval_s", pa.float64()),
        pa.field("use", pa.string(), nullable=False),
    ]
)
assert tuple(TRAIN_SCHEMA.names) == TRAIN_COLUMNS
_USES = pa.array(USES, type=pa.string())
_EARLIEST_US = int(EARLIEST.timestamp()) * US_PER_SECOND
# Readings sorted by time take about a byte an instant as deltas. Uncompressed: writing is
# most of a shard's cost and compression (zstd) took three times as long for a fifth fewer
# bytes of random readings.
_WRITE_OPTIONS = {
    "compression": "none",
    "use_dictionary": ["customer_id"],
    "column_encoding": {"ts": "DELTA_BINARY_PACKED", "y": "PLAIN"},
}
# Parquet's default rows a data page, named so that the batches below can follow it.
_PAGE_ROWS = 20_000
# The writer takes a shard 1,024 values at a time by default, and for the ids' dictionary
# array finds the distinct ids of each batch for their statistics: batches of a whole page
# cost a fifth less and write the same bytes, since a page still ends every _PAGE_ROWS
# rows (at most 8 bytes a value, 160 kB, well under Parquet's 1 MiB page size).
_WHOLE_PAGE_BATCHES = {"max_rows_per_page": _PAGE_ROWS, "write_batch_size": _PAGE_ROWS}


@dataclass(frozen=True)
class StoredShard:
    """A stored shard's readings: ``names`` its customer ids in sorted order, and each
    reading's customer as an index into them (its rank)."""

    names: list[str]
    ranks: npt.NDArray[np.int64]
    instants: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.ranks)

    @classmethod
    def empty(cls) -> StoredShard:
        none = np.zeros(0, dtype=np.int64)
        return cls([], none, none, np.zeros(0, dtype=np.float64))

    def readings(self, ranks_of: npt.NDArray[np.int64]) -> Readings:
        """The readings with each customer's rank mapped through ``ranks_of`` (a rank among
        more names), keyed and sorted as :mod:`fleetcast_processing.history` expects."""
        ranks = ranks_of[self.ranks]
        return Readings(reading_keys(ranks, self.instants), ranks, self.instants, self.values)


def read_shard(path: Path) -> StoredShard:
    """A stored shard's readings (none when it does not exist yet), checked: the columns
    and types of :data:`HISTORY_SCHEMA`, valid customer ids, finite values, instants from
    2000 on, sorted by customer then time with one reading per customer and instant."""
    if not path.is_file():
        return StoredShard.empty()
    try:
        table = pq.read_table(path, read_dictionary=["customer_id"])
    except (pa.ArrowInvalid, OSError) as error:
        raise _unusable(path, f"is not a readable Parquet file ({error})") from error
    names = tuple(table.schema.names)
    if names != HISTORY_COLUMNS:
        raise _unusable(path, f"has the columns {list(names)}, not {list(HISTORY_COLUMNS)}")
    if table.num_rows == 0:
        return StoredShard.empty()
    try:
        ids = table.column("customer_id").combine_chunks()
        if not pa.types.is_dictionary(ids.type):
            ids = pc.dictionary_encode(ids)
        ids = ids.cast(pa.dictionary(pa.int32(), pa.string()))
        ts = table.column("ts").cast(pa.timestamp("us")).cast(pa.int64())
        y = table.column("y").cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise _unusable(path, f"has a column of the wrong type ({error})") from error
    if ts.null_count or y.null_count or ids.null_count:
        raise _unusable(path, "has an empty value")
    dictionary = ids.dictionary.to_pylist()
    bad_ids = [name for name in dictionary if not is_valid_customer_id(name)]
    if bad_ids:
        raise _unusable(path, f"holds the invalid customer id {bad_ids[0]!r:.80}")
    values = y.to_numpy()
    if not np.isfinite(values).all():
        raise _unusable(path, "holds a value that is not a finite number")
    instants = ts.to_numpy()
    if instants.min() < _EARLIEST_US:
        raise _unusable(path, f"holds a reading before {EARLIEST:%Y-%m-%d}")
    # Ranks: each reading's customer among the shard's ids sorted.
    order = sorted(range(len(dictionary)), key=dictionary.__getitem__)
    rank_of = np.empty(len(dictionary), dtype=np.int64)
    rank_of[order] = np.arange(len(dictionary))
    stored = StoredShard(
        [dictionary[index] for index in order],
        rank_of[ids.indices.to_numpy().astype(np.int64)],
        instants,
        values,
    )
    _check_order(path, stored)
    return stored


def _check_order(path: Path, stored: StoredShard) -> None:
    keys = reading_keys(stored.ranks, stored.instants)
    if len(keys) < 2 or bool((keys[1:] > keys[:-1]).all()):
        return
    repeated = np.flatnonzero(keys[1:] == keys[:-1])
    if len(repeated):
        at = int(repeated[0])
        when = np.datetime64(int(stored.instants[at]), "us")
        raise _unusable(
            path,
            f"holds two readings of customer {stored.names[int(stored.ranks[at])]} at {when}",
        )
    raise _unusable(path, "is not sorted by customer_id, then ts")


def _unusable(path: Path, problem: str) -> UnusableInputError:
    return UnusableInputError(
        f"the stored history shard {path.name} {problem}. Restore it from the bucket's "
        "versions (or remove it, losing its customers' history) and run the upload again."
    )


def check_store(history_input: Path) -> None:
    """Refuse a store this release would half read: one in another number of shards."""
    if not history_input.is_dir():
        return
    for path in history_input.glob(f"shard-*{SHARD_SUFFIX}"):
        parsed = parse_history_shard_name(path.name)
        if parsed is not None and parsed[1] != HISTORY_SHARDS:
            raise UnusableInputError(
                f"the stored history is in {parsed[1]} shards ({path.name}); this release "
                f"keeps it in {HISTORY_SHARDS}. Reshard the history/ prefix first."
            )


def write_shard(path: Path, names: pa.Array, readings: Readings) -> None:
    """The shard's readings (``names``: the ids their ranks index), replacing the stored
    shard only once written whole."""
    # The ids as a dictionary array: Parquet dictionary-encodes them anyway, and a
    # shard's millions of rows are not copied into strings first. Without Arrow's own
    # schema in the file, readers get plain strings back, as HISTORY_SCHEMA says.
    table = pa.table(
        [
            pa.DictionaryArray.from_arrays(pa.array(readings.ranks, type=pa.int32()), names),
            pa.array(readings.instants, type=pa.int64()).cast(pa.timestamp("us")),
            pa.array(readings.values, type=pa.float64()),
        ],
        names=list(HISTORY_COLUMNS),
    )
    with written_whole(path) as partial:
        pq.write_table(table, partial, store_schema=False, **_WRITE_OPTIONS, **_WHOLE_PAGE_BATCHES)


def part_assignment(
    customer_ids: Sequence[str], codes: npt.NDArray[np.int64], instances: int
) -> npt.NDArray[np.int64]:
    """The training part of each customer code (-1: none) for ``instances`` training
    instances: ``codes`` dealt round-robin in id order over train_part_count parts, so the
    parts are within a customer of even."""
    by_id = sorted(codes.tolist(), key=customer_ids.__getitem__)
    count = train_part_count(instances, len(by_id))
    part_of = np.full(len(customer_ids), -1, dtype=np.int64)
    part_of[by_id] = np.arange(len(by_id)) % count
    return part_of


def train_table(periods: Periods, ids: pa.Array, frequency: Frequency) -> pa.Table:
    """Training rows as :data:`TRAIN_SCHEMA` (``periods.customers`` index ``ids``)."""
    return pa.table(
        [
            ids.take(pa.array(periods.customers)),
            pa.array(periods.periods * period_us(frequency), type=pa.int64()).cast(
                pa.timestamp("us")
            ),
            pa.array(periods.values, type=pa.float64()),
            pa.array(periods.readings, type=pa.int64()),
            pa.array(periods.intervals, type=pa.float64(), from_pandas=True),  # NaN: null
            _USES.take(pa.array(periods.use)),
        ],
        schema=TRAIN_SCHEMA,
    )


class TrainParts:
    """The run's training parts, each opened at its first rows and appended to after; on
    closing, each says the run's last period (:data:`RUN_LAST_PERIOD_KEY`), known once
    every part is written."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._writers: dict[int, pq.ParquetWriter] = {}
        self._last_period: np.datetime64 | None = None

    def __enter__(self) -> TrainParts:
        return self

    def __exit__(self, *_: object) -> None:
        last = None if self._last_period is None else str(self._last_period)
        for writer in self._writers.values():
            if last is not None:
                writer.add_key_value_metadata({RUN_LAST_PERIOD_KEY: last})
            writer.close()

    @property
    def written(self) -> int:
        """Parts written so far."""
        return len(self._writers)

    def append(self, table: pa.Table, parts: npt.NDArray[np.int64]) -> dict[int, int]:
        """Append each row of ``table`` to its part (``parts``, one per row; -1: to none),
        keeping the rows' order within each part. Returns the rows added per part."""
        written = pc.max(pc.filter(table.column("ds"), pa.array(parts >= 0))).as_py()
        if written is not None:
            latest = np.datetime64(written, "us")
            if self._last_period is None or latest > self._last_period:
                self._last_period = latest
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        added = {}
        for part in np.unique(sorted_parts[sorted_parts >= 0]).tolist():
            lo, hi = np.searchsorted(sorted_parts, [part, part + 1])
            writer = self._writers.get(part)
            if writer is None:
                self._folder.mkdir(parents=True, exist_ok=True)
                writer = self._writers[part] = pq.ParquetWriter(
                    self._folder / train_part_name(part), TRAIN_SCHEMA, compression="zstd"
                )
            writer.write_table(table.take(pa.array(order[lo:hi])))
            added[part] = int(hi - lo)
        return added


def write_stored_parts(
    customer_ids: Sequence[str],
    retrain: set[str],
    frequency: Frequency,
    rules: UseRules,
    history_input: Path,
    train_output: Path,
    instances: int,
    counts: UseCounts,
) -> dict[str, int]:
    """How many training rows (periods) each of ``customer_ids`` has (none: not in the
    result), and the stored histories of those in ``retrain`` written, unchanged, as
    training parts: what a metadata upload that changes customers' holiday calendars sends
    to training (their use decisions counted in ``counts``). Reads the shards of
    ``customer_ids`` one at a time; writes no history."""
    check_store(history_input)
    wanted = sorted(set(customer_ids))
    to_train = sorted(retrain & set(wanted))
    parts = train_part_count(instances, len(to_train))
    part_of_id = {customer_id: index % parts for index, customer_id in enumerate(to_train)}
    by_shard: dict[int, list[str]] = {}
    for customer_id in wanted:
        by_shard.setdefault(history_shard_of(customer_id), []).append(customer_id)
    found: dict[str, int] = {}
    with TrainParts(train_output) as train_parts:
        for shard, ids in sorted(by_shard.items()):
            stored = read_shard(history_input / history_shard_name(shard))
            ranks = np.arange(len(stored.names))
            readings = stored.readings(ranks)
            wanted_rank = np.isin(np.array(stored.names, dtype=object), ids)
            periods = training_periods(readings.take(wanted_rank[readings.ranks]), frequency, rules)
            names = pa.array(stored.names, type=pa.string())
            rows = np.bincount(periods.customers, minlength=len(stored.names))
            found.update((stored.names[rank], int(rows[rank])) for rank in np.flatnonzero(rows))
            part = np.array([part_of_id.get(name, -1) for name in stored.names], dtype=np.int64)
            train_parts.append(train_table(periods, names, frequency), part[periods.customers])
            trained = part[periods.customers] >= 0
            counts.add(
                stored.names,
                periods.customers[trained],
                periods.use[trained],
                periods.intervals[trained],
            )
    return found


def write_fleet_teachers(
    exclude: set[str],
    limit: int,
    frequency: Frequency,
    rules: UseRules,
    history_input: Path,
    output: Path,
) -> list[str]:
    """Up to ``limit`` stored customers not in ``exclude`` (the run's own), their stored
    histories' training rows written as one file (:data:`FLEET_FILE`, rows as a training
    part's): the fleet family's teachers beyond the run's customers (contracts.training).
    Always writes the file, with no rows when it has none (the training job's channel
    needs an object). Reads history shards in order, so the teachers are a hash sample of
    the store, the same for every run of the same store. Returns their ids."""
    check_store(history_input)
    chosen: list[str] = []
    tables: list[pa.Table] = []
    for shard in range(HISTORY_SHARDS):
        if len(chosen) >= limit:
            break
        path = history_input / history_shard_name(shard)
        if not path.is_file():
            continue
        stored = read_shard(path)
        taken = [r for r, name in enumerate(stored.names) if name not in exclude]
        taken = taken[: limit - len(chosen)]
        if not taken:
            continue
        wanted = np.zeros(len(stored.names), dtype=np.bool_)
        wanted[taken] = True
        readings = stored.readings(np.arange(len(stored.names), dtype=np.int64))
        periods = training_periods(readings.take(wanted[readings.ranks]), frequency, rules)
        tables.append(train_table(periods, pa.array(stored.names, type=pa.string()), frequency))
        chosen += [stored.names[rank] for rank in np.unique(periods.customers).tolist()]
    table = pa.concat_tables(tables) if tables else TRAIN_SCHEMA.empty_table()
    output.mkdir(parents=True, exist_ok=True)
    with written_whole(output / FLEET_FILE) as partial:
        pq.write_table(table, partial, compression="zstd")
    return chosen


def fleet_teacher_limit(run_customers: int, instances: int) -> int:
    """How many stored customers to add so each training instance learns from
    :data:`FLEET_TEACHERS` (its share of the run's customers counts)."""
    per_instance = -(-run_customers // max(1, instances))
    return max(0, FLEET_TEACHERS - per_instance)
