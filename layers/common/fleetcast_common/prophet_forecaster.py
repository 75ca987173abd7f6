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
import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fleetcast_common.contracts.inference import MAX_PERIOD
from fleetcast_common.holiday_calendar import holiday_dates

FloatArray = npt.NDArray[np.float64]


class UnsupportedModelError(ValueError):
    """A well-formed Prophet model using a feature a period-only forecast cannot feed
    (logistic growth needs a cap per date, extra regressors need their future values)."""


_NS_PER_SECOND = 1_000_000_000
_SECONDS_PER_DAY = 24 * 60 * 60
_MIDNIGHT_NS = _SECONDS_PER_DAY * _NS_PER_SECOND
# pandas aliases of fixed steps, optionally with a multiple ("15min"), to numpy units.
_FIXED_STEP = re.compile(r"([0-9]*)(D|h|min|s)")
_STEP_UNITS: dict[str, Literal["D", "h", "m", "s"]] = {"D": "D", "h": "h", "min": "m", "s": "s"}


@dataclass(frozen=True)
class Forecast:
    dates: npt.NDArray[np.datetime64]
    yhat: FloatArray
    # None when the model was fitted with uncertainty_samples=0, as Prophet gives none.
    yhat_lower: FloatArray | None
    yhat_upper: FloatArray | None
    # The quantiles asked for (ascending), and one row of values per quantile; the
    # values are None like the intervals when the model draws no samples.
    quantiles: tuple[float, ...] = ()
    quantile_values: FloatArray | None = None

    def clipped_at(self, floor: float) -> tuple[Forecast, int]:
        """This forecast with every value below ``floor`` raised to it, and how many were.

        Clipping keeps the order of the quantiles and of the interval's bounds.
        """
        arrays = (self.yhat, self.yhat_lower, self.yhat_upper, self.quantile_values)
        clipped = sum(int((array < floor).sum()) for array in arrays if array is not None)
        if not clipped:
            return self, 0
        lower, upper, values = (
            None if array is None else np.maximum(array, floor) for array in arrays[1:]
        )
        raised = Forecast(
            self.dates, np.maximum(self.yhat, floor), lower, upper, self.quantiles, values
        )
        return raised, clipped


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
        if not 1 <= period <= self.horizon:
            raise ValueError(f"period must be 1 to {self.horizon}, got {period}")
        if any(not 0 < q < 1 for q in quantiles) or list(quantiles) != sorted(set(quantiles)):
            raise ValueError(f"quantiles must ascend strictly within (0, 1), got {quantiles}")
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


# Beyond this many order statistics a row, one sort is cheaper than selecting each.
_SELECTED_AT_MOST = 8


def row_quantiles(rows: FloatArray, shares: list[float]) -> FloatArray:
    """``np.quantile(rows, shares, axis=1)`` (its default, linear rule; no NaN) with one
    row per share. ``rows`` (a new array) is the scratch space: reordered and overwritten.

    Each share needs the two order statistics around its position. A few are selected
    (``np.partition`` at the upper of two neighbours, the lower then the maximum of what
    lies below it), many by sorting: either way the same values, so the same quantiles.
    """
    last = rows.shape[1] - 1
    position = np.asarray(shares, dtype=np.float64) * last
    below = np.floor(position).astype(np.intp)
    above = np.minimum(below + 1, last)
    weight = position - below
    needed = sorted({*below.tolist(), *above.tolist()})
    if len(needed) > _SELECTED_AT_MOST:
        rows.sort(axis=1)
    else:
        start, i = 0, 0
        while i < len(needed):
            index = needed[i]
            pair = i + 1 < len(needed) and needed[i + 1] == index + 1
            top = index + 1 if pair else index
            # Everything before ``start`` is already at most what is left: select within
            # the rest, so the value at ``top`` is its order statistic...
            rows[:, start:].partition(top - start, axis=1)
            if pair:
                # ... and the one before it is the largest of those below it (written in
                # their place: they are not looked at again).
                rows[:, index] = rows[:, start:top].max(axis=1)
            start, i = top + 1, i + (2 if pair else 1)
    low, high = rows[:, below], rows[:, above]
    # numpy's interpolation, from the nearer end (monotonic in the share).
    found = np.where(weight >= 0.5, high - (high - low) * (1 - weight), low + (high - low) * weight)
    return np.ascontiguousarray(found.T)


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


