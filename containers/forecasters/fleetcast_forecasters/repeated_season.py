"""What every family whose forecast is one season repeated shares: seasonal naive (the
last season) and the seasonal median (each position's median over the last seasons).

Such a family says only how it makes the season's values and their errors' deviation
from the rows before an origin (:meth:`RepeatedSeason.profile`) and how that deviation
grows with the steps ahead (:meth:`RepeatedSeason.deviations`); the backtest, the
whole-history model and its compilation are the same for all of them.

``model.json``: ``{"kind": ..., "season": [...], "sigma": s, ...}`` with the season's
values from the first period after the history on.
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
    fitted_model,
    floats,
    parse_model,
    path_forecaster,
)


def repeated(season_values: FloatArray, horizon: int) -> FloatArray:
    """The season (first axis) repeated over ``horizon`` steps."""
    reps = -(-horizon // season_values.shape[0])
    return np.tile(season_values, (reps,) + (1,) * (season_values.ndim - 1))[:horizon]


class RepeatedSeason:
    """A family that forecasts one season of values, repeated."""

    kind: str

    def profile(
        self, values: FloatArray, origin: int, season: int
    ) -> tuple[FloatArray, FloatArray]:
        """From ``values`` (rows by customers) before ``origin``: the season's values
        from ``origin`` on (season by customers, NaN for a customer it cannot forecast)
        and each customer's errors' deviation."""
        raise NotImplementedError

    def deviations(self, sigma: float, horizon: int, season: int) -> FloatArray:
        """The errors' deviation of each of ``horizon`` steps ahead."""
        raise NotImplementedError

    def fit(self, histories: Histories, plan: BacktestPlan) -> CandidateFits:
        season = histories.season
        backtest = empty_backtest(histories, plan)
        for window, origin in enumerate(plan.origins):
            fits = histories.fits_before(origin)
            path = repeated(self.profile(histories.values, origin, season)[0], plan.horizon)
            backtest[:, window, :] = np.where(fits[:, None], path.T, np.nan)
        latest, sigma = self.profile(histories.values, histories.periods, season)
        models: list[Model | None] = []
        for customer in range(histories.customers):
            fields = {
                "kind": self.kind,
                "season": latest[:, customer].tolist(),
                "sigma": float(sigma[customer]),
            }
            models.append(fitted_model(histories, customer, fields))
        return CandidateFits(self.kind, backtest, models)

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> PathForecaster:
        fields = parse_model(model, self.kind)
        try:
            season_values = floats(fields, "season")
            sigma = float(fields["sigma"])
            if not season_values.size:
                raise ValueError("the model's season is empty")
        except (KeyError, TypeError) as error:
            raise ValueError(f"model.json is not a fitted {self.kind} model: {error!r}") from None
        return path_forecaster(
            fields,
            frequency,
            repeated(season_values, horizon),
            self.deviations(sigma, horizon, season_values.size),
            last_history,
        )
