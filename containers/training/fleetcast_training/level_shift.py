"""A level shift at the end of a customer's history, and the members that can follow it.

A household that moves out, goes away for the winter or gets a heat pump changes its level
within days, and keeps the new one. The backtest cannot see it: its windows forecast from
origins before the shift, where every candidate was fitted on the old level, so the gate
passes a combination that still carries the old one. ETS and Theta update their level
with every period and follow the shift; two members do not:

- **Prophet**: its trend changes only at changepoints in the first 80% of the history,
  under a sparse prior, so a shift in the last weeks stays in its residuals. One with
  yearly seasonality is kept: a rise or a fall there may be the season's, which its yearly
  terms learnt from the year before (heating, a building closing over Christmas).
- **the seasonal median**: each weekday the median of its last four; it has followed a
  shift once three of its four weeks are after it (:data:`SEASONAL_MEDIAN_FOLLOWS_DAYS`).

The test is distribution-free: the last ``days`` days (at least a week, so no weekday
pattern can pass for a shift) are **all** below, or all above, **every** day of the eight
weeks before them. A household's ordinary variation (a weekend away, a Monday peak, an
odd day) leaves some day of eight weeks beyond the last week's range. A cold spell that
lifts a whole week above the eight before is a rise by this test: where the season
explains it, a Prophet with yearly terms stays in the combination. Shifts up to
four weeks old are looked for; the oldest age that separates is the shift's (a younger
one can separate too when the first days after the shift are the least far from the old
level).

Hourly models are tested on the totals of the last whole 24-period blocks. Decided on
``make accuracy``'s recorded candidates (docs/model-families.md, "Level shifts").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from fleetcast_contracts.families import FOLLOWING_KINDS, PROPHET
from fleetcast_forecasters import seasonal_median

FloatArray = npt.NDArray[np.float64]

SHORTEST_DAYS = 7  # one weekly season
LONGEST_DAYS = 28  # the seasonal median's four weeks
BEFORE_DAYS = 56  # the eight weeks the shift is measured against
BEFORE_AT_LEAST = 28  # of which at least these have a usable value
SEASONAL_MEDIAN_FOLLOWS_DAYS = 21  # three of its four weeks after the shift
ALWAYS_FOLLOW = FOLLOWING_KINDS


@dataclass(frozen=True)
class LevelShift:
    days: int  # the shift's age: it took place this many days before the end
    direction: str  # "fall" or "rise"

    def followers(self, models: dict[str, dict[str, Any] | None]) -> set[str]:
        """Of these fitted candidates' kinds (and their models), the combination's members
        that follow the shift."""
        follow = set(ALWAYS_FOLLOW)
        if self.days >= SEASONAL_MEDIAN_FOLLOWS_DAYS:
            follow.add(seasonal_median.KIND)
        prophet = models.get(PROPHET)
        if prophet is not None and _has_yearly_seasonality(prophet):
            follow.add(PROPHET)
        return follow & set(models)

    def describe(self) -> str:
        return f"a level {self.direction} {self.days} days before the end of the history"


def _has_yearly_seasonality(model: dict[str, Any]) -> bool:
    # prophet.serialize.model_to_dict keeps [names, {name: terms}].
    seasonalities = model.get("seasonalities") or [[]]
    return "yearly" in seasonalities[0]


def daily_totals(values: FloatArray, periods_per_day: int) -> FloatArray:
    """The last whole blocks of ``periods_per_day`` periods (the grid's last period
    ending the last block), summed; NaN for a block with a period without a usable
    value."""
    if periods_per_day == 1:
        return values
    blocks = len(values) // periods_per_day
    tail = values[len(values) - blocks * periods_per_day :]
    return tail.reshape(blocks, periods_per_day).sum(axis=1)


def find(values: FloatArray, periods_per_day: int) -> LevelShift | None:
    """The level shift at the end of ``values`` (a customer's history on its
    grid, NaN where a period has no usable value), or None."""
    days = daily_totals(values, periods_per_day)[-(LONGEST_DAYS + BEFORE_DAYS) :]
    if len(days) < SHORTEST_DAYS + BEFORE_DAYS:
        return None
    usable = np.isfinite(days)
    high = np.where(usable, days, -np.inf)
    low = np.where(usable, days, np.inf)
    ages = np.arange(SHORTEST_DAYS, min(LONGEST_DAYS, len(days) - BEFORE_DAYS) + 1)
    # Each age's days after (suffixes) and the eight weeks before them (windows).
    after_high = np.maximum.accumulate(high[::-1])[ages - 1]
    after_low = np.minimum.accumulate(low[::-1])[ages - 1]
    after_count = np.cumsum(usable[::-1])[ages - 1]
    starts = len(days) - ages - BEFORE_DAYS
    before_high = sliding_window_view(high, BEFORE_DAYS).max(axis=1)[starts]
    before_low = sliding_window_view(low, BEFORE_DAYS).min(axis=1)[starts]
    before_count = sliding_window_view(usable, BEFORE_DAYS).sum(axis=1)[starts]
    enough = (after_count >= SHORTEST_DAYS) & (before_count >= BEFORE_AT_LEAST)
    fall = enough & (after_high < before_low)
    rise = enough & (after_low > before_high)
    found = np.flatnonzero(fall | rise)
    if not len(found):
        return None
    oldest = int(found[-1])
    return LevelShift(int(ages[oldest]), "fall" if fall[oldest] else "rise")
