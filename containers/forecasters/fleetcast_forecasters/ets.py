"""Exponential smoothing (ETS with additive errors) with a small model search.

The forms searched: no, additive or damped trend, each with or without additive seasonal
states (a week of days, a week of hours). For fixed smoothing parameters the state-space
recursion is

    f = l + phi b + s[t - m];   e = y - f
    l <- l + phi b + alpha e;   b <- phi b + beta e;   s[t] <- s[t - m] + gamma e

and a missing period (no usable value) just carries the states forward (``e = 0``). The
parameters are not optimised one customer at a time: the recursion runs once over the
whole batch, every customer times every parameter set of :data:`GRID` as one array, and
the states and the sum of squared one-step errors are snapshot at each backtest origin.
At each origin a customer's model is then its parameter set of least AIC on the rows
before that origin (the forms differ in how many parameters and states they fit), so the
backtest re-estimates the model at every origin, as a rolling-origin backtest must, for
the price of one pass. The recursion starts at the customer's first row, or for hourly
models :data:`~fleetcast_forecasters.candidates.FIT_SEASONS` before the first origin if
later; the starting level and trend come from the two seasons there, the seasonal states
from up to :data:`START_SEASONS` seasons of profile around them.

Forecast ``h`` steps from the states: ``l + (phi + ... + phi^h) b + s``; the error's
variance is the class-1 formula ``sigma^2 (1 + sum_{j<h} (alpha + beta phi_j + gamma
[j mod m = 0])^2)`` with ``sigma^2`` the in-sample one-step mean square.

``model.json``: ``{"kind": KIND, "form": "A,Ad,A", "alpha", "beta", "gamma", "phi",
"level", "trend", "season": [...] (from the first period after the history), "sigma"}``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetcast_contracts.families import ETS
from fleetcast_forecasters.candidates import (
    BacktestPlan,
    CandidateFits,
    FloatArray,
    Histories,
    IntArray,
    Model,
    empty_backtest,
    fit_start,
    seasonal_slots,
)
from fleetcast_forecasters.gaussian import (
    PathForecaster,
    fitted_model,
    floats,
    parse_model,
    path_forecaster,
)

KIND = ETS

_ALPHAS = (0.03, 0.08, 0.15, 0.25, 0.4, 0.6)
_SEASONAL_GAMMAS = (0.01, 0.05, 0.15)
# (trend form, beta, phi): none, additive, damped.
_TRENDS = (
    ("N", 0.0, 1.0),
    ("A", 0.005, 1.0),
    ("A", 0.03, 1.0),
    ("Ad", 0.02, 0.9),
    ("Ad", 0.08, 0.9),
    ("Ad", 0.02, 0.98),
)


@dataclass(frozen=True)
class _Grid:
    alpha: FloatArray
    beta: FloatArray
    gamma: FloatArray
    phi: FloatArray
    trended: FloatArray  # 1.0 where the form has a trend
    seasonal: FloatArray  # 1.0 where the form has seasonal states
    forms: tuple[str, ...]

    @property
    def size(self) -> int:
        return int(self.alpha.shape[0])

    def parameters(self, season: int) -> FloatArray:
        """AIC's count per parameter set: smoothing parameters and starting states."""
        damped = np.array([form.split(",")[1] == "Ad" for form in self.forms], dtype=np.float64)
        return 2.0 + 2.0 * self.trended + damped + self.seasonal * season


def _grid() -> _Grid:
    rows = []
    for alpha, (trend, beta, phi), gamma in itertools.product(
        _ALPHAS, _TRENDS, (None, *_SEASONAL_GAMMAS)
    ):
        if beta > alpha or (gamma is not None and gamma > 1 - alpha):
            continue
        seasonal = "A" if gamma is not None else "N"
        rows.append(
            (alpha, beta, gamma or 0.0, phi, trend != "N", gamma is not None, trend, seasonal)
        )
    columns = list(zip(*rows, strict=True))
    return _Grid(
        alpha=np.array(columns[0]),
        beta=np.array(columns[1]),
        gamma=np.array(columns[2]),
        phi=np.array(columns[3]),
        trended=np.array(columns[4], dtype=np.float64),
        seasonal=np.array(columns[5], dtype=np.float64),
        forms=tuple(f"A,{t},{s}" for t, s in zip(columns[6], columns[7], strict=True)),
    )


GRID = _grid()

# Seasons the starting seasonal states average: the two the level and trend start from,
# and those before them (a recursion from a customer's first row has none before it).
START_SEASONS = 8


@dataclass
class _Snapshot:
    level: FloatArray  # (customers, sets)
    trend: FloatArray
    season: FloatArray  # (season, customers, sets), by row position
    squares: FloatArray
    count: FloatArray  # (customers,)


