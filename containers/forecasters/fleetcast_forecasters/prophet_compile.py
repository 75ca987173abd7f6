"""A fitted Prophet model's JSON compiled into a :class:`ProphetForecaster`.

``prophet.serialize.model_from_json`` plus ``Prophet.predict`` costs ~30 ms per call and
keeps the whole history frame in memory. Everything ``predict`` does for dates after the
history is a closed form of the fitted parameters, so :func:`compile_model` evaluates the
deterministic part (trend, seasonalities, ``yhat``) once for every date a request may
ask for, keeps those arrays and the few scalars the uncertainty simulation needs, and
drops the rest of the model. Holidays (a ``holidays`` frame, Prophet's country holidays
regenerated for the forecast's years, or both) are features like the seasonalities, built
for the future dates as ``Prophet.make_holiday_features`` builds them
(:mod:`fleetcast_forecasters.prophet_features`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetcast_forecasters.forecast import (
    NS_PER_SECOND,
    FloatArray,
    FuturePeriods,
    UnsupportedModelError,
    all_finite,
    default_horizon,
    future_periods,
)
from fleetcast_forecasters.prophet_features import (
    holiday_features,
    holidays_mode,
    mean_step,
    piecewise_linear,
    seasonality_features,
)
from fleetcast_forecasters.prophet_forecaster import ProphetForecaster


def compile_model(
    model_json: str | dict[str, Any],
    frequency: str,
    horizon: int | None = None,
    *,
    one_period: bool = True,
    last_history: np.datetime64 | None = None,
) -> ProphetForecaster:
    """Reduce ``model_to_json`` output (or ``model_to_dict``'s, which it parses to) to a
    :class:`ProphetForecaster`. Without ``one_period`` it cannot forecast a single period,
    and saves parsing the model's history (2 ms of a 2-year daily model): the training
    job's export asks for its whole horizon only.

    Raises :class:`UnsupportedModelError` for models a period alone cannot forecast and
    ``ValueError`` for anything that is not a fitted Prophet model. ``last_history``, the
    latest of the model's history dates when the caller knows it (the training job, which
    has just fitted it), saves parsing them.
    """
    if isinstance(model_json, dict):
        model: Any = model_json
    else:
        try:
            model = json.loads(model_json)
        except json.JSONDecodeError as error:
            raise ValueError(f"model.json is not JSON: {error}") from None
    if not isinstance(model, dict):
        raise ValueError("model.json is not a serialised Prophet model (not an object)")
    if horizon is None:
        horizon = default_horizon(frequency)
    try:
        return _compile(model, frequency, horizon, one_period, last_history)
    except (KeyError, TypeError, IndexError) as error:
        raise ValueError(f"model.json is not a fitted Prophet model: {error!r}") from None


def _compile(
    model: dict[str, Any],
    frequency: str,
    horizon: int,
    one_period: bool = True,
    last_history: np.datetime64 | None = None,
) -> ProphetForecaster:
    _check_supported(model)
    params = _Params.of(model)
    changepoints_t = np.asarray(model["changepoints_t"], dtype=np.float64).reshape(-1)
    y_scale = float(model["y_scale"])
    floor = float(model["y_min"]) if model.get("scaling", "absmax") == "minmax" else 0.0
    linear = model["growth"] == "linear"

    # Prophet keeps start as a POSIX timestamp to the microsecond and t_scale in seconds.
    start_ns = round(float(model["start"]) * 1_000_000) * 1_000
    t_scale_ns = round(float(model["t_scale"]) * NS_PER_SECOND)
    last_ns = (
        _last_history_ns(model["history_dates"])
        if last_history is None
        else int(last_history.astype("datetime64[ns]").astype(np.int64))
    )
    future = future_periods(last_ns, frequency, horizon)
    # Its own copy of the dates, which it keeps: what an endpoint counts for a model.
    dates, dates_ns = future.dates.copy(), future.dates_ns
    t = (dates_ns - start_ns) / t_scale_ns

    additive, multiplicative = _seasonal_terms(model, future, params.beta, horizon)
    additive *= y_scale
    if linear:
        trend_expected, point_trend = _linear_trends(t, params, changepoints_t)
    else:
        trend_expected = np.repeat(params.m[:, None], horizon, axis=1)
        point_trend = np.full(horizon, _over_iterations(params.m))
    point_additive = _over_iterations(additive)
    point_multiplicative = _over_iterations(multiplicative)
    yhat = (point_trend * y_scale + floor) * (1 + point_multiplicative) + point_additive
    # (np.mean's sum and division, without its checks)
    delta = params.delta
    mean_abs_delta = np.add.reduce(np.abs(delta), axis=1) / delta.shape[1] + 1e-8
    if not all(all_finite(a) for a in (yhat, params.sigma_obs, mean_abs_delta)):
        raise ValueError("the model's parameters give non-finite forecasts")
    # Shared by every request thread: make sure none can change them.
    for array in (dates, t, yhat, trend_expected, additive, multiplicative, params.sigma_obs):
        array.setflags(write=False)
    mean_abs_delta.setflags(write=False)

    history_step = math.nan
    if one_period:
        history_t = _history_t(model["history"])
        history_step = mean_step(history_t) if history_t.shape[0] > 1 else 0.0
    return ProphetForecaster(
        dates=dates,
        t=t,
        yhat=yhat,
        trend_expected=trend_expected,
        additive=additive,
        multiplicative=multiplicative,
        sigma_obs=params.sigma_obs,
        mean_abs_delta=mean_abs_delta,
        linear_growth=linear,
        changepoint_count=int(changepoints_t.shape[0]),
        history_step=history_step,
        y_scale=y_scale,
        floor=floor,
        uncertainty_samples=int(model["uncertainty_samples"] or 0),
        interval_width=float(model["interval_width"]),
        daily_dates=future.daily,
        additive_only=not multiplicative.any(),
        simulated_at_least=default_horizon(frequency),
    )


@dataclass(frozen=True)
class _Params:
    """The fitted parameters, one row an iteration (one for a MAP fit)."""

    k: FloatArray
    m: FloatArray
    delta: FloatArray
    beta: FloatArray
    sigma_obs: FloatArray

    @classmethod
    def of(cls, model: dict[str, Any]) -> _Params:
        params = model["params"]
        k = np.asarray(params["k"], dtype=np.float64).reshape(-1)
        iterations = k.shape[0]
        return cls(
            k=k,
            m=np.asarray(params["m"], dtype=np.float64).reshape(iterations),
            delta=np.asarray(params["delta"], dtype=np.float64).reshape(iterations, -1),
            beta=np.asarray(params["beta"], dtype=np.float64).reshape(iterations, -1),
            sigma_obs=np.asarray(params["sigma_obs"], dtype=np.float64).reshape(iterations, -1)[
                :, 0
            ],
        )


def _seasonal_terms(
    model: dict[str, Any], future: FuturePeriods, beta: FloatArray, horizon: int
) -> tuple[FloatArray, FloatArray]:
    """The seasonalities' and holidays' additive part (not yet scaled by ``y_scale``) and
    multiplicative part, one row an iteration."""
    features, additive_columns = seasonality_features(model, future)
    holiday = holiday_features(model, future.dates_ns)
    if holiday.shape[1]:
        holidays_additive = holidays_mode(model) == "additive"
        features = np.hstack([features, holiday])
        additive_columns = np.concatenate(
            [additive_columns, np.full(holiday.shape[1], holidays_additive)]
        )
    if not features.shape[1]:
        # With neither seasonalities nor holidays Prophet fits one all-zero column.
        features, additive_columns = np.zeros((horizon, 1)), np.zeros(1, dtype=bool)
    if features.shape[1] != beta.shape[1]:
        raise ValueError(
            f"the model has {beta.shape[1]} seasonal coefficients but its seasonalities "
            f"and holidays describe {features.shape[1]}"
        )
    beta_additive = beta * additive_columns
    beta_multiplicative = beta * ~additive_columns
    additive = np.ascontiguousarray((features @ beta_additive.T).T)
    multiplicative = np.ascontiguousarray((features @ beta_multiplicative.T).T)
    return additive, multiplicative


def _linear_trends(
    t: FloatArray, params: _Params, changepoints_t: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Each iteration's trend, and the point forecast's (the mean iteration's)."""
    delta, k, m = params.delta, params.k, params.m
    iterations = k.shape[0]
    trends = [piecewise_linear(t, delta[i], k[i], m[i], changepoints_t) for i in range(iterations)]
    # (a MAP fit's one trend as a row of its own: no copy by vstack)
    trend_expected = trends[0][None] if iterations == 1 else np.vstack(trends)
    # A MAP fit's one iteration is its own mean: the same trend.
    point_trend = (
        trend_expected[0]
        if iterations == 1
        else piecewise_linear(
            t,
            _over_iterations(delta),
            float(_over_iterations(k)),
            float(_over_iterations(m)),
            changepoints_t,
        )
    )
    return trend_expected, point_trend


