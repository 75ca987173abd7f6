"""Prophet's forecast, computed from a fitted model's parameters without Prophet.

``prophet.serialize.model_from_json`` plus ``Prophet.predict`` costs ~30 ms per call and
keeps the whole history frame in memory. Everything ``predict`` does for dates after the
history is a closed form of the fitted parameters, so :func:`compile_model` evaluates the
deterministic part (trend, seasonalities, ``yhat``) once for every date a request may
ask for, keeps those arrays and the few scalars the uncertainty simulation needs, and
drops the rest of the model. Holidays (a ``holidays`` frame, Prophet's country holidays
regenerated for the forecast's years, or both) are features like the seasonalities, built
for the future dates as ``Prophet.make_holiday_features`` builds them.

:meth:`ProphetForecaster.forecast` then follows ``Prophet.predict`` with its default
vectorised uncertainty step by step, drawing the same random numbers in the same order:
with a ``numpy.random.RandomState`` seeded like ``numpy.random.seed`` the intervals
equal Prophet's own, and the quantiles it is asked for are those of the samples
``Prophet.predictive_samples`` draws. The unit tests hold all of them to that.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.holiday_calendar import holiday_dates
from fleetcast_contracts.inference import MAX_PERIOD
from fleetcast_forecasters.forecast import (
    MIDNIGHT_NS,
    NS_PER_SECOND,
    SECONDS_PER_DAY,
    FloatArray,
    Forecast,
    FuturePeriods,
    UnsupportedModelError,
    all_finite,
    check_request,
    forecast_seed,
    future_periods,
    row_quantiles,
)

# Kept importable from here, where they were first written for Prophet alone.
__all__ = [
    "Forecast",
    "ProphetForecaster",
    "UnsupportedModelError",
    "compile_model",
    "forecast_seed",
    "row_quantiles",
]


@dataclass(frozen=True, slots=True, eq=False)
class ProphetForecaster:
    """A fitted Prophet model reduced to what forecasting after its history needs.

    Arrays hold one value per future period (``horizon`` of them); per-iteration arrays
    have one row per set of fitted parameters (one for a MAP fit, one per draw for MCMC).
    """

    dates: npt.NDArray[np.datetime64]
    t: FloatArray
    yhat: FloatArray
    trend_expected: FloatArray  # per iteration, before scaling by y_scale
    additive: FloatArray  # per iteration, on the scale of y
    multiplicative: FloatArray  # per iteration, relative to the trend
    sigma_obs: FloatArray  # per iteration
    mean_abs_delta: FloatArray  # per iteration: the scale of simulated trend changes
    linear_growth: bool
    changepoint_count: int
    history_step: float  # mean step of the history's t: Prophet's for one-period futures
    y_scale: float
    floor: float
    uncertainty_samples: int
    interval_width: float
    daily_dates: bool  # every date at midnight: render them as plain dates
    additive_only: bool  # no multiplicative term: the simulation adds, never scales

    @property
    def horizon(self) -> int:
        return int(self.t.shape[0])

    def forecast(self, period: int, seed: int, quantiles: tuple[float, ...] = ()) -> Forecast:
        """The next ``period`` periods: ``yhat``, the interval and ``quantiles`` (ascending,
        each in (0, 1)), the last two from one simulation, as ``Prophet.predict`` draws it.

        The draws depend on ``seed`` and ``period`` only, so asking for quantiles leaves
        the interval as it is without them.
        """
        check_request(period, self.horizon, quantiles)
        dates, yhat = self.dates[:period], self.yhat[:period]
        if not self.uncertainty_samples:
            return Forecast(dates, yhat, None, None, quantiles, None)
        by_period = self._samples(period, seed)
        shares = [(1.0 - self.interval_width) / 2, (1.0 + self.interval_width) / 2, *quantiles]
        # (a NaN anywhere makes the sum NaN; so can infinities of both signs, for which
        # nanquantile gives the same answer)
        if math.isnan(by_period.sum()):
            found = np.nanquantile(by_period, shares, axis=1)
        else:
            # np.quantile's values from the few order statistics they need, selected in
            # place (the export makes one forecast per customer: a half of sorting).
            found = row_quantiles(by_period, shares)
        lower, upper = found[0], found[1]
        values = np.asarray(found[2:], dtype=np.float64) if quantiles else None
        return Forecast(dates, yhat, lower, upper, quantiles, values)

    def _samples(self, period: int, seed: int) -> FloatArray:
        """Prophet's ``sample_posterior_predictive`` (vectorised) of ``yhat``, one row per
        period and one column per sample (the layout its quantiles are read in; a new
        array, free to sort in place), from :func:`standard_draws` scaled as Prophet's
        own draws are (``laplace(0, s)`` is ``s * laplace(0, 1)``, ``normal(0, s)`` is
        ``s * normal(0, 1)``, the same numbers)."""
        iterations = self.sigma_obs.shape[0]
        per_iteration = max(1, math.ceil(self.uncertainty_samples / iterations))
        t = self.t[:period]
        step = _mean_step(t) if period > 1 else self.history_step
        if math.isnan(step):
            raise ValueError("this forecaster was compiled without one_period: ask for 2 or more")
        draws = period_major_draws(
            seed,
            iterations,
            per_iteration,
            period,
            self.changepoint_count * step if self.linear_growth else None,
            step,
        )
        simulations = []
        for i, (normal, changes) in enumerate(draws):
            expected = self.trend_expected[i, :period] * self.y_scale + self.floor
            noise_scale = self.sigma_obs[i] * self.y_scale
            if self.additive_only:
                # The same sum with the per-period terms added once, not once per sample:
                # the shared draws times this model's two scales, plus its expected path.
                sample = normal * noise_scale
                if changes is not None:
                    sample += changes * (self.mean_abs_delta[i] * self.y_scale)
                sample += (expected + self.additive[i, :period])[:, None]
                simulations.append(sample)
                continue
            trends = np.broadcast_to(expected[:, None], normal.shape)
            if changes is not None:
                trends = trends + changes * (self.mean_abs_delta[i] * self.y_scale)
            simulations.append(
                trends * (1 + self.multiplicative[i, :period])[:, None]
                + self.additive[i, :period][:, None]
                + normal * noise_scale
            )
        if len(simulations) == 1:
            return simulations[0]
        samples: FloatArray = np.hstack(simulations)
        return samples


_Draws = tuple[FloatArray | None, FloatArray | None, FloatArray]


@functools.lru_cache(maxsize=4)
def standard_draws(
    seed: int, iterations: int, per_iteration: int, period: int, linear_growth: bool
) -> tuple[_Draws, ...]:
    """The random numbers ``Prophet.predict`` draws after ``numpy.random.seed(seed)``, in
    its order, at unit scale: per iteration the uniforms and Laplace draws of the trend's
    simulated changes (linear growth only) and the observation noise's normals.

    They depend on the seed and sizes only, so every model forecast with one seed (a
    run's export: :func:`forecast_seed`) shares them: drawing them is most of a
    forecast's time. Read-only, as they are shared.
    """
    random = np.random.RandomState(seed)
    shape = (per_iteration, period)
    draws = []
    for _ in range(iterations):
        uniform = laplace = None
        if linear_growth:
            uniform = random.uniform(size=shape)
            laplace = random.laplace(0, 1.0, size=shape)
        normal = random.normal(0, 1.0, shape)
        for array in (uniform, laplace, normal):
            if array is not None:
                array.setflags(write=False)
        draws.append((uniform, laplace, normal))
    return tuple(draws)


@functools.lru_cache(maxsize=4)
def unit_trend_changes(
    seed: int,
    iterations: int,
    per_iteration: int,
    period: int,
    change_likelihood: float,
    step: float,
) -> tuple[FloatArray, ...]:
    """Per iteration, the future trend changes ``Prophet.predict`` simulates, for a mean
    changepoint rate of 1: a change in each period with ``change_likelihood``, its size
    Laplace, the rates summed twice into the trend's offset.

    They are linear in the mean rate, so a model's are these times its own; every model
    forecast with one seed and step (a run's export: the customers with the same history
    span) shares them. Read-only, as they are shared.
    """
    draws = standard_draws(seed, iterations, per_iteration, period, True)
    changes = []
    for uniform, laplace, _ in draws:
        assert uniform is not None and laplace is not None
        shifts = laplace * (uniform < change_likelihood)
        previous = np.hstack([np.zeros((per_iteration, 1)), shifts])[:, :-1]
        offsets = ((previous + shifts) / 2).cumsum(axis=1).cumsum(axis=1) * step
        offsets.setflags(write=False)
        changes.append(offsets)
    return tuple(changes)


@functools.lru_cache(maxsize=4)
def period_major_draws(
    seed: int,
    iterations: int,
    per_iteration: int,
    period: int,
    change_likelihood: float | None,
    step: float,
) -> tuple[tuple[FloatArray, FloatArray | None], ...]:
    """Per iteration, the observation noise's standard normals of :func:`standard_draws`
    and (with a ``change_likelihood``: linear growth) the unit trend changes of
    :func:`unit_trend_changes`, each with one contiguous row per period, the layout a
    forecast's samples are built and sorted in. Shared like those (read-only)."""
    linear = change_likelihood is not None
    draws = standard_draws(seed, iterations, per_iteration, period, linear)
    changes: tuple[FloatArray | None, ...] = (
        unit_trend_changes(seed, iterations, per_iteration, period, change_likelihood, step)
        if change_likelihood is not None
        else (None,) * iterations
    )
    return tuple(
        (_period_major(normal), None if change is None else _period_major(change))
        for (_, _, normal), change in zip(draws, changes, strict=True)
    )


def _period_major(draws: FloatArray) -> FloatArray:
    """A read-only contiguous copy of one sample per row ``draws``, one period per row."""
    by_period = np.ascontiguousarray(draws.T)
    by_period.setflags(write=False)
    return by_period


def compile_model(
    model_json: str | dict[str, Any],
    frequency: str,
    horizon: int = MAX_PERIOD,
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
    params = model["params"]
    k = np.asarray(params["k"], dtype=np.float64).reshape(-1)
    iterations = k.shape[0]
    m = np.asarray(params["m"], dtype=np.float64).reshape(iterations)
    delta = np.asarray(params["delta"], dtype=np.float64).reshape(iterations, -1)
    beta = np.asarray(params["beta"], dtype=np.float64).reshape(iterations, -1)
    sigma_obs = np.asarray(params["sigma_obs"], dtype=np.float64).reshape(iterations, -1)[:, 0]
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

    features, additive_columns = _seasonality_features(model, future)
    holiday = _holiday_features(model, dates_ns)
    if holiday.shape[1]:
        holidays_additive = _holidays_mode(model) == "additive"
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
    additive = np.ascontiguousarray((features @ beta_additive.T).T) * y_scale
    multiplicative = np.ascontiguousarray((features @ beta_multiplicative.T).T)

    if linear:
        trends = [
            _piecewise_linear(t, delta[i], k[i], m[i], changepoints_t) for i in range(iterations)
        ]
        # (a MAP fit's one trend as a row of its own: no copy by vstack)
        trend_expected = trends[0][None] if iterations == 1 else np.vstack(trends)
        # A MAP fit's one iteration is its own mean: the same trend.
        point_trend = (
            trend_expected[0]
            if iterations == 1
            else _piecewise_linear(
                t,
                _over_iterations(delta),
                float(_over_iterations(k)),
                float(_over_iterations(m)),
                changepoints_t,
            )
        )
    else:
        trend_expected = np.repeat(m[:, None], horizon, axis=1)
        point_trend = np.full(horizon, _over_iterations(m))
    point_additive = _over_iterations(additive)
    point_multiplicative = _over_iterations(multiplicative)
    yhat = (point_trend * y_scale + floor) * (1 + point_multiplicative) + point_additive
    # (np.mean's sum and division, without its checks)
    mean_abs_delta = np.add.reduce(np.abs(delta), axis=1) / delta.shape[1] + 1e-8
    if not all(all_finite(a) for a in (yhat, sigma_obs, mean_abs_delta)):
        raise ValueError("the model's parameters give non-finite forecasts")
    # Shared by every request thread: make sure none can change them.
    for array in (dates, t, yhat, trend_expected, additive, multiplicative, sigma_obs):
        array.setflags(write=False)
    mean_abs_delta.setflags(write=False)

    history_step = math.nan
    if one_period:
        history_t = _history_t(model["history"])
        history_step = _mean_step(history_t) if history_t.shape[0] > 1 else 0.0
    return ProphetForecaster(
        dates=dates,
        t=t,
        yhat=yhat,
        trend_expected=trend_expected,
        additive=additive,
        multiplicative=multiplicative,
        sigma_obs=sigma_obs,
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
    )


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


def _seasonality_features(
    model: dict[str, Any], future: FuturePeriods
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Prophet's ``make_all_seasonality_features`` for unconditional seasonalities, and
    which columns are additive."""
    names, seasonalities = model["seasonalities"]
    if not names:
        return np.zeros((future.dates_ns.shape[0], 0)), np.zeros(0, dtype=bool)
    spec = []
    for name in names:
        seasonality = seasonalities[name]
        period = float(seasonality["period"])
        order = int(seasonality["fourier_order"])
        if order < 1 or period <= 0:
            raise ValueError(f"seasonality {name!r} has period {period} and order {order}")
        spec.append((period, order, seasonality["mode"] == "additive"))
    return _fourier_features(tuple(spec), future.key)


@functools.lru_cache(maxsize=16)
def _fourier_features(
    spec: tuple[tuple[float, int, bool], ...], dates_ns: bytes
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """The Fourier columns of seasonalities ``spec`` (period, order, additive) at the
    dates, and which are additive. Models of one fleet share their seasonalities and,
    forecast from the same last day, their dates: a run's export and an endpoint loading
    many models build them once. Read-only, as they are shared."""
    days = np.frombuffer(dates_ns, dtype=np.int64) / NS_PER_SECOND / SECONDS_PER_DAY
    columns: list[FloatArray] = []
    additive = []
    for period, order, is_additive in spec:
        x = 2 * np.pi * days
        for harmonic in range(1, order + 1):
            angle = harmonic / period * x
            columns.extend((np.sin(angle), np.cos(angle)))
        additive.extend([is_additive] * (2 * order))
    features, modes = np.column_stack(columns), np.array(additive, dtype=bool)
    features.setflags(write=False)
    modes.setflags(write=False)
    return features, modes


def _holiday_features(model: dict[str, Any], dates_ns: npt.NDArray[np.int64]) -> FloatArray:
    """Prophet's ``make_holiday_features`` of ``construct_holiday_dataframe`` for the
    future dates: one 0/1 column per holiday name and day offset in its window, named
    ``{name}_delim_{+|-}{offset}`` and in the order of those names, as Prophet orders them.
    """
    days = dates_ns // MIDNIGHT_NS
    columns: dict[str, FloatArray] = {}
    for day, name, lower, upper in _future_holidays(model, days):
        for offset in range(lower, upper + 1):
            key = f"{name}_delim_{'+' if offset >= 0 else '-'}{abs(offset)}"
            column = columns.setdefault(key, np.zeros(days.shape[0]))
            if day is not None:
                column[days == day + offset] = 1.0
    if not columns:
        return np.zeros((days.shape[0], 0))
    return np.column_stack([columns[key] for key in sorted(columns)])


# A holiday as Prophet's holidays frame has it: day (days since 1970-01-01, None for a
# fitted name the forecast's years lack), name, lower and upper window.
_Holiday = tuple[int | None, str, int, int]


def _future_holidays(model: dict[str, Any], days: npt.NDArray[np.int64]) -> list[_Holiday]:
    """Prophet's ``construct_holiday_dataframe``: the model's own frame, its country's
    holidays in the forecast's years, and only the names the fit saw (each of them)."""
    rows: list[_Holiday] = []
    if model.get("holidays") is not None:
        for record in json.loads(model["holidays"])["data"]:
            lower, upper = _window(record)
            rows.append((_day_number(record["ds"]), str(record["holiday"]), lower, upper))
    country = model.get("country_holidays")
    if country is not None:
        years = {
            int(year) + 1970
            for year in np.unique(
                days.astype("datetime64[D]").astype("datetime64[Y]").astype(np.int64)
            )
        }
        try:
            calendar = holiday_dates(str(country), None, years)
        except ValueError as error:
            raise UnsupportedModelError(f"the model's country holidays: {error}") from None
        rows.extend(
            (int(np.datetime64(day, "D").astype(np.int64)), name, 0, 0) for day, name in calendar
        )
    if model.get("train_holiday_names") is not None:
        fitted = [str(name) for name in json.loads(model["train_holiday_names"])["data"]]
        known = set(fitted)
        rows = [row for row in rows if row[1] in known]
        present = {row[1] for row in rows}
        rows.extend((None, name, 0, 0) for name in fitted if name not in present)
    return rows


def _window(record: dict[str, Any]) -> tuple[int, int]:
    """``lower_window`` and ``upper_window`` as Prophet reads them: 0 when absent, and
    both 0 when either is missing from a row (NaN, null in JSON)."""
    bounds = (record.get("lower_window", 0), record.get("upper_window", 0))
    try:
        lower, upper = (int(math.nan if bound is None else bound) for bound in bounds)
    except ValueError:
        return 0, 0
    return lower, upper


def _day_number(timestamp: str) -> int | None:
    """Days since 1970-01-01 of a holidays frame's ``ds`` (Prophet keeps only the date)."""
    if timestamp is None:
        return None
    instant = np.datetime64(timestamp.removesuffix("Z"), "ns")
    return int(instant.astype("datetime64[D]").astype(np.int64))


def _holidays_mode(model: dict[str, Any]) -> str:
    # Models from Prophet before 1.1.5 have no holidays_mode: theirs is seasonality_mode.
    mode = model.get("holidays_mode") or model.get("seasonality_mode", "additive")
    if mode not in ("additive", "multiplicative"):
        raise ValueError(f"unknown holidays_mode {mode!r}")
    return str(mode)


def _history_t(history_json: str) -> FloatArray:
    rows = json.loads(history_json)["data"]
    return np.array([row["t"] for row in rows], dtype=np.float64)


def _mean_step(t: FloatArray) -> float:
    """``np.diff(t).mean()``, Prophet's step of a future or history, without the
    overheads of the two calls (the same differences, sum and division)."""
    return float(np.add.reduce(t[1:] - t[:-1]) / (t.shape[0] - 1))


def _piecewise_linear(
    t: FloatArray, deltas: FloatArray, k: float, m: float, changepoints_t: FloatArray
) -> FloatArray:
    """Prophet's ``piecewise_linear``, term for term."""
    deltas_t = (changepoints_t[None, :] <= t[..., None]) * deltas
    k_t = deltas_t.sum(axis=1) + k
    m_t = (deltas_t * -changepoints_t).sum(axis=1) + m
    result: FloatArray = k_t * t + m_t
    return result
