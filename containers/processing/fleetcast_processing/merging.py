"""The upload's readings merged into the stored history, one history shard at a time.

For each shard holding a customer of the upload: its accepted readings (set aside while
the file was read, :mod:`fleetcast_processing.spill`) lose their repeats and the periods
whose total is implausible (both rejected), then merge with the shard's stored readings
reading by reading (:func:`fleetcast_processing.history.merge_readings`), less the
upload's readings of any period that the merge makes implausible (rejected); the shard is
written back whole and its upload customers' training periods set aside for the parts.
Memory holds one shard's upload readings and one stored shard, whatever the size of the
fleet or the upload; untouched shards are neither read nor written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.shards import history_shard_name
from fleetcast_processing.aggregate import period_keys, period_labels, period_totals, period_us
from fleetcast_processing.changes import ChangedReadings
from fleetcast_processing.duplicates import deduplicate, reading_keys
from fleetcast_processing.history import Readings, merge_readings, training_periods
from fleetcast_processing.report import RejectedRows
from fleetcast_processing.shards import (
    TrainParts,
    check_store,
    read_shard,
    train_table,
    write_shard,
)
from fleetcast_processing.spill import ShardSpill
from fleetcast_processing.usage import UseCounts, UseRules

logger = logging.getLogger(__name__)


@dataclass
class MergeCounts:
    """What the merge did, for the job's summary (see ProcessingSummary's fields)."""

    periods_uploaded: int = 0
    readings_new: int = 0
    readings_replaced: int = 0
    readings_changed: int = 0
    readings_stored: int = 0
    customers_with_history: int = 0
    history_shards: int = 0
    periods_written: int = 0
    # The customer codes with periods written (each in one shard only).
    customers: list[int] = field(default_factory=list)
    use: UseCounts = field(default_factory=UseCounts)


@dataclass(frozen=True)
class MergeSettings:
    frequency: Frequency
    max_period_total: float
    history_input: Path
    history_output: Path
    rules: UseRules = field(default_factory=UseRules)


@dataclass(frozen=True)
class TrainingOutput:
    """Where the upload's customers' periods go: ``parts``, each customer code's part in
    ``part_of`` (shards.part_assignment)."""

    parts: TrainParts
    part_of: npt.NDArray[np.int64]


def merge_upload(
    spill: ShardSpill,
    customer_ids: list[str],
    settings: MergeSettings,
    rejected: RejectedRows,
    changed: ChangedReadings,
    training: TrainingOutput,
) -> MergeCounts:
    """Merge every shard of ``spill`` (codes index ``customer_ids``) into its stored shard,
    writing each merged shard and its upload customers' periods to their training parts."""
    check_store(settings.history_input)
    counts = MergeCounts()
    started = time.perf_counter()
    for done, shard in enumerate(spill.shards, start=1):
        _merge_shard(shard, spill, customer_ids, settings, rejected, changed, training, counts)
        if done % 16 == 0 or done == len(spill.shards):
            logger.info(
                "merged %s of %s history shards (%s readings new, %s replaced) in %.1f s",
                done,
                len(spill.shards),
                f"{counts.readings_new:,}",
                f"{counts.readings_replaced:,}",
                time.perf_counter() - started,
            )
    return counts


def _merge_shard(
    shard: int,
    spill: ShardSpill,
    customer_ids: list[str],
    settings: MergeSettings,
    rejected: RejectedRows,
    changed: ChangedReadings,
    training: TrainingOutput,
    counts: MergeCounts,
) -> None:
    upload = spill.read(shard)
    codes = upload.column("code").to_numpy()
    name = history_shard_name(shard)
    stored = read_shard(settings.history_input / name)

    # Ranks: every customer of the shard, stored or uploaded, by id; keys sort by them.
    # Codes are small non-negative integers: counting them is much cheaper than np.unique.
    upload_codes = np.flatnonzero(np.bincount(codes))
    upload_ids = [customer_ids[code] for code in upload_codes.tolist()]
    names = sorted(set(stored.names).union(upload_ids))
    rank_of_name = {customer_id: rank for rank, customer_id in enumerate(names)}
    rank_of_code = np.full(len(customer_ids), -1, dtype=np.int64)
    rank_of_code[upload_codes] = [rank_of_name[customer_id] for customer_id in upload_ids]
    code_of_rank = np.full(len(names), -1, dtype=np.int64)
    code_of_rank[rank_of_code[upload_codes]] = upload_codes
    stored_ranks = np.array([rank_of_name[n] for n in stored.names], dtype=np.int64)
    ids = pa.array(names, type=pa.string())

    uploaded, lines = _usable_readings(
        upload, rank_of_code[codes], ids, settings, rejected, spill.text
    )
    if len(uploaded) == 0:
        return
    history = stored.readings(stored_ranks)
    merged = merge_readings(history, uploaded)
    over = _over_with_history(merged.readings, uploaded, ids, settings, rejected)
    if over is not None:
        uploaded, lines = uploaded.take(~over), lines[~over]
        if len(uploaded) == 0:
            return
        merged = merge_readings(history, uploaded)
    if len(merged.changed):
        changed.add(
            lines[merged.changed],
            ids.take(pa.array(uploaded.ranks[merged.changed])),
            uploaded.instants[merged.changed],
            merged.stored_values,
            uploaded.values[merged.changed],
        )
    write_shard(settings.history_output / name, ids, merged.readings)

    in_upload = np.zeros(len(names), dtype=np.bool_)
    in_upload[uploaded.ranks] = True
    ours = in_upload[merged.readings.ranks]
    # A shard whose customers are all the upload's (a new fleet's) needs no copy of them.
    theirs = merged.readings if ours.all() else merged.readings.take(ours)
    periods = training_periods(theirs, settings.frequency, settings.rules)
    training.parts.append(
        train_table(periods, ids, settings.frequency),
        training.part_of[code_of_rank[periods.customers]],
    )
    counts.use.add(names, periods.customers, periods.use, periods.intervals)
    counts.periods_written += len(periods)
    counts.customers += code_of_rank[np.unique(periods.customers)].tolist()

    counts.history_shards += 1
    counts.periods_uploaded += _runs(
        period_keys(uploaded.ranks, uploaded.instants, settings.frequency)
    )
    counts.readings_replaced += len(merged.replaced)
    counts.readings_new += len(uploaded) - len(merged.replaced)
    counts.readings_changed += len(merged.changed)
    counts.readings_stored += len(theirs)
    counts.customers_with_history += int(np.count_nonzero(in_upload[np.unique(history.ranks)]))


