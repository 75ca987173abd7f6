"""The history shards an upload touches, merged one at a time, and the run's training parts.

For each history shard holding a customer of the upload: read the shard (and the old
per-customer files of its customers not yet in it), merge the upload into its customers'
rows, write the shard back whole, and append the merged rows of the upload's customers
to their training parts. Memory holds one shard's totals of the upload and one stored
shard, whatever the size of the fleet or the upload; untouched shards are neither read
nor written.

The shards are fleetcast's own output, so anything unreadable in one fails the job with
its name rather than being dropped: the merged shard replaces the stored one, and
silently losing customers' past is worse than a failed job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fleetcast_common.contracts.ids import is_valid_customer_id
from fleetcast_common.contracts.shards import (
    COLUMNS,
    HISTORY_SHARDS,
    SHARD_SUFFIX,
    history_shard_name,
    history_shard_of,
    parse_history_shard_name,
    train_part_count,
    train_part_name,
)
from fleetcast_processing.aggregate import Frequency, Totals
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.history import load_history, merge
from fleetcast_processing.spill import ShardTotals

SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("ds", pa.timestamp("us"), nullable=False),
        pa.field("y", pa.float64(), nullable=False),
    ]
)


@dataclass
class ShardedWrite:
    """What :func:`write_shards` did, for the job's summary."""

    customers_with_history: int = 0
    rows_written: int = 0
    periods_replaced: int = 0
    history_shards: int = 0
    train_parts: int = 0
    part_rows: list[int] = field(default_factory=list)


def write_shards(
    uploaded: ShardTotals,
    customer_ids: Sequence[str],
    frequency: Frequency,
    history_input: Path,
    history_output: Path,
    train_output: Path,
    instances: int,
) -> ShardedWrite:
    """Merge ``uploaded`` (codes index ``customer_ids``) into the stored history shards and
    write the run's training parts for ``instances`` training instances."""
    _refuse_other_shard_counts(history_input)
    touched = uploaded.codes
    result = ShardedWrite()
    if len(touched) == 0:
        return result
    history_output.mkdir(parents=True, exist_ok=True)
    train_output.mkdir(parents=True, exist_ok=True)

    # Customers dealt round-robin in id order: parts within a customer of even.
    by_id = sorted(touched.tolist(), key=lambda code: customer_ids[code])
    result.train_parts = train_part_count(instances, len(by_id))
    part_of = np.full(len(customer_ids), -1, dtype=np.int64)
    part_of[by_id] = np.arange(len(by_id)) % result.train_parts
    result.part_rows = [0] * result.train_parts
    with _TrainParts(train_output) as parts:
        for shard in uploaded.shards:
            merged = _merge_shard(
                shard,
                uploaded.get(shard),
                customer_ids,
                frequency,
                history_input,
                history_output,
                result,
            )
            written = parts.append(
                _to_table(merged, customer_ids, frequency), part_of[merged.codes]
            )
            for index, rows_written in written.items():
                result.part_rows[index] += rows_written
    return result


def _merge_shard(
    shard: int,
    uploaded: Totals,
    customer_ids: Sequence[str],
    frequency: Frequency,
    history_input: Path,
    history_output: Path,
    result: ShardedWrite,
) -> Totals:
    """Write the shard with the upload merged in; return the merged rows of the upload's
    customers (their whole history)."""
    name = history_shard_name(shard)
    codes = np.unique(uploaded.codes)
    ids = pa.array([customer_ids[code] for code in codes.tolist()], type=pa.string())
    stored = read_shard(history_input / name)
    in_upload = pc.is_in(stored.column("customer_id"), value_set=ids)
    kept = stored.filter(pc.invert(in_upload))
    stored_rows = _to_totals(stored.filter(in_upload), codes, ids, frequency, name)
    # Old per-customer files, for customers written before shards and not moved yet.
    in_shard = set(pc.unique(stored.filter(in_upload).column("customer_id")).to_pylist())
    legacy = {
        int(code): customer_ids[code]
        for code in codes.tolist()
        if customer_ids[code] not in in_shard
    }
    if legacy:
        old = load_history(history_input, legacy, frequency)
        stored_rows = _concat(stored_rows, old)
    result.customers_with_history += len(np.unique(stored_rows.codes))
    merged, replaced = merge(stored_rows, uploaded)
    result.periods_replaced += replaced
    result.rows_written += len(merged)
    table = pa.concat_tables([kept, _to_table(merged, customer_ids, frequency)])
    table = table.sort_by([("customer_id", "ascending"), ("ds", "ascending")])
    _write_atomically(table, history_output / name)
    result.history_shards += 1
    return merged


class _TrainParts:
    """The run's training parts, each opened at its first rows and appended to after."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._writers: dict[int, pq.ParquetWriter] = {}

    def __enter__(self) -> _TrainParts:
        return self

    def __exit__(self, *_: object) -> None:
        for writer in self._writers.values():
            writer.close()

    def append(self, table: pa.Table, parts: npt.NDArray[np.int64]) -> dict[int, int]:
        """Append each row of ``table`` to its part (``parts``, one per row; -1: to none),
        keeping the rows' order within each part. Returns the rows added per part."""
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        added = {}
        for part in np.unique(sorted_parts[sorted_parts >= 0]).tolist():
            lo, hi = np.searchsorted(sorted_parts, [part, part + 1])
            writer = self._writers.get(part)
            if writer is None:
                self._folder.mkdir(parents=True, exist_ok=True)
                writer = self._writers[part] = pq.ParquetWriter(
                    self._folder / train_part_name(part), SCHEMA, compression="zstd"
                )
            writer.write_table(table.take(pa.array(order[lo:hi])))
            added[part] = int(hi - lo)
        return added


