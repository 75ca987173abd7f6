"""The fleet family, served: a customer's forecast from gradient-boosted trees learnt
across its whole shard of customers (fleetcast_training.fleet fits them).

The trees are the shard's; what a customer's archive keeps is what they said for it when
it was trained: the point path of the fitted horizon (the export's, 30 days by default)
from the period after its history, and its errors' deviation at each step. So an endpoint
serves any customer of the family without loading a shard-wide model, an archive stays a
few hundred bytes, and the export and the endpoint give the same numbers. Past the fitted
horizon the path's last season repeats, its deviation the last step's.

``model.json``: ``{"kind": KIND, "path": [...], "sigma": [...], "season": s, ...}``
with the common fields of :mod:`fleetcast_forecasters.gaussian`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetcast_contracts.families import FLEET
from fleetcast_forecasters.gaussian import PathForecaster, floats, parse_model, path_forecaster
from fleetcast_forecasters.repeated_season import repeated

KIND = FLEET


def extended(path: np.ndarray, season: int, horizon: int) -> np.ndarray:
    """``path`` to ``horizon`` steps: past its end, its last ``season`` values repeated."""
    if horizon <= path.shape[0]:
        return path[:horizon]
    tail = repeated(path[-season:], horizon - path.shape[0])
    return np.concatenate([path, tail])


class FleetFamily:
    """A path the fleet's trees made, compiled; ``kind`` the family it serves as."""

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
        fields = parse_model(model, self.kind)
        try:
            path = floats(fields, "path")
            sigma = floats(fields, "sigma", path.shape[0])
            season = int(fields["season"])
            if not path.size or not 0 < season <= path.size:
                raise ValueError("the model's path is empty or shorter than its season")
        except (KeyError, TypeError) as error:
            raise ValueError(f"model.json is not a fitted {self.kind} model: {error!r}") from None
        deviations = np.concatenate([sigma, np.full(max(horizon - sigma.size, 0), sigma[-1])])
        return path_forecaster(
            fields,
            frequency,
            extended(path, season, horizon),
            deviations[:horizon],
            last_history,
        )


FAMILY = FleetFamily(KIND)
