"""The training half of the numpy model families: a batch of customers in, each
customer's backtest forecasts and its model fitted on all of its history out.

A family sees the batch as one array (:class:`Histories`): each customer's history on
its own regular grid (one row per period; a period with no usable value is NaN, never a
low one), right-aligned, so that the last row is every customer's last period and the
backtest's origins (:class:`BacktestPlan`, periods before the end) are the same rows for
all of them. Its recursions then run over every customer (and every parameter set) at
once, as arrays, which is what makes ten candidates cheaper than one Prophet fit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
Model = dict[str, Any]
# A fit needs this many seasons of usable values before its origin (two to start the
# seasonal states from, one more to learn anything at all).
MIN_FIT_SEASONS = 3
# The smoothing families' recursions (ETS; Theta's exponential smoothing) start this many
# seasons before the backtest's first origin, by model frequency (None: at each
# customer's first period). Hourly models: 16 weeks. A recursion is a pass over every
# period (ETS's a Python step each), and two years of hours cost a 20-customer batch
# 0.6 s of ETS and 0.3 s of Theta, four fifths of it on hours that no longer count when
# the backtest starts: a level whose alpha is 0.02 or more forgets 16 weeks to 1e-23, so
# only the choice of parameters (by the errors over the span, not over two years) and
# ETS's slow seasonal states (started from an 8-week profile at the span's start) change.
# Daily models keep their whole history: a few hundred periods cost little.
FIT_SEASONS: dict[Frequency, int | None] = {Frequency.DAILY: None, Frequency.HOURLY: 16}


@dataclass(frozen=True)
class Histories:
    """A batch's histories, ``values[row, customer]``, right-aligned on their grids."""

    values: FloatArray
    first: IntArray  # each customer's first row with a usable value
    last_history: npt.NDArray[np.datetime64]  # each customer's last period's time
    season: int  # periods per season: 7 for daily data, 24 for hourly
    uncertainty_samples: int
    interval_width: float

    @property
    def periods(self) -> int:
        return int(self.values.shape[0])

    @property
    def customers(self) -> int:
        return int(self.values.shape[1])

    def fits_before(self, origin: int) -> npt.NDArray[np.bool_]:
        """Which customers have enough history before ``origin`` to be fitted on it."""
        usable = self._usable_before[origin]
        return (usable >= MIN_FIT_SEASONS * self.season) & (self.first < origin)

    @functools.cached_property
    def _usable_before(self) -> npt.NDArray[np.intp]:
        """``[row, customer]``: the customer's usable values before ``row``, counted once
        (every family and every customer's Prophet backtest asks at each origin: 75 scans
        of a batch's two years of hours, 2 ms a customer)."""
        counts = np.zeros((self.periods + 1, self.customers), dtype=np.intp)
        np.cumsum(np.isfinite(self.values), axis=0, out=counts[1:])
        return counts


@dataclass(frozen=True)
class BacktestPlan:
    """Rolling origins: window ``k`` forecasts rows ``origins[k]`` to ``origins[k] +
    horizon - 1`` from the rows before ``origins[k]``; the last fit is on every row."""

    origins: tuple[int, ...]
    horizon: int

    @classmethod
    def of(cls, periods: int, horizon: int, windows: int) -> BacktestPlan:
        """``windows`` back-to-back windows of ``horizon`` periods ending at the last row."""
        return cls(tuple(periods - k * horizon for k in range(windows, 0, -1)), horizon)

    @property
    def windows(self) -> int:
        return len(self.origins)


@dataclass
class CandidateFits:
    """One family's results for a batch: ``backtest[customer, window, step]`` (NaN where
    the customer had too little history before the window's origin, or the family could
    not fit it) and each customer's model on its whole history (None when it could not)."""

    kind: str
    backtest: FloatArray
    models: list[Model | None]


class CandidateFamily(Protocol):
    kind: str

    def fit(self, histories: Histories, plan: BacktestPlan) -> CandidateFits: ...


def empty_backtest(histories: Histories, plan: BacktestPlan) -> FloatArray:
    return np.full((histories.customers, plan.windows, plan.horizon), np.nan)


def seasonal_slots(origin: int, steps: int, season: int) -> IntArray:
    """The seasonal position (row modulo ``season``) of each of ``steps`` rows from
    ``origin``: a recursion's seasonal states are kept by row position."""
    return np.asarray((origin + np.arange(steps)) % season, dtype=np.intp)


def fit_start(histories: Histories, plan: BacktestPlan) -> IntArray:
    """Each customer's row the smoothing recursions start from (:data:`FIT_SEASONS`): its
    first, or the row that many seasons before the first origin if later."""
    seasons = next(
        (
            count
            for frequency, count in FIT_SEASONS.items()
            if frequency.season_periods == histories.season
        ),
        None,
    )
    if seasons is None:
        return histories.first
    return np.asarray(
        np.maximum(histories.first, plan.origins[0] - seasons * histories.season), dtype=np.intp
    )