def read_shard(path: Path) -> pa.Table:
    """A stored shard's rows (none when it does not exist yet), checked: the columns and
    types of :data:`SCHEMA`, valid customer ids, finite values."""
    if not path.is_file():
        return SCHEMA.empty_table()
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise _unusable(path, f"is not a readable Parquet file ({error})") from error
    if table.schema.names != list(COLUMNS):
        raise _unusable(path, f"has the columns {table.schema.names}, not {list(COLUMNS)}")
    try:
        table = table.cast(SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise _unusable(path, f"has a column of the wrong type ({error})") from error
    bad_ids = [
        i for i in pc.unique(table.column("customer_id")).to_pylist() if not is_valid_customer_id(i)
    ]
    if bad_ids:
        raise _unusable(path, f"holds the invalid customer id {bad_ids[0]!r:.80}")
    if not pc.all(pc.is_finite(table.column("y"))).as_py():
        raise _unusable(path, "holds a value that is not a finite number")
    return table


def _unusable(path: Path, problem: str) -> UnusableInputError:
    return UnusableInputError(
        f"the stored history shard {path.name} {problem}. Restore it from the bucket's "
        "versions (or remove it, losing its customers' history) and run the upload again."
    )


def _refuse_other_shard_counts(history_input: Path) -> None:
    if not history_input.is_dir():
        return
    for path in history_input.glob(f"shard-*{SHARD_SUFFIX}"):
        parsed = parse_history_shard_name(path.name)
        if parsed is not None and parsed[1] != HISTORY_SHARDS:
            raise UnusableInputError(
                f"the stored history is in {parsed[1]} shards ({path.name}); this release "
                f"keeps it in {HISTORY_SHARDS}. Reshard the history/ prefix first."
            )


def _to_totals(
    table: pa.Table,
    codes: npt.NDArray[np.int64],
    ids: pa.Array,
    frequency: Frequency,
    name: str,
) -> Totals:
    """Stored rows of the upload's customers in the job's customer codes."""
    if table.num_rows == 0:
        return Totals.empty()
    positions = pc.index_in(table.column("customer_id"), value_set=ids).to_numpy(
        zero_copy_only=False
    )
    instants = table.column("ds").cast(pa.int64()).to_numpy(zero_copy_only=False)
    periods = frequency.periods(instants)
    return Totals.of(
        codes[positions.astype(np.int64)],
        periods,
        table.column("y").to_numpy(zero_copy_only=False).astype(np.float64),
    )


def _to_table(totals: Totals, customer_ids: Sequence[str], frequency: Frequency) -> pa.Table:
    ids = pa.array(customer_ids, type=pa.string())
    return pa.table(
        {
            "customer_id": ids.take(pa.array(totals.codes)),
            "ds": pa.array(totals.periods * frequency.period_us, type=pa.int64()).cast(
                pa.timestamp("us")
            ),
            "y": pa.array(totals.values, type=pa.float64()),
        },
        schema=SCHEMA,
    )


def _concat(first: Totals, second: Totals) -> Totals:
    if len(first) == 0:
        return second
    if len(second) == 0:
        return first
    return Totals.of(
        np.concatenate([first.codes, second.codes]),
        np.concatenate([first.periods, second.periods]),
        np.concatenate([first.values, second.values]),
    )


def _write_atomically(table: pa.Table, path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial, compression="zstd")
    partial.replace(path)


def write_stored_parts(
    customer_ids: Sequence[str],
    retrain: set[str],
    frequency: Frequency,
    history_input: Path,
    train_output: Path,
    instances: int,
) -> dict[str, int]:
    """How many stored rows each of ``customer_ids`` has (none: not in the result), and
    the stored histories of those in ``retrain`` written, unchanged, as training parts:
    what a metadata upload that changes customers' holiday calendars sends to training.
    Reads the shards of ``customer_ids`` one at a time; writes no history."""
    _refuse_other_shard_counts(history_input)
    wanted = sorted(set(customer_ids))
    to_train = pa.array(sorted(retrain & set(wanted)), pa.string())
    parts = train_part_count(instances, len(to_train))
    by_shard: dict[int, list[str]] = {}
    for customer_id in wanted:
        by_shard.setdefault(history_shard_of(customer_id), []).append(customer_id)
    found: dict[str, int] = {}
    with _TrainParts(train_output) as train_parts:
        for shard, ids in sorted(by_shard.items()):
            table = read_shard(history_input / history_shard_name(shard))
            table = table.filter(pc.is_in(table.column("customer_id"), value_set=pa.array(ids)))
            in_shard = set(pc.unique(table.column("customer_id")).to_pylist())
            legacy = {code: c for code, c in enumerate(ids) if c not in in_shard}
            if legacy:
                old = load_history(history_input, legacy, frequency)
                table = pa.concat_tables([table, _to_table(old, ids, frequency)])
            counts = pc.value_counts(table.column("customer_id"))
            found.update(
                zip(
                    counts.field("values").to_pylist(),
                    counts.field("counts").to_pylist(),
                    strict=True,
                )
            )
            table = table.sort_by([("customer_id", "ascending"), ("ds", "ascending")])
            # Customers dealt round-robin in id order, as write_shards does; -1: not retrained.
            rank = pc.index_in(table.column("customer_id"), value_set=to_train)
            ranks = rank.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            train_parts.append(table, np.where(ranks >= 0, ranks % parts, -1))
    return found
