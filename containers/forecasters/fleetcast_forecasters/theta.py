"""The Theta method (Assimakopoulos and Nikolopoulos, the M3 competition's winner), in
Hyndman and Billah's form: simple exponential smoothing with a drift of half the slope
of the series' linear trend, on the seasonally adjusted series.

At each origin, on the rows before it only:

1. seasonality: the autocorrelation at the season's lag is tested at 90% (as the M3
   Theta benchmark does); when significant the series is adjusted by seasonal indices,
   the mean of each position relative to its season's mean over the last
   :data:`INDEX_SEASONS` seasons, multiplicative where every value is positive, else
   additive;
2. ``b``, the least-squares slope of the adjusted series on time;
3. SES on the adjusted series: its level ``l`` and ``alpha`` (the one of least squared
   one-step error among :data:`ALPHAS`, every customer and alpha and origin one array),
   from the first row or, for hourly models, from
   :data:`~fleetcast_forecasters.candidates.FIT_SEASONS` before the first origin;
4. the forecast ``h`` steps ahead: ``l + b/2 (h - 1 + (1 - (1 - alpha)^n) / alpha)``,
   seasonal indices put back; its deviation SES's, ``sigma sqrt(1 + (h - 1) alpha^2)``.

``model.json``: ``{"kind": KIND, "level", "alpha", "drift", "rows", "season": [...]
(indices from the first period after the history on), "mode": "multiplicative" |
"additive" | "none", "sigma"}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.families import THETA
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

KIND = THETA
ALPHAS = np.array([0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9])
INDEX_SEASONS = 8
MULTIPLICATIVE, ADDITIVE, NONE = "multiplicative", "additive", "none"
_MODES = (NONE, MULTIPLICATIVE, ADDITIVE)


def _indices(values: FloatArray, origin: int, season: int) -> tuple[FloatArray, FloatArray]:
    """Per customer, its seasonal indices by row position (season by customers) and its
    mode (0 none, 1 multiplicative, 2 additive), from the rows before ``origin``."""
    customers = values.shape[1]
    start = max(origin - INDEX_SEASONS * season, 0)
    start += (origin - start) % season  # whole seasons only
    recent = values[start:origin].reshape(-1, season, customers)
    usable = np.isfinite(recent)
    season_sum = np.where(usable, recent, 0.0).sum(axis=1)
    season_mean = season_sum / np.maximum(usable.sum(axis=1), 1)
    positive = np.where(usable, recent > 0, True).all(axis=(0, 1)) & (season_mean > 0).all(axis=0)
    safe_mean = np.where(season_mean > 0, season_mean, 1.0)[:, None, :]
    ratios = np.where(usable, recent / safe_mean, np.nan)
    offsets = np.where(usable, recent - season_mean[:, None, :], np.nan)
    relative = np.where(positive[None, None, :], ratios, offsets)
    counts = np.isfinite(relative).sum(axis=0)
    by_position = np.where(np.isfinite(relative), relative, 0.0).sum(axis=0) / np.maximum(counts, 1)
    by_position = np.where(
        positive[None, :],
        by_position / np.maximum(by_position.mean(axis=0), 1e-12),
        by_position - by_position.mean(axis=0),
    )
    mode = np.where(positive, 1.0, 2.0) * _seasonal(values, origin, season)
    # Not seasonal: indices of 0, added (mode 0 adjusts additively).
    by_position = np.where(mode[None, :] > 0, by_position, 0.0)
    indices = np.empty_like(by_position)
    slots = (start + np.arange(season)) % season
    indices[slots] = by_position
    return indices, mode


def _seasonal(values: FloatArray, origin: int, season: int) -> FloatArray:
    """1.0 for a customer whose autocorrelation at lag ``season`` is significant at 90%
    (``|r_m| > 1.645 sqrt((1 + 2 sum_{k<m} r_k^2) / n)``, on its usable rows).

    The autocorrelations come from an FFT of a fast length (:func:`_fast_length`); a
    customer whose ``|r_m|`` lies within :data:`_UNSURE` of its limit, where the FFT's
    rounding could decide, is tested again with the power of two this test has always
    used, so every decision is the one that FFT makes."""
    history = values[:origin]
    usable = np.isfinite(history)
    n = usable.sum(axis=0)
    mean = np.where(usable, history, 0.0).sum(axis=0) / np.maximum(n, 1)
    centred = np.where(usable, history - mean, 0.0)
    variance = (centred**2).sum(axis=0)
    rows = centred.shape[0]
    margin = _margin(_lagged_products(centred, season, _fast_length(rows + season)), variance, n)
    unsure = np.flatnonzero(np.abs(margin) <= _UNSURE)
    if unsure.size:  # (the whole batch again, as the test always did it: rarely)
        powers = _lagged_products(centred, season, 1 << (rows + season).bit_length())
        margin[unsure] = _margin(powers, variance, n)[unsure]
    return np.asarray((margin > 0) & (n >= 3 * season), dtype=np.float64)


# |r_m| this close to its limit is tested again with the power-of-two FFT: far more than
# either FFT's rounding of an autocorrelation (about 1e-15 for two years of hours).
_UNSURE = 1e-9


def _margin(products: FloatArray, variance: FloatArray, n: npt.NDArray[np.intp]) -> FloatArray:
    """``|r_m|`` less its 90% limit, per customer, from its lagged products."""
    r = products / np.maximum(variance, 1e-12)
    limit = 1.645 * np.sqrt((1 + 2 * (r[:-1] ** 2).sum(axis=0)) / np.maximum(n, 1))
    margin: FloatArray = np.abs(r[-1]) - limit
    return margin


def _fast_length(at_least: int) -> int:
    """The least ``2^a 3^b 5^c`` from ``at_least`` on: an FFT length pocketfft does fast
    (18000 for two years of hours and a week's lags, not 32768)."""
    best = 1 << max(at_least - 1, 0).bit_length()
    fives = 1
    while fives < best:
        threes = fives
        while threes < best:
            length = threes
            while length < at_least:
                length *= 2
            best = min(best, length)
            threes *= 3
        fives *= 5
    return best


def _lagged_products(centred: FloatArray, lags: int, size: int) -> FloatArray:
    """``sum_t centred[t] * centred[t - k]`` for k = 1..lags (lags by columns), through
    an FFT of ``size`` (at least the rows and the lags, so no product wraps around): the
    same sums as a loop over the lags, but a week of hourly lags over two years of hours
    cost 0.5 s a batch that way, and this a few milliseconds."""
    rows = centred.shape[0]
    spectrum = np.fft.rfft(np.ascontiguousarray(centred.T), n=size, axis=1)
    products = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, n=size, axis=1)
    out = np.zeros((lags, centred.shape[1]))
    reach = min(lags, rows - 1)
    out[:reach] = products[:, 1 : reach + 1].T
    return out


