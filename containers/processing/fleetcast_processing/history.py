"""A history shard's readings with an upload's merged in, and the training periods of them.

Everything here works on one shard's rows as numpy arrays keyed by the customer's
*rank* (its place among the shard's customer ids in sorted order) and the reading's
instant: ``rank << 41 | milliseconds since 2000`` (:func:`duplicates.reading_keys`), so
that sorting by key sorts by customer id, then time, which is the order the shard is kept
in, and two readings less than a millisecond apart are one reading, as duplicates are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency
from fleetcast_processing.aggregate import US_PER_SECOND, period_keys, period_numbers, period_us
from fleetcast_processing.usage import (
    UseRules,
    carrying_meters,
    covered_seconds,
    longest_cover,
    period_use,
)

_US_PER_MS = 1000
_MS_PER_SECOND = 1000
# Gaps in milliseconds up to 2^40 (34 years) beside 23 bits of customer in one int64.
_GAP_BITS = 40
_GAP_MASK = (1 << _GAP_BITS) - 1


@dataclass(frozen=True)
class Readings:
    """Readings sorted by key (rank, then instant), one per key."""

    keys: npt.NDArray[np.int64]
    ranks: npt.NDArray[np.int64]
    instants: npt.NDArray[np.int64]  # microseconds since 1970, UTC
    values: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, positions: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> Readings:
        return Readings(
            self.keys[positions],
            self.ranks[positions],
            self.instants[positions],
            self.values[positions],
        )


@dataclass(frozen=True)
class Merged:
    """The stored readings with the upload's merged in, and what the merge did.

    ``replaced``: positions in the upload of readings that replaced a stored reading of the
    same customer and instant; ``changed``: those of them with another value, and
    ``stored_values`` the values they replaced (the same length as ``changed``).
    """

    readings: Readings
    replaced: npt.NDArray[np.int64]
    changed: npt.NDArray[np.int64]
    stored_values: npt.NDArray[np.float64]


def merge_readings(stored: Readings, uploaded: Readings) -> Merged:
    """``uploaded`` merged into ``stored`` (both sorted by key, keys unique in each): a
    reading of a key both have is the upload's; every other reading of either is kept."""
    empty = np.zeros(0, dtype=np.int64)
    if len(stored) == 0:
        return Merged(uploaded, empty, empty, np.zeros(0, dtype=np.float64))
    at = np.searchsorted(stored.keys, uploaded.keys)
    inside = at < len(stored)
    hit = np.zeros(len(uploaded), dtype=np.bool_)
    hit[inside] = stored.keys[at[inside]] == uploaded.keys[inside]
    replaced = np.flatnonzero(hit)
    old_values = stored.values[at[replaced]]
    differs = old_values != uploaded.values[replaced]
    kept = np.ones(len(stored), dtype=np.bool_)
    kept[at[replaced]] = False
    rest = stored.take(kept)
    # Both runs sorted, no key in both: each element's place in the merged run is its own
    # index plus how many of the other run's keys come before it.
    place_rest = np.arange(len(rest)) + np.searchsorted(uploaded.keys, rest.keys)
    place_uploaded = np.arange(len(uploaded)) + np.searchsorted(rest.keys, uploaded.keys)
    merged = _scatter(len(rest) + len(uploaded), (rest, place_rest), (uploaded, place_uploaded))
    return Merged(merged, replaced, replaced[differs], old_values[differs])


def _scatter(size: int, *runs: tuple[Readings, npt.NDArray[np.int64]]) -> Readings:
    keys = np.empty(size, dtype=np.int64)
    ranks = np.empty(size, dtype=np.int64)
    instants = np.empty(size, dtype=np.int64)
    values = np.empty(size, dtype=np.float64)
    for run, places in runs:
        keys[places], ranks[places] = run.keys, run.ranks
        instants[places], values[places] = run.instants, run.values
    return Readings(keys, ranks, instants, values)


