"""A combination: the mean of its members' point forecasts (each a fitted model of
another family). The M3, M4 and M5 competitions' lesson, and ``make accuracy``'s on real
meter data (docs/model-families.md): an average of a few different methods beats
choosing one of them per series.

Its errors are not its members' (their errors are correlated, and their intervals come
from different simulations), so its deviation is its own: the root mean square of the
combination's errors on the customer's backtest, the same for every step ahead. (A served
combination's interval is the calibration's its model carries, which grows with the
horizon where its backtest errors did: :mod:`fleetcast_forecasters.calibration`.)

``model.json``: ``{"kind": KIND, "members": [{"kind": ..., "model": {...}}],
"sigma": s, ...}``. A member may carry a ``"weight"`` (a positive number; 1 when absent):
the point forecast is then the members' weighted mean, which is how
:mod:`fleetcast_forecasters.naive_blend` is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetcast_contracts.families import COMBINATION, FAMILIES, Fit
from fleetcast_forecasters.gaussian import PathForecaster, parse_model, path_forecaster

KIND = COMBINATION


class Combination:
    """A weighted mean of fitted members, compiled; ``kind`` the family it serves as."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

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

        fields = parse_model(model, self.kind)
        try:
            members = fields["members"]
            sigma = float(fields["sigma"])
            if not members or any(member["kind"] in COMBINING for member in members):
                raise ValueError(f"a {self.kind} needs members, none of them a combination")
            weights = [member.get("weight", 1.0) for member in members]
            if not all(_positive_number(weight) for weight in weights):
                raise ValueError(
                    f"a {self.kind}'s member weights must be positive numbers: {weights}"
                )
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
            raise ValueError(f"model.json is not a fitted {self.kind} model: {error!r}") from None
        yhat = np.average(paths, axis=0, weights=weights)
        return path_forecaster(fields, frequency, yhat, np.full(horizon, sigma), last_history)


def _positive_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < np.inf


# The kinds written as a combination of members: none may be another's member.
COMBINING = tuple(entry.kind for entry in FAMILIES if entry.fit is Fit.MADE_OF_MEMBERS)

FAMILY = Combination(KIND)