def _adjusted(values: FloatArray, indices: FloatArray, mode: FloatArray) -> FloatArray:
    slots = np.arange(values.shape[0]) % indices.shape[0]
    by_row = indices[slots]
    return np.where(
        mode[None, :] == 1.0, values / np.where(by_row > 0, by_row, 1.0), values - by_row
    )


def _ses(
    adjusted: FloatArray, stops: tuple[int, ...], starts: IntArray | None = None
) -> tuple[FloatArray, ...]:
    """SES of each column of ``adjusted`` (rows by lanes) for every alpha, from the lane's
    row of ``starts`` on (default: all): at each lane's stop, the level and the squared
    one-step errors (lanes by alphas), and the lane's usable rows.

    SES starts at a lane's first usable value and a gap leaves its level as it is, so a
    lane's SES is that of its usable rows before its stop, one after another: a linear
    filter, ``l_k = alpha y_k + (1 - alpha) l_(k-1)``. It runs a block of :data:`_BLOCK`
    rows at a time, every lane at once: within a block each level is the block's starting
    level decayed plus a weighted sum of the block's values, ``alpha d^k sum_(j<=k)
    d^-j y_j`` with ``d = 1 - alpha`` (one cumulative sum for all blocks), and only the
    blocks' last levels are carried one after another (a Python step per row cost 0.3 s a
    batch of two years of hours, a matrix product per block 0.4 s of which most was the
    product). Lanes are right-aligned, the shorter ones led by their first value, from
    which their level does not move."""
    lanes = adjusted.shape[1]
    stop = np.asarray(stops)
    # No lane uses a row before the earliest start, so those rows are not scanned (an
    # hourly batch's lanes start 16 weeks before its first origin: a quarter of two years).
    skipped = max(int(starts.min(initial=adjusted.shape[0])), 0) if starts is not None else 0
    adjusted = adjusted[skipped:]
    row = np.arange(skipped, skipped + adjusted.shape[0])[:, None]
    usable = np.isfinite(adjusted) & (row < stop[None, :])
    if starts is not None:
        usable &= row >= starts[None, :]
    count = usable.sum(axis=0)
    level_at = np.zeros((lanes, ALPHAS.shape[0]))
    squares_at = np.zeros_like(level_at)
    longest = int(count.max(initial=0))
    if longest == 0:
        return level_at, squares_at, count.astype(np.float64)
    blocks = -(-(longest - 1) // _BLOCK)
    width = blocks * _BLOCK + 1  # the first value, then whole blocks
    series = np.empty((lanes, width))
    by_lane, usable_by_lane = adjusted.T, usable.T
    for lane in range(lanes):
        found = by_lane[lane][usable_by_lane[lane]]
        lead = width - found.shape[0]
        series[lane, lead:] = found
        series[lane, :lead] = found[0] if found.shape[0] else 0.0
    start = series[:, 0]
    values = series[:, 1:].reshape(lanes, blocks, _BLOCK)
    ahead = np.arange(_BLOCK)
    within = np.empty_like(values)
    for index, alpha in enumerate(ALPHAS):
        decay = (1 - alpha) ** (ahead + 1.0)
        # alpha sum_(j<=k) d^(k-j) y_j: d^-j stays below 1e104 in a block (alpha <= 0.9)
        np.multiply(values, (1 - alpha) ** -ahead, out=within)
        np.cumsum(within, axis=2, out=within)
        within *= alpha * decay / (1 - alpha)
        before = np.empty((lanes, blocks))
        level = start
        for block in range(blocks):
            before[:, block] = level
            level = decay[-1] * level + within[:, block, -1]
        within += decay * before[:, :, None]  # the levels
        levels = within.reshape(lanes, -1)
        error = series[:, 2:] - levels[:, :-1]
        first = series[:, 1] - start
        squares_at[:, index] = np.einsum("lr,lr->l", error, error) + first * first
        level_at[:, index] = level
    return level_at, squares_at, count.astype(np.float64)


# Rows of a lane SES sums at once: (1 - alpha)^-_BLOCK must stay far from overflowing.
_BLOCK = 104


def _slopes(adjusted: FloatArray, stops: tuple[int, ...]) -> FloatArray:
    """Each lane's least-squares slope on its usable rows before its stop.

    Its two arrays of rows by lanes are reused in place for every step (two years of
    hours by a batch's lanes is 11 MB an array): a new one for each step made it a third
    slower."""
    rows = np.arange(adjusted.shape[0], dtype=np.float64)[:, None]
    unusable = ~(np.isfinite(adjusted) & (rows < np.asarray(stops)[None, :]))
    n = np.maximum(adjusted.shape[0] - unusable.sum(axis=0), 1)
    offset = np.where(unusable, 0.0, rows)
    deviation = np.where(unusable, 0.0, adjusted)
    mean_t, mean_y = offset.sum(axis=0) / n, deviation.sum(axis=0) / n
    np.subtract(rows, mean_t, out=offset)
    np.subtract(adjusted, mean_y, out=deviation)
    deviation *= offset
    deviation[unusable] = 0.0
    covariance = deviation.sum(axis=0)
    offset *= offset
    offset[unusable] = 0.0
    spread = offset.sum(axis=0)
    return np.where(spread > 0, covariance / np.maximum(spread, 1e-12), 0.0)


class _Theta:
    kind = KIND

    def fit(self, histories: Histories, plan: BacktestPlan) -> CandidateFits:
        m, values, customers = histories.season, histories.values, histories.customers
        stops = (*plan.origins, histories.periods)
        fitted = [_indices(values, stop, m) for stop in stops]
        # One lane per customer and stop, each adjusted with its own stop's indices.
        adjusted = np.hstack([_adjusted(values, idx, mode) for idx, mode in fitted])
        lane_stops = tuple(stop for stop in stops for _ in range(customers))
        level, squares, count = _ses(
            adjusted, lane_stops, np.tile(fit_start(histories, plan), len(stops))
        )
        chosen = np.argmin(squares, axis=1)
        lanes = np.arange(adjusted.shape[1])
        level, alpha = level[lanes, chosen], ALPHAS[chosen]
        sigma = np.sqrt(squares[lanes, chosen] / np.maximum(count, 1))
        drift = _slopes(adjusted, lane_stops) / 2
        backtest = empty_backtest(histories, plan)
        models: list[Model | None] = []
        for number, stop in enumerate(stops):
            part = slice(number * customers, (number + 1) * customers)
            indices, mode = fitted[number]
            steps = plan.horizon if number < plan.windows else m
            paths = _path(
                level[part],
                alpha[part],
                drift[part],
                count[part],
                steps,
                indices[seasonal_slots(stop, steps, m)],
                mode,
            )
            if number < plan.windows:
                fits = histories.fits_before(stop)
                backtest[:, number, :] = np.where(fits[:, None], paths, np.nan)
                continue
            for customer in range(customers):
                lane = number * customers + customer
                fields = {
                    "kind": KIND,
                    "level": float(level[lane]),
                    "alpha": float(alpha[lane]),
                    "drift": float(drift[lane]),
                    "rows": int(count[lane]),
                    "season": indices[seasonal_slots(stop, m, m), customer].tolist(),
                    "mode": _MODES[int(mode[customer])],
                    "sigma": float(sigma[lane]),
                }
                models.append(fitted_model(histories, customer, fields, enough=count[lane] >= m))
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
            level, alpha, drift, sigma = (
                float(fields[name]) for name in ("level", "alpha", "drift", "sigma")
            )
            rows = int(fields["rows"])
            season = floats(fields, "season")
            mode = _MODES.index(fields["mode"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"model.json is not a fitted {KIND} model: {error!r}") from None
        if not season.size or not 0 < alpha <= 1:
            raise ValueError("the model's season is empty or its alpha outside (0, 1]")
        steps = np.arange(horizon)
        by_step = season[steps % season.size]
        yhat = _path(
            np.array([level]),
            np.array([alpha]),
            np.array([drift]),
            np.array([float(rows)]),
            horizon,
            by_step[:, None],
            np.array([float(mode)]),
        )[0]
        deviation = sigma * np.sqrt(1.0 + steps * alpha**2)
        if mode == 1:
            deviation = deviation * by_step
        return path_forecaster(fields, frequency, yhat, deviation, last_history)


def _path(
    level: FloatArray,
    alpha: FloatArray,
    drift: FloatArray,
    rows: FloatArray,
    steps: int,
    indices: FloatArray,
    mode: FloatArray,
) -> FloatArray:
    """Point forecasts (lanes by steps); ``indices`` is steps by lanes."""
    ahead = np.arange(steps, dtype=np.float64)[None, :]
    start = (1 - (1 - alpha) ** rows) / alpha
    adjusted = level[:, None] + drift[:, None] * (ahead + start[:, None])
    return np.where(mode[:, None] == 1.0, adjusted * indices.T, adjusted + indices.T)


FAMILY = _Theta()