@dataclass(frozen=True)
class Periods:
    """Training rows: per (customer, period), sorted, the total of the readings, how many
    readings made it, the customer's reading interval (NaN: one reading only) and the
    period's use (an index into contracts.shards.USES: fleetcast_processing.usage).

    ``customers`` are the customers' ranks in their shard (indices into its sorted ids)."""

    customers: npt.NDArray[np.int64]
    periods: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    readings: npt.NDArray[np.int64]
    intervals: npt.NDArray[np.float64]
    use: npt.NDArray[np.int8]

    def __len__(self) -> int:
        return len(self.customers)


def training_periods(readings: Readings, frequency: Frequency, rules: UseRules) -> Periods:
    """The periods of ``readings`` (sorted by rank, then instant) as training gets them."""
    if len(readings) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Periods(empty, empty, np.zeros(0), empty, np.zeros(0), np.zeros(0, np.int8))
    keys = period_keys(readings.ranks, readings.instants, frequency)
    starts = _run_starts(keys)
    ranks = readings.ranks[starts]
    steps = _Steps.of(readings.ranks, readings.instants)
    intervals = _intervals(readings.ranks, steps)
    # Periods are sorted by rank: each rank's interval is repeated over its periods.
    customer_starts = _run_starts(ranks)
    periods = period_numbers(readings.instants[starts], frequency)
    values = np.add.reduceat(readings.values, starts)
    counts = np.diff(starts, append=len(keys))
    cover = _reading_cover(readings, steps, intervals, frequency, rules)
    intervals = np.repeat(intervals, np.diff(customer_starts, append=len(ranks)))
    covered = _period_cover(readings.instants, cover, starts, ranks, periods, intervals, frequency)
    use = period_use(ranks, periods, values, covered, frequency, rules, intervals)
    return Periods(ranks, periods, values, counts, intervals, use)


def _period_cover(
    instants: npt.NDArray[np.int64],
    cover: npt.NDArray[np.float64],
    starts: npt.NDArray[np.int64],
    ranks: npt.NDArray[np.int64],
    periods: npt.NDArray[np.int64],
    intervals: npt.NDArray[np.float64],
    frequency: Frequency,
) -> npt.NDArray[np.float64]:
    """The seconds of each period (a run of readings from ``starts``, of customer ``ranks``,
    whose reading interval is ``intervals``) that its customer's readings cover.

    Each reading covers the ``cover`` seconds before its instant, which may reach back
    across the start of its period: a period is credited with the time inside it,
    whichever reading covers it. (Counted by reading, a meter reading about as often as
    the periods, hourly readings with jittered timestamps in hourly periods, had 40% of
    its hours incomplete: an hour's own reading covered 20 minutes, the next one the rest.)
    A reading covers time after its meter's previous reading only, so only a period's own
    first reading reaches back before it, and only the next period's first reading into
    it. A meter's last reading also covers one interval after it, within its period, as
    its first covers one before it: whether a meter's timestamps start or end its
    intervals, its last whole period is whole, and a history cut at 15:00 leaves that
    day's evening uncovered."""
    seconds = instants / US_PER_SECOND
    begins = seconds - cover
    length = period_us(frequency) / US_PER_SECOND
    opens = (periods * length).astype(np.float64)
    closes = opens + length
    own = np.add.reduceat(cover, starts) - np.maximum(0.0, opens - begins[starts])
    following = np.append(starts[1:], len(seconds))
    same_customer = np.append(ranks[1:] == ranks[:-1], False)
    next_first = np.minimum(following, len(seconds) - 1)
    into = np.maximum(0.0, closes - np.maximum(begins[next_first], opens))
    after_last = np.minimum(intervals, closes - seconds[following - 1])
    return np.asarray(own + np.where(same_customer, into, after_last), dtype=np.float64)


