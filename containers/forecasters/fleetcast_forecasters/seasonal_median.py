"""Seasonal median: each period of the season forecast by the median of the same period
over the last :data:`SEASONS` seasons (for daily data, each weekday by the median of the
last four of that weekday), repeated.

A robust cousin of seasonal naive for household meters: one odd day (a guest, a day out, a
stuck reading) moves seasonal naive's forecast for every week ahead, and a mean of the
weeks, but not their median. On ``make accuracy`` (docs/model-families.md) it is a weak
forecaster alone and a strong member of the combination: it is a different kind of error
from the smoothing families', which is what a combination needs.

Periods without a usable value are left out of their median; a position with none in the
last seasons takes the mean of the usable values of those seasons. The errors' deviation
is the root mean square of the last seasons' deviations from their positions' medians,
scaled by ``sqrt(1 + pi / (2 * SEASONS))`` (a median of ``SEASONS`` draws misses the
centre by about that much more than one draw does), the same for every step ahead.

``model.json``: as :mod:`fleetcast_forecasters.repeated_season` says.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from fleetcast_contracts.families import SEASONAL_MEDIAN
from fleetcast_forecasters.candidates import FloatArray
from fleetcast_forecasters.repeated_season import RepeatedSeason

KIND = SEASONAL_MEDIAN
SEASONS = 4
_SPREAD = math.sqrt(1.0 + math.pi / (2 * SEASONS))


def _last_seasons(values: FloatArray, origin: int, season: int) -> FloatArray:
    """``values[origin - SEASONS * season:origin]`` as (seasons, season, customers), NaN
    before the first row."""
    rows = SEASONS * season
    recent = values[max(origin - rows, 0) : origin]
    if recent.shape[0] < rows:
        padding = np.full((rows - recent.shape[0], values.shape[1]), np.nan)
        recent = np.vstack([padding, recent])
    return recent.reshape(SEASONS, season, values.shape[1])


def season_medians(values: FloatArray, origin: int, season: int) -> tuple[FloatArray, FloatArray]:
    """Per customer, the forecast of the ``season`` periods from ``origin`` on (season by
    customers) and its errors' deviation, from the rows before ``origin``; NaN for a
    customer with no usable value in the last seasons."""
    recent = _last_seasons(values, origin, season)
    with warnings.catch_warnings():
        # A position (or a customer) with no usable value: NaN, filled below.
        warnings.simplefilter("ignore", RuntimeWarning)
        medians = np.nanmedian(recent, axis=0)
        means = np.nanmean(recent, axis=(0, 1))
    medians = np.where(np.isnan(medians), means[None, :], medians)
    deviations = recent - medians[None, :, :]
    usable = np.isfinite(deviations)
    count = usable.sum(axis=(0, 1))
    squares = np.where(usable, deviations, 0.0) ** 2
    sigma = np.sqrt(squares.sum(axis=(0, 1)) / np.maximum(count, 1)) * _SPREAD
    # Row origin - SEASONS * season + j is at the same position as origin + j.
    return medians, np.where(count > 0, sigma, np.nan)


class _SeasonalMedian(RepeatedSeason):
    kind = KIND

    def profile(
        self, values: FloatArray, origin: int, season: int
    ) -> tuple[FloatArray, FloatArray]:
        return season_medians(values, origin, season)

    def deviations(self, sigma: float, horizon: int, season: int) -> FloatArray:
        return np.full(horizon, sigma)


FAMILY = _SeasonalMedian()
