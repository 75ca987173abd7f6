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
from fleetcast_forecasters.calibration import INTERVAL_WIDTH
from fleetcast_forecasters.candidates import Histories
from fleetcast_forecasters.forecast import (
    FloatArray,
    Forecast,
    Forecaster,
    all_finite,
    check_request,
    future_periods,
    interpolated,
    quantile_positions,
)
from fleetcast_forecasters.holiday_effects import holiday_offsets

# Prophet's defaults, which fleetcast keeps for every family (its interval width:
# calibration.INTERVAL_WIDTH).
UNCERTAINTY_SAMPLES = 1000


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
        shares = ((1.0 - self.interval_width) / 2, (1.0 + self.interval_width) / 2, *quantiles)
        low, high, weight = normals_around(seed, period, self.uncertainty_samples, shares)
        # Each sample is ``yhat + sigma * normal`` with ``sigma >= 0``: rounded, still a
        # non-decreasing function of the normal, so a row's order statistics are its
        # normals', scaled and shifted by the samples' own product and sum, and the
        # quantiles row_quantiles' interpolation between them: the simulation's numbers
        # to the last bit, without drawing (a 720-hour export: 0.04 ms, not 5).
        sigma = self.sigma[:period, None]
        low = low * sigma
        low += yhat[:, None]
        high = high * sigma
        high += yhat[:, None]
        found = interpolated(low, high, weight)
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


@functools.lru_cache(maxsize=16)
def normals_around(
    seed: int, period: int, samples: int, shares: tuple[float, ...]
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per period, the order statistics of :func:`standard_normals` below and above each
    share's position (periods by shares) and the share's weight between them (the rule
    of :func:`~fleetcast_forecasters.forecast.row_quantiles`), read-only: what every
    forecast with this seed, period and shares interpolates between (a run's export
    sorts the normals once per worker, not once per customer)."""
    below, above, weight = quantile_positions(samples, shares)
    ordered = np.sort(standard_normals(seed, period, samples), axis=1)
    low, high = ordered[:, below], ordered[:, above]
    for array in (low, high, weight):
        array.setflags(write=False)
    return low, high, weight


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
    has none. The point path, dates and samples' count stay the family's.

    On a holiday whose effect the point path carries, the deviation is widened by that
    effect, added in quadrature: the effect was learnt from the few times the customer's
    history had the holiday, which the backtest's windows scored rarely or never, so its
    error is taken to be as large as itself (docs/model-families.md: on the buildings'
    Christmas week, the calibrated interval alone covered 42-68% of each day)."""
    found = model.get(calibration.FIELD)
    if found is None:
        return forecaster
    if not isinstance(found, dict):
        raise ValueError(f"the model's {calibration.FIELD} is not an object")
    sigma = calibration.deviations(found, forecaster.yhat)
    effects = holiday_effects_served(model, forecaster.dates)
    if effects is not None:
        sigma = np.hypot(sigma, effects)
    sigma.setflags(write=False)
    return PathForecaster(
        dates=forecaster.dates,
        yhat=forecaster.yhat,
        sigma=sigma,
        uncertainty_samples=int(model.get("uncertainty_samples", UNCERTAINTY_SAMPLES)),
        interval_width=float(model.get("interval_width", INTERVAL_WIDTH)),
        daily_dates=forecaster.daily_dates,
    )


def holiday_effects_served(
    model: dict[str, Any], dates: npt.NDArray[np.datetime64]
) -> FloatArray | None:
    """The holiday effects (:mod:`fleetcast_forecasters.holiday_effects`) the point path
    of ``model`` carries on each of ``dates``: its own, or a combination's members'
    weighted as they are in its mean; None when it carries none. Prophet's holidays (a
    member's ``holidays`` that is its own regressors' JSON, not an object of effects) are
    inside its fit and its simulation, not counted here."""
    dates_ns = np.asarray(dates).astype("datetime64[ns]").astype(np.int64)
    if isinstance(model.get("holidays"), dict):
        return holiday_offsets(model, dates_ns)
    members = model.get("members")
    if not isinstance(members, list):
        return None
    # Offsets are linear in the effects: the members' effects weighted into one field (of
    # one calendar: a customer's members share its country), read once.
    weights = sum(float(member.get("weight", 1.0)) for member in members)
    merged: dict[str, Any] | None = None
    for member in members:
        fitted = member.get("model")
        field = fitted.get("holidays") if isinstance(fitted, dict) else None
        if not isinstance(field, dict) or not isinstance(field.get("effects"), dict):
            continue
        share = float(member.get("weight", 1.0)) / weights
        if merged is None:
            merged = {**field, "effects": {}}
        elif (field.get("country"), field.get("subdivision")) != (
            merged.get("country"),
            merged.get("subdivision"),
        ):
            raise ValueError("a combination's members have holidays of different calendars")
        for name, effect in field["effects"].items():
            merged["effects"][name] = merged["effects"].get(name, 0.0) + share * float(effect)
    return None if merged is None else holiday_offsets({"holidays": merged}, dates_ns)


def floats(model: dict[str, Any], name: str, size: int | None = None) -> FloatArray:
    """A numeric array field of ``model.json``, of ``size`` values when given."""
    values = np.asarray(model[name], dtype=np.float64).reshape(-1)
    if size is not None and values.shape[0] != size:
        raise ValueError(f"{name} has {values.shape[0]} values, expected {size}")
    return values
