"""Prophet's forecast, computed from a compiled model's arrays without Prophet.

A :class:`ProphetForecaster` is what :func:`fleetcast_forecasters.prophet_compile.compile_model`
keeps of a fitted model: the deterministic part (trend, seasonalities, ``yhat``) evaluated
for every date a request may ask for, and the few scalars the uncertainty simulation needs.
:meth:`ProphetForecaster.forecast` then follows ``Prophet.predict`` with its default
vectorised uncertainty step by step, drawing the same random numbers in the same order:
with a ``numpy.random.RandomState`` seeded like ``numpy.random.seed`` the intervals
equal Prophet's own, and the quantiles it is asked for are those of the samples
``Prophet.predictive_samples`` draws. The unit tests hold all of them to that.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fleetcast_forecasters.forecast import (
    SIMULATED_AT_LEAST,
    FloatArray,
    Forecast,
    UnsupportedModelError,
    check_request,
    forecast_seed,
    row_quantiles,
    simulated_periods,
)
from fleetcast_forecasters.prophet_features import mean_step

# Kept importable from here, where they were first written for Prophet alone.
__all__ = [
    "Forecast",
    "ProphetForecaster",
    "UnsupportedModelError",
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
    # The periods every simulation draws at least: its frequency's longest forecast.
    simulated_at_least: int = SIMULATED_AT_LEAST

    @property
    def horizon(self) -> int:
        return int(self.t.shape[0])

    def forecast(self, period: int, seed: int, quantiles: tuple[float, ...] = ()) -> Forecast:
        """The next ``period`` periods: ``yhat``, the interval and ``quantiles`` (ascending,
        each in (0, 1)), the last two from one simulation, as ``Prophet.predict`` draws it.

        The draws depend on ``seed`` only: they are those of Prophet's forecast of
        :func:`simulated_periods` periods, of which this is the first ``period``, so a
        day's interval is the same whatever the period, and asking for quantiles leaves
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
        # The step of the whole compiled future, not of the periods asked for: the same
        # for every request (Prophet's own for a future of that length).
        step = mean_step(self.t) if self.horizon > 1 else self.history_step
        if math.isnan(step):
            raise ValueError("this forecaster was compiled without one_period: ask for 2 or more")
        draws = period_major_draws(
            seed,
            iterations,
            per_iteration,
            period,
            self.changepoint_count * step if self.linear_growth else None,
            step,
            self.simulated_at_least,
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
    forecast's time. ``period`` is the simulation's (:func:`simulated_periods`, 365
    periods: about 9 MB and 40 ms, once per run), of which a request reads its first
    days. Read-only, as they are shared.
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
    at_least: int = SIMULATED_AT_LEAST,
) -> tuple[FloatArray, ...]:
    """Per iteration, the future trend changes ``Prophet.predict`` simulates, for a mean
    changepoint rate of 1: a change in each period with ``change_likelihood``, its size
    Laplace, the rates summed twice into the trend's offset.

    They are linear in the mean rate, so a model's are these times its own; every model
    forecast with one seed and step (a run's export: the customers with the same history
    span) shares them. Read-only, as they are shared.
    """
    # Drawn for the simulation's periods, in Prophet's order; a change's effect runs
    # forward only (two running sums), so the first `period` are computed alone.
    draws = standard_draws(
        seed, iterations, per_iteration, simulated_periods(period, at_least), True
    )
    changes = []
    for uniform, laplace, _ in draws:
        assert uniform is not None and laplace is not None
        shifts = laplace[:, :period] * (uniform[:, :period] < change_likelihood)
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
    at_least: int = SIMULATED_AT_LEAST,
) -> tuple[tuple[FloatArray, FloatArray | None], ...]:
    """Per iteration, the observation noise's standard normals of :func:`standard_draws`
    and (with a ``change_likelihood``: linear growth) the unit trend changes of
    :func:`unit_trend_changes`, each with one contiguous row per period, the layout a
    forecast's samples are built and sorted in. Shared like those (read-only)."""
    linear = change_likelihood is not None
    draws = standard_draws(
        seed, iterations, per_iteration, simulated_periods(period, at_least), linear
    )
    changes: tuple[FloatArray | None, ...] = (
        unit_trend_changes(
            seed, iterations, per_iteration, period, change_likelihood, step, at_least
        )
        if change_likelihood is not None
        else (None,) * iterations
    )
    return tuple(
        (_period_major(normal[:, :period]), None if change is None else _period_major(change))
        for (_, _, normal), change in zip(draws, changes, strict=True)
    )


def _period_major(draws: FloatArray) -> FloatArray:
    """A read-only contiguous copy of one sample per row ``draws``, one period per row."""
    by_period = np.ascontiguousarray(draws.T)
    by_period.setflags(write=False)
    return by_period
