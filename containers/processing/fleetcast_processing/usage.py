"""What training is to do with each period: fit it, or leave it out as incomplete or
inactive (the ``use`` column of contracts.shards, which defines the rules).

A period is complete when its readings cover enough of its time, not when there are
enough of them. Each reading covers the time since its meter's previous reading, up to a
limit (:func:`longest_cover`): a meter that misses a transmission sends the consumption
with its next reading (smart water and gas meters, and electricity meters on poor radio
links, do), so a day with readings missing can still be whole, and a meter whose
timestamps jitter covers its day with gaps a little shorter and a little longer than
usual. Whether a meter carries is read from its own readings (:func:`carrying_meters`):
where readings are lost rather than carried (a half-hourly electricity meter's missing
half-hours), a reading covers no more than its own interval, and the rule is the reading
count it replaced (44 of 48 half-hours make a whole day). A gap beyond the limit is time nobody measured (the meter was off, the readings
were lost): its reading covers only the limit, the rest is uncovered. A meter's first
reading covers one usual interval, so the stretch before it (a meter installed at noon)
leaves its first day uncovered, and a history cut at 15:00 leaves that day's evening
uncovered. A period is credited with the time inside it, whichever reading covers it
(``fleetcast_processing.history``: a reading's cover may reach back into the period before
its own, and a meter's last reading covers one interval after it). A period is incomplete when less than FLEETCAST_INCOMPLETE_BELOW (90%) of it
is covered, and every period of a meter that reads less often than the periods (daily
readings in hourly periods: :func:`period_use`) is incomplete.

Nothing is changed or invented here: every period stays in the training parts with its
total and its reading count, and the stored history keeps every reading. The decisions
are counted per customer and for the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.processing import DEFAULT_INCOMPLETE_BELOW, DEFAULT_ZERO_RUN_DAYS
from fleetcast_contracts.shards import (
    USE_INACTIVE,
    USE_INCOMPLETE,
    USE_OK,
    USES,
    reads_less_often,
)
from fleetcast_processing.aggregate import period_us

OK, INCOMPLETE, INACTIVE = (USES.index(use) for use in (USE_OK, USE_INCOMPLETE, USE_INACTIVE))
_SECONDS_PER_DAY = 86_400
# A reading covers at least this many of its meter's usual intervals back: one missed
# transmission carried into the next reading, or a late reading followed by an early one.
CARRIED_INTERVALS = 2.0
# A gap up to this many intervals is the meter's usual one (jitter); longer, readings are
# missing before the reading that ends it.
USUAL_GAP = 1.5


@dataclass(frozen=True)
class UseRules:
    incomplete_below: float = DEFAULT_INCOMPLETE_BELOW
    zero_run_days: float = DEFAULT_ZERO_RUN_DAYS


def longest_cover(
    intervals: npt.NDArray[np.float64], frequency: Frequency, rules: UseRules
) -> npt.NDArray[np.float64]:
    """The longest gap (seconds) a reading covers, for meters of ``intervals``: twice the
    interval, or the share of a period that may be uncovered with the period still whole
    (10% of a day: 2.4 hours), whichever is longer. A gap that short holds less than a
    whole period may lack, so a run of missed transmissions (three in a row happen every
    few days to a meter that misses one in five) is not mistaken for a meter that was off;
    a meter whose readings were lost rather than carried is then still short by no more
    than the reading count rule let a whole day be."""
    share = (1.0 - rules.incomplete_below) * period_us(frequency) / 1_000_000
    return np.maximum(CARRIED_INTERVALS * intervals, share)


def carrying_meters(
    meters: npt.NDArray[np.int64],
    gaps: npt.NDArray[np.float64],
    intervals: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    longest: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Per reading, whether its meter carries missed readings into the next one (arrays
    per reading; ``meters`` numbers each reading's meter from 0, in order).

    A carrying meter's reading after ``k`` missing intervals holds about ``k + 1``
    intervals' consumption; a meter that loses readings sends one interval's, as after a
    usual gap. A meter carries when its readings after gaps (up to ``longest``) are, on
    average, nearer the first than the second: above the mean of what the two would give.
    A meter with no such gap carries (its gaps are all usual: a jittered meter's readings
    cover the time between them), and so does a meter whose readings come early about as
    often as late (timestamps that jitter by up to an interval)."""
    if len(meters) == 0:
        return np.zeros(0, dtype=np.bool_)
    count = int(meters[-1]) + 1
    # Each meter's readings are one run: counts of them are sums over its run.
    starts = np.flatnonzero(np.diff(meters, prepend=-1))
    ratio = gaps / intervals
    usual = ratio <= USUAL_GAP
    after_gap = (ratio > USUAL_GAP) & (gaps <= longest)
    usual_seen = np.add.reduceat(usual, starts, dtype=np.int64)
    late = np.add.reduceat(after_gap, starts, dtype=np.int64)
    # Sums with the other readings as 0.0 are, to the bit, those of the readings picked
    # (bincount adds in order, and adding 0.0 changes no sum), without picking them out.
    with np.errstate(invalid="ignore", divide="ignore"):
        usual_value = (
            np.bincount(meters, np.where(usual, values, 0.0), minlength=count) / usual_seen
        )
        gap_value = np.bincount(meters, np.where(after_gap, values, 0.0), minlength=count) / late
        gap_ratio = np.bincount(meters, np.where(after_gap, ratio, 0.0), minlength=count) / late
        loses = gap_value < usual_value * (1.0 + gap_ratio) / 2.0  # False where NaN
    # A meter whose timestamps jitter by up to an interval (an hourly meter sending at any
    # minute of its hour) has long gaps that are no loss: each follows an early reading.
    # Its readings come early at least half as often as late; a meter that loses readings
    # has long gaps and no early ones.
    early = np.add.reduceat(ratio < 1.0 / USUAL_GAP, starts, dtype=np.int64)
    return ~(loses & (2 * early < late))[meters]


