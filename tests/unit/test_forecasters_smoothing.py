"""The smoothing families' array shortcuts (Theta, ETS) against the plain loops they
replace: the same numbers, at a fraction of the CPU on hourly histories."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fleetcast_contracts.frequency import Frequency
from fleetcast_forecasters import ets, theta
from fleetcast_forecasters.candidates import FIT_SEASONS, BacktestPlan, Histories, fit_start


def _lagged_products_by_loop(centred: np.ndarray, lags: int) -> np.ndarray:
    rows = centred.shape[0]
    return np.stack(
        [
            (centred[k:] * centred[:-k]).sum(axis=0) if k < rows else np.zeros(centred.shape[1])
            for k in range(1, lags + 1)
        ]
    )


@pytest.mark.parametrize(("rows", "lags"), [(400, 24), (30, 7), (5, 7), (2000, 168)])
def test_thetas_autocorrelation_sums_are_the_loops_over_the_lags(rows: int, lags: int):
    # Given centred series with gaps (zeros), some shorter than the lags
    rng = np.random.default_rng(rows)
    centred = rng.normal(size=(rows, 3))
    centred[rng.random(centred.shape) < 0.1] = 0.0
    expected = _lagged_products_by_loop(centred, lags)
    for size in (theta._fast_length(rows + lags), 1 << (rows + lags).bit_length()):
        # When the lagged products are summed through an FFT of a fast length or a power of 2
        found = theta._lagged_products(centred, lags, size)
        # Then they are the direct sums, lag by lag
        np.testing.assert_allclose(found, expected, rtol=0, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize(("at_least", "length"), [(1, 1), (7, 8), (17688, 18000), (16248, 16384)])
def test_thetas_fft_length_is_the_least_of_factors_2_3_5(at_least: int, length: int):
    assert theta._fast_length(at_least) == length


def test_thetas_seasonality_near_its_limit_is_decided_by_the_power_of_two_fft(monkeypatch):
    # Given series of every strength of a daily season, some of them near the 90% limit
    rng = np.random.default_rng(7)
    rows, season = 1500, 24
    strength = np.linspace(0.0, 0.3, 40)
    values = (
        rng.normal(size=(rows, 40))
        + strength * np.sin(np.arange(rows) * 2 * np.pi / season)[:, None]
    )
    values[rng.random(values.shape) < 0.05] = np.nan
    # When every customer counts as unsure (each tested with the power-of-two FFT)
    found = theta._seasonal(values, rows, season)
    monkeypatch.setattr(theta, "_UNSURE", np.inf)
    # Then the decisions are the same as the fast FFT's, and some customers are seasonal
    assert np.array_equal(theta._seasonal(values, rows, season), found)
    assert 0 < found.sum() < found.size


def _ses_by_loop(
    adjusted: np.ndarray, stops: tuple[int, ...], starts: tuple[int, ...] | None = None
) -> tuple[np.ndarray, ...]:
    lanes = adjusted.shape[1]
    levels = np.zeros((lanes, theta.ALPHAS.shape[0]))
    squares = np.zeros_like(levels)
    counts = np.zeros(lanes)
    for lane in range(lanes):
        values = adjusted[(starts[lane] if starts else 0) : stops[lane], lane]
        values = values[np.isfinite(values)]
        counts[lane] = values.shape[0]
        if not values.shape[0]:
            continue
        for index, alpha in enumerate(theta.ALPHAS):
            level, total = values[0], 0.0
            for value in values[1:]:
                error = value - level
                total += error * error
                level += alpha * error
            levels[lane, index], squares[lane, index] = level, total
    return levels, squares, counts


@pytest.mark.parametrize(
    ("rows", "from_start"), [(3, False), (250, False), (1500, False), (1500, True)]
)
def test_thetas_exponential_smoothing_is_the_recursion_row_by_row(rows: int, from_start: bool):
    # Given lanes of very different levels, with gaps, a late start and their own stops
    rng = np.random.default_rng(rows)
    adjusted = rng.normal(5, 2, size=(rows, 5)) * np.array([0.01, 1, 30, 1000, 5e4])
    adjusted[rng.random(adjusted.shape) < 0.05] = np.nan
    adjusted[: rows // 3, 1] = np.nan
    adjusted[:, 4] = np.nan
    stops = (rows, rows - 1, rows, max(1, rows // 2), rows)
    # (and, for some, their own rows to start from)
    starts = (0, rows // 2, rows - 400, 7, 0) if from_start else None
    # When smoothed a block at a time
    levels, squares, counts = theta._ses(
        adjusted, stops, None if starts is None else np.array(starts, dtype=np.intp)
    )
    # Then each lane's level, squared one-step errors and usable rows are the recursion's
    want_levels, want_squares, want_counts = _ses_by_loop(adjusted, stops, starts)
    np.testing.assert_array_equal(counts, want_counts)
    np.testing.assert_allclose(levels, want_levels, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(squares, want_squares, rtol=1e-9, atol=1e-12)


def _hourly(weeks: int, customers: int = 3) -> Histories:
    rng = np.random.default_rng(weeks)
    hours = np.arange(weeks * WEEK_HOURS)
    shape = 1 + 0.4 * np.cos(2 * np.pi * hours / 24) - 0.1 * ((hours // 24) % 7 >= 5)
    values = shape[:, None] * rng.uniform(0.5, 2, customers) + rng.normal(0, 0.05, (hours.size, 1))
    values[rng.random(values.shape) < 0.02] = np.nan
    return Histories(
        values=values,
        first=np.zeros(customers, dtype=np.intp),
        last_history=np.array([np.datetime64("2025-03-01T23")] * customers),
        season=WEEK_HOURS,
        uncertainty_samples=0,
        interval_width=0.8,
    )


WEEK_HOURS = Frequency.HOURLY.season_periods


def test_hourly_ets_sees_only_its_recent_weeks():
    # Given a year of hours, and the same year with everything before the recursion's
    # span and its starting profile's weeks erased
    grids = _hourly(52)
    plan = BacktestPlan.of(grids.periods, 720, 3)
    seasons = FIT_SEASONS[Frequency.HOURLY]
    assert seasons is not None
    reach = plan.origins[0] - (seasons + ets.START_SEASONS - 2) * WEEK_HOURS
    erased = grids.values.copy()
    erased[:reach] = np.nan
    cut = dataclasses.replace(grids, values=erased, first=np.full(3, reach, dtype=np.intp))
    # When ETS fits both
    whole, recent = ets.FAMILY.fit(grids, plan), ets.FAMILY.fit(cut, plan)
    # Then the backtests and the models are the same: the older hours cost nothing
    np.testing.assert_array_equal(whole.backtest, recent.backtest)
    assert whole.models == recent.models
    # ... and the recursion starts that many weeks before the first origin
    start = fit_start(grids, plan)
    assert (start == plan.origins[0] - seasons * WEEK_HOURS).all()


def test_daily_ets_runs_over_the_whole_history():
    # Given daily histories starting on different rows
    values = np.tile(np.array([10.0, 11, 12, 13, 14, 20, 22]), 40)[:, None] * np.ones(2)
    values[:30, 1] = np.nan
    grids = Histories(
        values=values,
        first=np.array([0, 30], dtype=np.intp),
        last_history=np.array([np.datetime64("2025-03-01")] * 2),
        season=7,
        uncertainty_samples=0,
        interval_width=0.8,
    )
    # Then the recursion starts from each one's first row
    start = fit_start(grids, BacktestPlan.of(grids.periods, 30, 3))
    np.testing.assert_array_equal(start, grids.first)


def test_a_customer_fits_before_an_origin_with_three_seasons_of_usable_values():
    # Given daily customers with gaps, one starting late and one with no usable value
    rng = np.random.default_rng(4)
    values = rng.normal(10, 1, (120, 4))
    values[rng.random(values.shape) < 0.3] = np.nan
    values[:60, 1] = np.nan
    values[:, 3] = np.nan
    first = np.array([0, 60, 0, 120], dtype=np.intp)
    first[0] = np.flatnonzero(np.isfinite(values[:, 0]))[0]
    first[2] = np.flatnonzero(np.isfinite(values[:, 2]))[0]
    grids = Histories(values, first, np.array([np.datetime64("2025-03-01")] * 4), 7, 0, 0.8)
    # Then at every origin it is those with 21 usable values before it, counted directly
    for origin in range(grids.periods + 1):
        counted = np.isfinite(values[:origin]).sum(axis=0)
        expected = (counted >= 21) & (first < origin)
        np.testing.assert_array_equal(grids.fits_before(origin), expected, err_msg=str(origin))
    assert grids.fits_before(grids.periods).tolist() == [True, True, True, False]
