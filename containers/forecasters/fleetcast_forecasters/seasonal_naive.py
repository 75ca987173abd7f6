"""Seasonal naive: the last season repeated (last week for daily data, last day for
hourly). The benchmark every forecast must beat, and the quality gate's yardstick: it
is always a candidate, so every customer has a live model at least as good.

A period of the last season with no usable value takes the same period of the season
before it (up to :data:`SEASONS_BACK` back), else the mean of the usable ones. The
errors' deviation is the in-sample seasonal differences' root mean square, growing with
the seasons ahead as a random walk's over seasons does: ``sigma * sqrt(k + 1)`` for the
``k``-th season ahead.

``model.json``: as :mod:`fleetcast_forecasters.repeated_season` says.
"""

from __future__ import annotations

import numpy as np

from fleetcast_contracts.families import SEASONAL_NAIVE
from fleetcast_forecasters.candidates import FloatArray
from fleetcast_forecasters.repeated_season import RepeatedSeason

KIND = SEASONAL_NAIVE
SEASONS_BACK = 4


def last_season(values: FloatArray, origin: int, season: int) -> FloatArray:
    """``values[origin - season:origin]`` (rows by customers), gaps filled as the module
    says; NaN only for a customer with no usable value in the last few seasons."""
    latest = values[max(origin - season, 0) : origin].copy()
    if latest.shape[0] < season:
        latest = np.vstack([np.full((season - latest.shape[0], values.shape[1]), np.nan), latest])
    for back in range(2, SEASONS_BACK + 1):
        missing = np.isnan(latest)
        start = origin - back * season
        if not missing.any() or start < 0:
            break
        latest[missing] = values[start : start + season][missing]
    missing = np.isnan(latest)
    if missing.any():
        recent = values[max(origin - SEASONS_BACK * season, 0) : origin]
        usable = np.isfinite(recent)
        count = usable.sum(axis=0)
        total = np.where(usable, recent, 0.0).sum(axis=0)
        means = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        latest = np.where(missing, means[None, :], latest)
    return latest


def seasonal_sigma(values: FloatArray, origin: int, season: int) -> FloatArray:
    """Per customer, the root mean square of ``y[t] - y[t - season]`` before ``origin``."""
    changes = values[season:origin] - values[: max(origin - season, 0)]
    finite = np.isfinite(changes)
    count = finite.sum(axis=0)
    squares = np.where(finite, changes, 0.0) ** 2
    return np.sqrt(squares.sum(axis=0) / np.maximum(count, 1))


class _SeasonalNaive(RepeatedSeason):
    kind = KIND

    def profile(
        self, values: FloatArray, origin: int, season: int
    ) -> tuple[FloatArray, FloatArray]:
        return last_season(values, origin, season), seasonal_sigma(values, origin, season)

    def deviations(self, sigma: float, horizon: int, season: int) -> FloatArray:
        seasons_ahead = np.arange(horizon) // season
        deviation: FloatArray = sigma * np.sqrt(seasons_ahead + 1.0)
        return deviation


FAMILY = _SeasonalNaive()