@dataclass(frozen=True)
class _Steps:
    """Of readings sorted by rank, then instant: from each to the next, the milliseconds
    (the instants cut to the millisecond first), and whether it is the same customer's.
    The intervals and the cover both need them."""

    milliseconds: npt.NDArray[np.int64]
    same_customer: npt.NDArray[np.bool_]

    @classmethod
    def of(cls, ranks: npt.NDArray[np.int64], instants: npt.NDArray[np.int64]) -> _Steps:
        return cls(np.diff(instants // _US_PER_MS), ranks[1:] == ranks[:-1])


def _reading_cover(
    readings: Readings,
    steps: _Steps,
    intervals: npt.NDArray[np.float64],
    frequency: Frequency,
    rules: UseRules,
) -> npt.NDArray[np.float64]:
    """The seconds each reading covers (fleetcast_processing.usage), ``steps`` being the
    readings' (:class:`_Steps`) and ``intervals`` each customer's (distinct rank, in
    order)."""
    first = np.concatenate([[True], ~steps.same_customer])
    gaps = np.empty(len(readings))
    gaps[0] = np.nan
    gaps[1:] = steps.milliseconds / _MS_PER_SECOND
    gaps[first] = np.nan
    meters = np.cumsum(first) - 1
    per_reading = intervals[meters]
    if not (gaps > per_reading).any():
        # No gap is longer than its meter's interval (a regular meter, the usual case): a
        # reading covers its gap whether or not its meter carries, and a first reading one
        # interval (covered_seconds' result, without telling carrying meters apart).
        return np.where(first, per_reading, gaps)
    longest = longest_cover(per_reading, frequency, rules)
    carries = carrying_meters(meters, gaps, per_reading, readings.values, longest)
    return covered_seconds(gaps, per_reading, carries, longest)


def reading_intervals(
    ranks: npt.NDArray[np.int64], instants: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Per customer (distinct rank, in order), the median gap in seconds between its
    consecutive readings (sorted by rank, then instant), to the millisecond; of an even
    number of gaps, the mean of the middle two; NaN for a single reading.

    A meter's gaps are mostly its interval, with longer ones where readings are missing:
    when the shortest gap is more than half of a customer's gaps it is their median, which
    costs no sort. The other customers' gaps are sorted in one go, keyed by customer.
    """
    return _intervals(ranks, _Steps.of(ranks, instants))


def _intervals(ranks: npt.NDArray[np.int64], steps: _Steps) -> npt.NDArray[np.float64]:
    starts = _run_starts(ranks)
    medians = np.full(len(starts), np.nan)
    counts = np.diff(starts, append=len(ranks)) - 1  # gaps per customer
    with_gaps = np.flatnonzero(counts > 0)
    if len(with_gaps) == 0:
        return medians
    counts = counts[with_gaps]
    gaps = steps.milliseconds[steps.same_customer]
    group = np.repeat(np.arange(len(with_gaps)), counts)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    shortest = np.minimum.reduceat(gaps, first)
    majority = np.add.reduceat(gaps == shortest[group], first) * 2 > counts
    medians[with_gaps[majority]] = shortest[majority] / _MS_PER_SECOND
    if not majority.all():
        # One sort of int64 keys (customer, then gap) is many times faster than lexsort.
        irregular = ~majority
        picked = irregular[group]
        local = (np.cumsum(irregular) - 1)[group[picked]]
        keys = np.sort((local << _GAP_BITS) | np.minimum(gaps[picked], _GAP_MASK))
        ordered = keys & _GAP_MASK
        n = counts[irregular]
        lo = np.concatenate([[0], np.cumsum(n)[:-1]])
        middle = (ordered[lo + (n - 1) // 2] + ordered[lo + n // 2]) / 2
        medians[with_gaps[irregular]] = middle / _MS_PER_SECOND
    return medians


def _run_starts(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each run of equal values starts (``values`` grouped, e.g. sorted)."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate([[True], values[1:] != values[:-1]]))