def _usable_readings(
    upload: pa.Table,
    ranks: npt.NDArray[np.int64],
    ids: pa.Array,
    settings: MergeSettings,
    rejected: RejectedRows,
    text: Callable[[npt.NDArray[np.int64]], tuple[pa.Array, pa.Array]],
) -> tuple[Readings, npt.NDArray[np.int64]]:
    """The shard's uploaded readings without repeats (the first line of each customer and
    instant kept) and without periods whose total is implausible, sorted by key; and the
    line of each. The others are rejected (``text``: the upload's text of rows, by their
    ``row``)."""
    instants = upload.column("instant").to_numpy()
    lines = upload.column("line").to_numpy()
    found = deduplicate(ranks, instants, lines)
    if len(found.repeated):
        rows = upload.column("row").to_numpy()[found.repeated]
        rejected.add_duplicates(
            lines[found.repeated],
            ids.take(pa.array(ranks[found.repeated])),
            lambda picked: text(rows[picked]),
            found.original_line,
        )
    kept, keys = found.kept, found.keys
    ranks, instants, lines = ranks[kept], instants[kept], lines[kept]
    values = upload.column("value").to_numpy()[kept]
    plausible = _plausible(ranks, instants, values, ids, settings, rejected)
    if plausible is not None:
        keys, ranks, instants, values, lines = (
            keys[plausible],
            ranks[plausible],
            instants[plausible],
            values[plausible],
            lines[plausible],
        )
    return Readings(keys, ranks, instants, values), lines


def _plausible(
    ranks: npt.NDArray[np.int64],
    instants: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    ids: pa.Array,
    settings: MergeSettings,
    rejected: RejectedRows,
) -> npt.NDArray[np.bool_] | None:
    """Which readings are in a period whose uploaded readings add up to at most the limit
    (None: all of them); the others are rejected a period at a time, so that one absurd
    day cannot skew a customer's model."""
    frequency = settings.frequency
    totals, rows = period_totals(ranks, instants, values, frequency)
    implausible = totals.values > settings.max_period_total
    if not implausible.any():
        return None
    rejected.add_periods(
        ids.take(pa.array(totals.codes[implausible])).to_pylist(),
        period_labels(totals.periods[implausible], frequency),
        totals.values[implausible].tolist(),
        rows[implausible].tolist(),
    )
    return ~np.isin(period_keys(ranks, instants, frequency), totals.keys()[implausible])


def _over_with_history(
    merged: Readings,
    uploaded: Readings,
    ids: pa.Array,
    settings: MergeSettings,
    rejected: RejectedRows,
) -> npt.NDArray[np.bool_] | None:
    """Which uploaded readings are in a period that, with the readings the history already
    holds for it, adds up to more than the limit (None: none of them). The upload's own
    part of each period was checked before the merge (:func:`_plausible`); a day split
    over two files is checked whole here, once both are in. The upload's readings of such
    a period are rejected, the stored ones kept."""
    if len(merged) == len(uploaded):  # the history held none of the shard's readings
        return None
    frequency = settings.frequency
    totals, rows = period_totals(uploaded.ranks, uploaded.instants, uploaded.values, frequency)
    # Each period's readings are one run of the merged keys (rank, then instant).
    start = totals.periods * period_us(frequency)
    low = np.searchsorted(merged.keys, reading_keys(totals.codes, start))
    high = np.searchsorted(merged.keys, reading_keys(totals.codes, start + period_us(frequency)))
    with_stored = np.flatnonzero(high - low > rows)
    if len(with_stored) == 0:
        return None
    bounds = np.column_stack([low[with_stored], high[with_stored]]).ravel()
    # reduceat sums each [low, high) run; the trailing 0 lets a run end at the last reading.
    sums = np.add.reduceat(np.append(merged.values, 0.0), bounds)[::2]
    implausible = sums > settings.max_period_total
    if not implausible.any():
        return None
    picked = with_stored[implausible]
    rejected.add_periods(
        ids.take(pa.array(totals.codes[picked])).to_pylist(),
        period_labels(totals.periods[picked], frequency),
        sums[implausible].tolist(),
        rows[picked].tolist(),
        (high - low - rows)[picked].tolist(),
    )
    keys = period_keys(uploaded.ranks, uploaded.instants, frequency)
    return np.isin(keys, totals.keys()[picked])


def _runs(sorted_keys: npt.NDArray[np.int64]) -> int:
    """How many distinct values a sorted array holds."""
    return int(len(sorted_keys) > 0) + int(np.count_nonzero(sorted_keys[1:] != sorted_keys[:-1]))