def covered_seconds(
    gaps: npt.NDArray[np.float64],
    intervals: npt.NDArray[np.float64],
    carries: npt.NDArray[np.bool_],
    longest: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """The time each reading covers (arrays per reading): ``gaps`` (seconds since its
    meter's previous reading; NaN for a meter's first) up to :func:`longest_cover` where
    its meter ``carries`` (:func:`carrying_meters`), else up to its meter's interval
    (``intervals``; NaN for a meter with a single reading, whose reading covers NaN:
    nothing can be said of it). A first reading covers one interval."""
    limit = np.where(carries, longest, intervals)
    return np.where(np.isnan(gaps), intervals, np.minimum(gaps, limit))


def period_use(
    customers: npt.NDArray[np.int64],
    periods: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    covered: npt.NDArray[np.float64],
    frequency: Frequency,
    rules: UseRules,
    intervals: npt.NDArray[np.float64],
) -> npt.NDArray[np.int8]:
    """The use code (index into USES) of each row: rows sorted by customer, then period;
    ``covered`` is the seconds its readings cover (:func:`covered_seconds`, summed over
    the period's readings; NaN for a meter with a single reading, never incomplete);
    ``intervals`` its customer's reading interval (seconds; NaN: one reading).

    A meter that reads less often than the periods (daily readings, hourly periods) has
    no period of its own: each of its readings totals a stretch longer than a period, all
    of it put in the period its timestamp falls in, and the periods between have nothing.
    Every period of such a meter is incomplete (contracts.shards' ``reads_less_often``):
    an hourly model of one reading a day was fitted before, on one "hour" a day holding
    the whole day."""
    period_seconds = period_us(frequency) / 1_000_000
    needed = rules.incomplete_below * period_seconds
    with np.errstate(invalid="ignore"):
        incomplete = (covered < needed) | reads_less_often(intervals, period_seconds)
    use = np.where(incomplete, INCOMPLETE, OK).astype(np.int8)
    zero = values == 0
    if not zero.any():
        return use
    # Runs of zero rows, each within one customer.
    new_customer = np.concatenate([[True], customers[1:] != customers[:-1]])
    starts = zero & (new_customer | ~np.concatenate([[False], zero[:-1]]))
    run = np.cumsum(starts) - 1
    rows = np.flatnonzero(zero)
    run_of_row = run[rows]
    first_row = rows[np.concatenate([[True], run_of_row[1:] != run_of_row[:-1]])]
    last_row = rows[np.concatenate([run_of_row[1:] != run_of_row[:-1], [True]])]
    leading = new_customer[first_row]
    span_days = (periods[last_row] - periods[first_row] + 1) * period_seconds / _SECONDS_PER_DAY
    inactive_run = leading | (span_days >= rules.zero_run_days)
    use[rows[inactive_run[run_of_row]]] = INACTIVE
    return use


@dataclass
class UseCounts:
    """The run's use decisions: periods per use, per customer those left out, and
    customers per reading interval."""

    by_use: Counter[str] = field(default_factory=Counter)
    unused: dict[str, dict[str, int]] = field(default_factory=dict)
    by_interval: Counter[str] = field(default_factory=Counter)

    def add(
        self,
        customer_ids: Sequence[str],
        customers: npt.NDArray[np.int64],
        use: npt.NDArray[np.int8],
        intervals: npt.NDArray[np.float64],
    ) -> None:
        """Count rows of ``customers`` (indexing ``customer_ids``), sorted by customer."""
        if len(customers) == 0:
            return
        counts = np.bincount(use, minlength=len(USES))
        self.by_use.update({USES[code]: int(counts[code]) for code in np.flatnonzero(counts)})
        first = np.flatnonzero(np.concatenate([[True], customers[1:] != customers[:-1]]))
        self.by_interval.update(
            "unknown" if np.isnan(interval) else f"{interval:g}"
            for interval in intervals[first].tolist()
        )
        left_out = np.flatnonzero(use != OK)
        if len(left_out) == 0:
            return
        keys = customers[left_out] * len(USES) + use[left_out]
        distinct, per_key = np.unique(keys, return_counts=True)
        for key, count in zip(distinct.tolist(), per_key.tolist(), strict=True):
            customer, code = divmod(key, len(USES))
            self.unused.setdefault(customer_ids[customer], {})[USES[code]] = count
