"""Per-customer accuracy over the held-back horizon, and its summary over customers.

- **WAPE**: sum |actual - forecast| / sum |actual| over the horizon (undefined, NaN, for a
  customer whose horizon sums to 0).
- **MASE**: mean |actual - forecast| over the horizon divided by the in-sample MAE of
  seasonal naive (period 7) on the fit window's daily series (NaN when that is 0). Below
  1 is better than last week repeated was in-sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SEASON = 7
FloatArray = npt.NDArray[np.float64]


def wape(actuals: FloatArray, forecast: FloatArray) -> float:
    scale = float(np.abs(actuals).sum())
    return float(np.abs(actuals - forecast).sum()) / scale if scale > 0 else math.nan


def naive_scale(history: FloatArray, season: int = SEASON) -> float:
    """In-sample MAE of seasonal naive on ``history`` (each day predicted by a season ago)."""
    if history.size <= season:
        return math.nan
    return float(np.abs(history[season:] - history[:-season]).mean())


def mase(actuals: FloatArray, forecast: FloatArray, scale: float) -> float:
    if not scale > 0:
        return math.nan
    return float(np.abs(actuals - forecast).mean()) / scale


@dataclass(frozen=True)
class Summary:
    """One method's figures over a data set's customers (NaN values left out, counted)."""

    median_wape: float
    mean_wape: float
    median_mase: float
    mean_mase: float
    customers: int
    undefined_wape: int

    @classmethod
    def of(cls, wapes: list[float], mases: list[float]) -> Summary:
        finite_wape = [w for w in wapes if math.isfinite(w)]
        finite_mase = [m for m in mases if math.isfinite(m)]
        return cls(
            median_wape=_stat(np.median, finite_wape),
            mean_wape=_stat(np.mean, finite_wape),
            median_mase=_stat(np.median, finite_mase),
            mean_mase=_stat(np.mean, finite_mase),
            customers=len(wapes),
            undefined_wape=len(wapes) - len(finite_wape),
        )


def _stat(function: object, values: list[float]) -> float:
    return float(function(values)) if values else math.nan  # type: ignore[operator]


def beats_share(ours: list[float], theirs: list[float]) -> tuple[int, int]:
    """How many customers with a defined WAPE on both sides ours is strictly lower on, of
    how many; a customer ours has no forecast for (NaN) while theirs does counts as lost."""
    wins = total = 0
    for mine, other in zip(ours, theirs, strict=True):
        if not math.isfinite(other):
            continue
        total += 1
        wins += bool(math.isfinite(mine) and mine < other)
    return wins, total
