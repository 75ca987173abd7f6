"""What training is to do with each period: fit it, or leave it out as incomplete or
inactive (the ``use`` column of contracts.shards, which defines the rules).

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

from fleetcast_contracts.processing import DEFAULT_INCOMPLETE_BELOW, DEFAULT_ZERO_RUN_DAYS
from fleetcast_contracts.shards import USE_INACTIVE, USE_INCOMPLETE, USE_OK, USES
from fleetcast_processing.aggregate import Frequency

OK, INCOMPLETE, INACTIVE = (USES.index(use) for use in (USE_OK, USE_INCOMPLETE, USE_INACTIVE))
_SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class UseRules:
    incomplete_below: float = DEFAULT_INCOMPLETE_BELOW
    zero_run_days: float = DEFAULT_ZERO_RUN_DAYS


def period_use(
    customers: npt.NDArray[np.int64],
    periods: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    readings: npt.NDArray[np.int64],
    intervals: npt.NDArray[np.float64],
    frequency: Frequency,
    rules: UseRules,
) -> npt.NDArray[np.int8]:
    """The use code (index into USES) of each row: rows sorted by customer, then period."""
    period_seconds = frequency.period_us / 1_000_000
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = np.maximum(period_seconds / intervals, 1.0)  # NaN where no interval
        incomplete = readings < rules.incomplete_below * expected
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