def _over_iterations(values: FloatArray) -> Any:
    """Prophet's point estimate across the fitted iterations: ``np.nanmean`` over the first
    axis; a MAP fit's one iteration is its own mean (the same numbers, without nanmean's
    copies and masks)."""
    if values.shape[0] == 1:
        return values[0]
    return np.nanmean(values, axis=0)


def _check_supported(model: dict[str, Any]) -> None:
    growth = model["growth"]
    if growth == "logistic":
        raise UnsupportedModelError(
            "the model uses logistic growth, which needs a capacity for every forecast date; "
            "an invoke carries only a period"
        )
    if growth not in ("linear", "flat"):
        raise ValueError(f"unknown growth {growth!r}")
    regressor_names = model["extra_regressors"][0]
    if regressor_names:
        raise UnsupportedModelError(
            f"the model uses extra regressors ({', '.join(map(str, regressor_names))}), whose "
            "future values an invoke does not carry"
        )
    for name, seasonality in model["seasonalities"][1].items():
        if seasonality.get("condition_name") is not None:
            raise UnsupportedModelError(
                f"seasonality {name!r} is conditional on column "
                f"{seasonality['condition_name']!r}, which an invoke does not carry"
            )


def _last_history_ns(history_dates_json: str) -> int:
    data = json.loads(history_dates_json)["data"]
    if not data:
        raise ValueError("the model has no history dates")
    if len(set(map(len, data))) == 1:
        # pandas' ISO text, all in one format: the latest is the greatest string.
        data = [max(data)]
    dates = np.array([text.removesuffix("Z") for text in data], dtype="datetime64[ns]")
    return int(dates.max().astype(np.int64))


def _history_t(history_json: str) -> FloatArray:
    rows = json.loads(history_json)["data"]
    return np.array([row["t"] for row in rows], dtype=np.float64)
