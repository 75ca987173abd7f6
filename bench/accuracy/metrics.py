"""Per-customer accuracy over the held-back horizon, and its summary over customers.

- **WAPE**: sum |actual - forecast| / sum |actual| over the horizon (undefined, NaN, for a
  customer whose horizon sums to 0).
- **MASE**: mean |actual - forecast| over the horizon divided by the in-sample MAE of
  seasonal naive (period 7) on the fit window's daily series (NaN when that is 0). Below
  1 is better than last week repeated was in-sample. The hourly part scales by seasonal
  naive's at period 24 on the hourly series (yesterday's hour repeated).
- **wQL** (Amazon Forecast's weighted quantile loss, AutoGluon's default metric): for each
  q in :data:`QUANTILES`, 2 * sum max(q (A - F_q), (q - 1)(A - F_q)) / sum |A| over the
  horizon, then the mean over the three q. wQL(0.5) of the point forecast is its WAPE.
  A method without a median takes its point forecast as its 0.5 quantile.
- **coverage** of the 80% interval (the 0.1 and 0.9 quantiles): the share of held-back
  days whose actual lies inside it, bounds included, pooled over customers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SEASON = 7
QUANTILES = (0.1, 0.5, 0.9)
LOWER, MEDIAN, UPPER = QUANTILES
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


def quantile_loss(actuals: FloatArray, forecast: FloatArray, q: float) -> float:
    """wQL at one quantile level ``q`` (NaN for a horizon summing to 0)."""
    scale = float(np.abs(actuals).sum())
    if not scale > 0:
        return math.nan
    error = actuals - forecast
    return 2 * float(np.maximum(q * error, (q - 1) * error).sum()) / scale


def wql(actuals: FloatArray, quantiles: dict[float, FloatArray]) -> float:
    """The mean of wQL over :data:`QUANTILES`; NaN when a level is missing."""
    if any(q not in quantiles for q in QUANTILES):
        return math.nan
    return float(np.mean([quantile_loss(actuals, quantiles[q], q) for q in QUANTILES]))


def inside(actuals: FloatArray, lower: FloatArray, upper: FloatArray) -> int:
    """How many of the days' actuals lie within [lower, upper]."""
    return int(((actuals >= lower) & (actuals <= upper)).sum())


@dataclass(frozen=True)
class Summary:
    """One method's figures over a data set's customers (NaN values left out, counted)."""

    median_wape: float
    mean_wape: float
    median_mase: float
    mean_mase: float
    customers: int
    undefined_wape: int
    # NaN for a method without quantiles.
    median_wql: float = math.nan
    mean_wql: float = math.nan
    # Share of the customers' held-back days inside the 80% interval (NaN without one).
    coverage_80: float = math.nan
    # Customers with a defined wQL (an interval and a horizon not summing to 0).
    customers_with_interval: int = 0

    @classmethod
    def of(
        cls,
        wapes: list[float],
        mases: list[float],
        wqls: list[float] | None = None,
        days_inside: tuple[int, int] | None = None,
    ) -> Summary:
        """``days_inside``: (days inside the 80% interval, days with one), pooled."""
        finite_wape = [w for w in wapes if math.isfinite(w)]
        finite_mase = [m for m in mases if math.isfinite(m)]
        finite_wql = [w for w in wqls or [] if math.isfinite(w)]
        inside_days, days = days_inside or (0, 0)
        return cls(
            median_wape=_stat(np.median, finite_wape),
            mean_wape=_stat(np.mean, finite_wape),
            median_mase=_stat(np.median, finite_mase),
            mean_mase=_stat(np.mean, finite_mase),
            customers=len(wapes),
            undefined_wape=len(wapes) - len(finite_wape),
            median_wql=_stat(np.median, finite_wql),
            mean_wql=_stat(np.mean, finite_wql),
            coverage_80=inside_days / days if days else math.nan,
            customers_with_interval=len(finite_wql),
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
