"""A combination: the mean of its members' point forecasts (each a fitted model of
another family). The M3, M4 and M5 competitions' lesson, and ``make accuracy``'s on real
meter data (docs/model-families.md): an average of a few different methods beats
choosing one of them per series.

Its errors are not its members' (their errors are correlated, and their intervals come
from different simulations), so its deviation is its own: the root mean square of the
combination's errors on the customer's backtest, the same for every step ahead.

``model.json``: ``{"kind": "combination", "members": [{"kind": ..., "model": {...}}],
"sigma": s, ...}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetcast_forecasters.gaussian import PathForecaster, parse_model, path_forecaster

KIND = "combination"


class _Combination:
    kind = KIND

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> PathForecaster:
        # (imported here: the registry imports this module)
        from fleetcast_forecasters.families import compile_archive

        fields = parse_model(model, KIND)
        try:
            members = fields["members"]
            sigma = float(fields["sigma"])
            if not members or any(member["kind"] == KIND for member in members):
                raise ValueError("a combination needs members, none of them a combination")
            paths = [
                compile_archive(
                    member["model"],
                    member["kind"],
                    frequency,
                    horizon,
                    one_period=False,
                    last_history=last_history,
                ).yhat
                for member in members
            ]
        except (KeyError, TypeError) as error:
            raise ValueError(f"model.json is not a fitted {KIND} model: {error!r}") from None
        yhat = np.mean(paths, axis=0)
        return path_forecaster(fields, frequency, yhat, np.full(horizon, sigma), last_history)


FAMILY = _Combination()