def forecast_seed(model_version: str, period: int) -> int:
    """The same request to the same model always gets the same intervals, on any host.

    The customer is not part of it: the customers of one run share their random numbers
    (common random numbers), so the run's export draws them once, not once per customer.
    Each customer's interval is still Prophet's own with this seed.
    """
    digest = hashlib.sha256(f"{model_version}\n{period}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


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
    t_scale_ns = round(float(model["t_scale"]) * _NS_PER_SECOND)
    last_ns = (
        _last_history_ns(model["history_dates"])
        if last_history is None
        else int(last_history.astype("datetime64[ns]").astype(np.int64))
    )
    future = _future(last_ns, frequency, horizon)
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
    if not all(_all_finite(a) for a in (yhat, sigma_obs, mean_abs_delta)):
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


@dataclass(frozen=True, slots=True)
class _Future:
    """The dates a forecast from one last history time covers (read-only, shared)."""

    dates: npt.NDArray[np.datetime64]
    dates_ns: npt.NDArray[np.int64]
    key: bytes  # dates_ns's bytes: what features of these dates are cached by
    daily: bool  # every date at midnight


@functools.lru_cache(maxsize=16)
def _future(last_ns: int, frequency: str, horizon: int) -> _Future:
    """:func:`_future_dates`, made once for the many models of a fleet that end on the
    same day (a run's export, an endpoint loading them)."""
    dates = _future_dates(last_ns, frequency, horizon)
    dates_ns = dates.astype("datetime64[ns]").astype(np.int64)
    dates.setflags(write=False)
    dates_ns.setflags(write=False)
    daily = bool((dates_ns % _MIDNIGHT_NS == 0).all())
    return _Future(dates, dates_ns, dates_ns.tobytes(), daily)


def _future_dates(last_ns: int, frequency: str, horizon: int) -> npt.NDArray[np.datetime64]:
    """``Prophet.make_future_dataframe(horizon, freq, include_history=False)``.

    Fixed steps (what training writes: ``D``, ``h``) are added with numpy; other pandas
    frequencies go through ``pandas.date_range``, imported only then: pandas adds a
    second to start-up and tens of MB to the process.
    """
    fixed = _FIXED_STEP.fullmatch(frequency)
    if fixed is not None:
        step = np.timedelta64(int(fixed[1] or 1), _STEP_UNITS[fixed[2]]).astype("timedelta64[ns]")
        if step <= np.timedelta64(0, "ns"):
            raise ValueError(f"frequency {frequency!r} does not step forward in time")
        return np.datetime64(last_ns, "ns") + step * np.arange(1, horizon + 1)
    import pandas as pd

    last = pd.Timestamp(last_ns, unit="ns")
    try:
        candidates = pd.date_range(start=last, periods=horizon + 1, freq=frequency)
    except ValueError as error:
        raise ValueError(f"frequency {frequency!r} is not a pandas frequency: {error}") from None
    future = candidates[candidates > last][:horizon]
    if len(future) != horizon:
        raise ValueError(f"frequency {frequency!r} does not step forward in time")
    return np.array(future.as_unit("ns").to_numpy(), dtype="datetime64[ns]")


def _seasonality_features(
    model: dict[str, Any], future: _Future
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
    days = np.frombuffer(dates_ns, dtype=np.int64) / _NS_PER_SECOND / _SECONDS_PER_DAY
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
    days = dates_ns // _MIDNIGHT_NS
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


def _all_finite(values: FloatArray) -> bool:
    """No NaN or infinity in ``values``: one sum (they carry into it), and only a sum
    that overflows is checked value by value."""
    return math.isfinite(values.sum()) or bool(np.isfinite(values).all())


def _piecewise_linear(
    t: FloatArray, deltas: FloatArray, k: float, m: float, changepoints_t: FloatArray
) -> FloatArray:
    """Prophet's ``piecewise_linear``, term for term."""
    deltas_t = (changepoints_t[None, :] <= t[..., None]) * deltas
    k_t = deltas_t.sum(axis=1) + k
    m_t = (deltas_t * -changepoints_t).sum(axis=1) + m
    result: FloatArray = k_t * t + m_t
    return result
