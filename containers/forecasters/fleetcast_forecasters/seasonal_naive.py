"""Seasonal naive: the last season repeated (last week for daily data, last day for
hourly). The benchmark every forecast must beat, and the quality gate's yardstick: it
is always a candidate, so every customer has a live model at least as good.

A period of the last season with no usable value takes the same period of the season
before it (up to :data:`SEASONS_BACK` back), else the mean of the usable ones. The
errors' deviation is the in-sample seasonal differences' root mean square, growing with
the seasons ahead as a random walk's over seasons does: ``sigma * sqrt(k + 1)`` for the
``k``-th season ahead.

``model.json``: ``{"kind": "seasonal_naive", "season": [...], "sigma": s, ...}`` with
the season's values from the first period after the history on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetcast_forecasters.candidates import (
    BacktestPlan,
    CandidateFits,
    FloatArray,
    Histories,
    Model,
    empty_backtest,
)
from fleetcast_forecasters.gaussian import (
    PathForecaster,
    common_fields,
    floats,
    parse_model,
    path_forecaster,
)

KIND = "seasonal_naive"
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
    changes = values[season:origin] - values[: origin - season]
    finite = np.isfinite(changes)
    count = finite.sum(axis=0)
    squares = np.where(finite, changes, 0.0) ** 2
    return np.sqrt(squares.sum(axis=0) / np.maximum(count, 1))


def repeated(season_values: FloatArray, horizon: int) -> FloatArray:
    """The season (first axis) repeated over ``horizon`` steps."""
    reps = -(-horizon // season_values.shape[0])
    return np.tile(season_values, (reps,) + (1,) * (season_values.ndim - 1))[:horizon]


class _SeasonalNaive:
    kind = KIND

    def fit(self, histories: Histories, plan: BacktestPlan) -> CandidateFits:
        season = histories.season
        backtest = empty_backtest(histories, plan)
        for window, origin in enumerate(plan.origins):
            fits = histories.fits_before(origin)
            path = repeated(last_season(histories.values, origin, season), plan.horizon)
            backtest[:, window, :] = np.where(fits[:, None], path.T, np.nan)
        end = histories.periods
        latest = last_season(histories.values, end, season)
        sigma = seasonal_sigma(histories.values, end, season)
        models: list[Model | None] = []
        for customer in range(histories.customers):
            values = latest[:, customer]
            if np.isnan(values).any() or not np.isfinite(sigma[customer]):
                models.append(None)
                continue
            models.append(
                {
                    "kind": KIND,
                    "season": values.tolist(),
                    "sigma": float(sigma[customer]),
                    **common_fields(
                        histories.last_history[customer],
                        histories.uncertainty_samples,
                        histories.interval_width,
                    ),
                }
            )
        return CandidateFits(KIND, backtest, models)

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> PathForecaster:
        fields = parse_model(model, KIND)
        try:
            season_values = floats(fields, "season")
            sigma = float(fields["sigma"])
            if not season_values.size:
                raise ValueError("the model's season is empty")
        except (KeyError, TypeError) as error:
            raise ValueError(f"model.json is not a fitted {KIND} model: {error!r}") from None
        seasons_ahead = np.arange(horizon) // season_values.size
        deviations = sigma * np.sqrt(seasons_ahead + 1.0)
        return path_forecaster(
            fields, frequency, repeated(season_values, horizon), deviations, last_history
        )


FAMILY = _SeasonalNaive()
