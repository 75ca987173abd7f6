"""The served form of every family whose future is a point path with Gaussian errors.

Seasonal naive, exponential smoothing, Theta and their combinations each reduce, once
compiled, to a point forecast per period and the standard deviation of its error
(:class:`PathForecaster`). The interval and the quantiles are read from one seeded
simulation, as Prophet's are: ``uncertainty_samples`` draws per period of the point plus
the standard deviation times a standard normal, the normals drawn once per seed and
shared by every model forecast with it (a run's export, as for Prophet). So the interval
and the quantiles come from the same samples, the same request gets the same answer, and
asking for quantiles leaves the interval as it is.

Their archives' ``model.json`` hold what each family needs to rebuild that path (states
and parameters, not the forecast itself) and these common fields: ``last_history`` (ISO
time of the last period fitted), ``uncertainty_samples`` and ``interval_width``; a model
fitted with a holiday calendar also ``holidays``, whose effects are added to the point
forecast on the forecast's holidays (:mod:`fleetcast_forecasters.holiday_effects`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_forecasters import calibration
from fleetcast_forecasters.candidates import Histories
from fleetcast_forecasters.forecast import (
    FloatArray,
    Forecast,
    Forecaster,
    all_finite,
    check_request,
    future_periods,
    row_quantiles,
)
from fleetcast_forecasters.holiday_effects import holiday_offsets

# Prophet's defaults, which fleetcast keeps for every family.
UNCERTAINTY_SAMPLES = 1000
INTERVAL_WIDTH = 0.8


@dataclass(frozen=True, slots=True, eq=False)
class PathForecaster:
    """A point path and its errors' standard deviations, ``horizon`` periods of each."""

    dates: npt.NDArray[np.datetime64]
    yhat: FloatArray
    sigma: FloatArray
    uncertainty_samples: int
    interval_width: float
    daily_dates: bool

    @property
    def horizon(self) -> int:
        return int(self.yhat.shape[0])

    def forecast(self, period: int, seed: int, quantiles: tuple[float, ...] = ()) -> Forecast:
        check_request(period, self.horizon, quantiles)
        dates, yhat = self.dates[:period], self.yhat[:period]
        if not self.uncertainty_samples:
            return Forecast(dates, yhat, None, None, quantiles, None)
        samples = (
            standard_normals(seed, period, self.uncertainty_samples) * self.sigma[:period, None]
        )
        samples += yhat[:, None]
        shares = [(1.0 - self.interval_width) / 2, (1.0 + self.interval_width) / 2, *quantiles]
        found = row_quantiles(samples, shares)
        values = np.asarray(found[2:], dtype=np.float64) if quantiles else None
        return Forecast(dates, yhat, found[0], found[1], quantiles, values)


@functools.lru_cache(maxsize=4)
def standard_normals(seed: int, period: int, samples: int) -> FloatArray:
    """One row per period of ``samples`` standard normals, the same for every model and
    host given the seed. Drawn row after row, so the first rows of a longer draw are a
    shorter one's: a day's normals are the same whatever the period asked for.
    Read-only, as they are shared."""
    draws = np.random.default_rng(seed).standard_normal((period, samples))
    draws.setflags(write=False)
    return draws


def parse_model(model: str | dict[str, Any], kind: str) -> dict[str, Any]:
    """``model.json`` as an object, checked to be of ``kind``."""
    if isinstance(model, str):
        try:
            model = json.loads(model)
        except json.JSONDecodeError as error:
            raise ValueError(f"model.json is not JSON: {error}") from None
    if not isinstance(model, dict) or model.get("kind") != kind:
        raise ValueError(f"model.json is not a {kind} model")
    return model


def common_fields(
    last_history: np.datetime64, uncertainty_samples: int, interval_width: float
) -> dict[str, Any]:
    return {
        "last_history": str(np.asarray(last_history).astype("datetime64[s]")),
        "uncertainty_samples": int(uncertainty_samples),
        "interval_width": float(interval_width),
    }


def fitted_model(
    histories: Histories, customer: int, fields: dict[str, Any], enough: bool = True
) -> dict[str, Any] | None:
    """A fitted family's ``model.json`` for ``customer`` of ``histories``: its ``fields``
    and those every model carries (:func:`common_fields`); None when the fit had not
    ``enough`` periods or a number of its fields is not finite."""
    numbers = [value for value in fields.values() if not isinstance(value, str)]
    if not enough or not all(np.isfinite(value).all() for value in numbers):
        return None
    return fields | common_fields(
        histories.last_history[customer], histories.uncertainty_samples, histories.interval_width
    )


def path_forecaster(
    model: dict[str, Any],
    frequency: str,
    yhat: FloatArray,
    sigma: FloatArray,
    last_history: np.datetime64 | None = None,
) -> PathForecaster:
    """The forecaster of a point path and its deviations (as long as the horizon), dated
    after the model's last history time (``last_history`` when the caller knows it)."""
    if last_history is None:
        try:
            last_history = np.datetime64(str(model["last_history"]), "ns")
        except (KeyError, ValueError) as error:
            raise ValueError(f"the model has no readable last_history: {error!r}") from None
    last_ns = int(np.asarray(last_history).astype("datetime64[ns]").astype(np.int64))
    future = future_periods(last_ns, frequency, yhat.shape[0])
    yhat = np.ascontiguousarray(yhat, dtype=np.float64)
    offsets = holiday_offsets(model, future.dates_ns)
    if offsets is not None:
        yhat = yhat + offsets
    sigma = np.ascontiguousarray(np.maximum(sigma, 0.0), dtype=np.float64)
    if not (all_finite(yhat) and all_finite(sigma)):
        raise ValueError("the model's parameters give non-finite forecasts")
    width = float(model.get("interval_width", INTERVAL_WIDTH))
    if not 0 < width < 1 or math.isnan(width):
        raise ValueError(f"interval_width must be within (0, 1), got {width}")
    for array in (yhat, sigma):
        array.setflags(write=False)
    return PathForecaster(
        # Its own copy of the shared dates: what an endpoint counts for a model.
        dates=future.dates.copy(),
        yhat=yhat,
        sigma=sigma,
        uncertainty_samples=int(model.get("uncertainty_samples", UNCERTAINTY_SAMPLES)),
        interval_width=width,
        daily_dates=future.daily,
    )


def calibrated(forecaster: Forecaster, model: dict[str, Any]) -> Forecaster:
    """``forecaster`` with the interval its model's backtest calibrated (its
    ``calibration``: :mod:`fleetcast_forecasters.calibration`), or as it is when the model
    has none. The point path, dates and samples' count stay the family's."""
    found = model.get(calibration.FIELD)
    if found is None:
        return forecaster
    if not isinstance(found, dict):
        raise ValueError(f"the model's {calibration.FIELD} is not an object")
    sigma = calibration.deviations(found, forecaster.yhat)
    sigma.setflags(write=False)
    return PathForecaster(
        dates=forecaster.dates,
        yhat=forecaster.yhat,
        sigma=sigma,
        uncertainty_samples=int(model.get("uncertainty_samples", UNCERTAINTY_SAMPLES)),
        interval_width=float(model.get("interval_width", INTERVAL_WIDTH)),
        daily_dates=forecaster.daily_dates,
    )


def floats(model: dict[str, Any], name: str, size: int | None = None) -> FloatArray:
    """A numeric array field of ``model.json``, of ``size`` values when given."""
    values = np.asarray(model[name], dtype=np.float64).reshape(-1)
    if size is not None and values.shape[0] != size:
        raise ValueError(f"{name} has {values.shape[0]} values, expected {size}")
    return values