def _starting_states(
    histories: Histories, begin: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Level, trend and seasonal states (by row position) for a recursion from row
    ``begin`` of each customer: the means of its two seasons from there, the change
    between them, and each position's average deviation from its season's mean over those
    two seasons and up to :data:`START_SEASONS` - 2 usable ones before them (a recursion
    from its first row has none)."""
    m, values = histories.season, histories.values
    before = START_SEASONS - 2
    rows = begin[None, :] + np.arange(-before * m, 2 * m)[:, None]
    inside = (rows >= histories.first[None, :]) & (rows < histories.periods)
    found = np.take_along_axis(values, np.clip(rows, 0, histories.periods - 1), axis=0)
    start = np.where(inside, found, np.nan).reshape(START_SEASONS, m, -1)
    usable = np.isfinite(start)
    counts = usable.sum(axis=1)
    sums = np.where(usable, start, 0.0).sum(axis=1)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    level = np.where(np.isfinite(means[before]), means[before], means[before + 1])
    level = np.where(np.isfinite(level), level, 0.0)
    trend = np.where(
        np.isfinite(means[before:]).all(axis=0), (means[before + 1] - means[before]) / m, 0.0
    )
    deviation = np.where(usable, start - np.where(np.isfinite(means), means, 0.0)[:, None, :], 0.0)
    per_position = deviation.sum(axis=0) / np.maximum(usable.sum(axis=0), 1)
    per_position -= per_position.mean(axis=0)
    season = np.zeros((m, histories.customers))
    slots = (begin[None, :] + np.arange(m)[:, None]) % m
    np.put_along_axis(season, slots, per_position, axis=0)
    return level, trend, season


def _run(histories: Histories, stops: tuple[int, ...], start: IntArray) -> dict[int, _Snapshot]:
    """The recursion over every customer and parameter set, each customer's from its row
    ``start``; the states after each row ``stop - 1`` of ``stops``.

    A Python step per row costs its numpy calls' overhead, not their arithmetic (a batch
    is a few thousand numbers), so each row takes as few calls as it can: the errors go
    into a block of rows whose squares are summed a block at a time, the usable-row
    counts are one cumulative sum, and a row every customer has a value for skips the
    weighting."""
    grid, m = GRID, histories.season
    level0, trend0, season0 = _starting_states(histories, start)
    # level and trend, one array: a row adds its errors' changes to both in one call
    states = np.empty((2, histories.customers, grid.size))
    level, trend = states
    level[...] = level0[:, None]
    trend[...] = trend0[:, None] * grid.trended[None, :]
    season = season0[:, :, None] * grid.seasonal[None, None, :]
    squares = np.zeros_like(level)
    observed = np.isfinite(histories.values) & (
        np.arange(histories.periods)[:, None] >= start[None, :]
    )
    filled = np.where(observed, histories.values, 0.0)[:, :, None]
    weight = observed.astype(np.float64)
    everyone = np.asarray(observed.all(axis=1), dtype=bool)
    counts = np.cumsum(weight, axis=0)
    alpha, beta, gamma, phi = grid.alpha, grid.beta, grid.gamma, grid.phi
    latest_start = int(start.max())
    begin = int(start.min())
    errors = np.empty((_BLOCK, *level.shape))
    damped = np.empty_like(level)
    # alpha, beta and gamma times a row's errors, in one call. The parameters are laid
    # out for every customer, as the states are: numpy runs over arrays of one shape in
    # one loop, over a broadcast one in a short loop per customer, about twice the time.
    gains = np.ascontiguousarray(
        np.broadcast_to(np.stack([alpha, beta, gamma])[:, None, :], (3, *level.shape))
    )
    damping = np.ascontiguousarray(np.broadcast_to(phi, level.shape))
    changes = np.empty((3, *level.shape))
    snapshots: dict[int, _Snapshot] = {}
    kept = 0  # rows of ``errors`` not yet summed into ``squares``
    for row in range(begin, histories.periods):
        if (row - begin) % _BLOCK == 0:
            # The next rows' values laid out as the states are (see gains), a block at once.
            targets = np.repeat(filled[row : row + _BLOCK], grid.size, axis=2)
        slot = season[row % m]
        error = errors[kept]
        if row < latest_start:
            # Customers yet to start hold their starting states.
            np.multiply(phi, trend, out=damped)
            started = (start <= row)[:, None]
            np.subtract(filled[row], level + damped + slot, out=error)
            error *= weight[row][:, None] * started
            held = np.where(started, damped, trend)
            level[...] = np.where(started, level + held + alpha * error, level)
            trend[...] = np.where(started, held + beta * error, trend)
            slot += gamma * error
        else:
            trend *= damping  # the damped trend, to which the trend's change is added below
            level += trend
            np.subtract(targets[(row - begin) % _BLOCK], level, out=error)
            error -= slot
            if not everyone[row]:
                error *= weight[row][:, None]
            np.multiply(gains, error, out=changes)
            states += changes[:2]
            slot += changes[2]
        kept += 1
        at_stop = row + 1 in stops
        if kept == _BLOCK or at_stop:
            squares += np.einsum("rcs,rcs->cs", errors[:kept], errors[:kept])
            kept = 0
        if at_stop:
            snapshots[row + 1] = _Snapshot(
                level.copy(), trend.copy(), season.copy(), squares.copy(), counts[row].copy()
            )
    return snapshots


# Rows of one-step errors held before their squares are summed.
_BLOCK = 256


def _chosen(snapshot: _Snapshot, season: int) -> IntArray:
    """Per customer, the parameter set of least AIC on its rows so far."""
    n = np.maximum(snapshot.count, 1.0)[:, None]
    mean_square = np.maximum(snapshot.squares / n, 1e-12)
    aic = n * np.log(mean_square) + 2.0 * GRID.parameters(season)[None, :]
    return np.asarray(np.argmin(aic, axis=1), dtype=np.intp)


def _damped_sums(phi: FloatArray, steps: int) -> FloatArray:
    """``phi + phi^2 + ... + phi^h`` for h = 1..steps, per phi (steps by phis)."""
    powers = phi[None, :] ** np.arange(1, steps + 1)[:, None]
    return np.asarray(np.cumsum(powers, axis=0), dtype=np.float64)


def _paths(snapshot: _Snapshot, chosen: IntArray, origin: int, steps: int, m: int) -> FloatArray:
    """Each customer's point forecast (customers by steps) from its chosen set's states."""
    customers = np.arange(chosen.shape[0])
    level = snapshot.level[customers, chosen]
    trend = snapshot.trend[customers, chosen]
    sums = _damped_sums(GRID.phi[chosen], steps)  # steps by customers
    slots = seasonal_slots(origin, steps, m)
    # (one index per axis: indexing by slots first copied every set's states of them)
    season = snapshot.season[slots[:, None], customers, chosen]  # steps by customers
    return np.asarray((level[None, :] + sums * trend[None, :] + season).T, dtype=np.float64)


class _Ets:
    kind = KIND

    def fit(self, histories: Histories, plan: BacktestPlan) -> CandidateFits:
        m, end = histories.season, histories.periods
        snapshots = _run(histories, (*plan.origins, end), fit_start(histories, plan))
        backtest = empty_backtest(histories, plan)
        for window, origin in enumerate(plan.origins):
            snapshot = snapshots[origin]
            paths = _paths(snapshot, _chosen(snapshot, m), origin, plan.horizon, m)
            backtest[:, window, :] = np.where(histories.fits_before(origin)[:, None], paths, np.nan)
        final = snapshots[end]
        chosen = _chosen(final, m)
        customers = np.arange(histories.customers)
        slots = seasonal_slots(end, m, m)
        models: list[Model | None] = []
        for customer in customers:
            index = int(chosen[customer])
            count = float(final.count[customer])
            sigma = float(np.sqrt(final.squares[customer, index] / max(count, 1.0)))
            fields = {
                "kind": KIND,
                "form": GRID.forms[index],
                "alpha": float(GRID.alpha[index]),
                "beta": float(GRID.beta[index]),
                "gamma": float(GRID.gamma[index]),
                "phi": float(GRID.phi[index]),
                "level": float(final.level[customer, index]),
                "trend": float(final.trend[customer, index]),
                "season": final.season[slots, customer, index].tolist(),
                "sigma": sigma,
            }
            models.append(fitted_model(histories, int(customer), fields, enough=count >= m))
        return CandidateFits(KIND, backtest, models)

    def compile(
        self,
        model: str | dict[str, Any],
        frequency: str,
        horizon: int,
        *,
        one_period: bool = True,
        last_history: np.datetime64 | None = None,
    ) -> PathForecaster:
        fields = parse_model(model, KIND)
        try:
            alpha, beta, gamma, phi = (
                float(fields[name]) for name in ("alpha", "beta", "gamma", "phi")
            )
            level, trend, sigma = (float(fields[name]) for name in ("level", "trend", "sigma"))
            season = floats(fields, "season")
        except (KeyError, TypeError) as error:
            raise ValueError(f"model.json is not a fitted {KIND} model: {error!r}") from None
        m = season.shape[0]
        if not m:
            raise ValueError("the model's season is empty")
        sums = _damped_sums(np.array([phi]), horizon)[:, 0]
        steps = np.arange(1, horizon + 1)
        yhat = level + sums * trend + season[(steps - 1) % m]
        # c_j for j = 1..horizon-1; the variance of step h sums the first h - 1.
        effects = alpha + beta * sums[:-1] + gamma * (steps[:-1] % m == 0)
        variance = sigma**2 * (1.0 + np.concatenate([[0.0], np.cumsum(effects**2)]))
        return path_forecaster(fields, frequency, yhat, np.sqrt(variance), last_history)


FAMILY = _Ets()
