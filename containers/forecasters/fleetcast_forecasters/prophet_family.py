"""Prophet as a family: its archives hold ``prophet.serialize.model_to_json``, compiled by
:func:`fleetcast_forecasters.prophet_compile.compile_model`."""

from __future__ import annotations

from typing import Any

import numpy as np

from fleetcast_contracts.families import PROPHET
from fleetcast_forecasters.prophet_compile import compile_model
from fleetcast_forecasters.prophet_forecaster import ProphetForecaster


class _Prophet:
    kind = PROPHET

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> ProphetForecaster:
        return compile_model(
            model, frequency, horizon, one_period=one_period, last_history=last_history
        )


FAMILY = _Prophet()
