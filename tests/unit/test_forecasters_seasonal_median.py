"""The seasonal median family and the selection rule that combines it."""

from __future__ import annotations

from datetime import datetime

import numpy as np

from fleetcast_forecasters import seasonal_median
from fleetcast_forecasters.candidates import BacktestPlan, Histories
from fleetcast_forecasters.families import compile_archive
from fleetcast_training.selection import COMBINATION, NAIVE_BLEND, Candidate, choose

WEEK = np.array([10.0, 11, 12, 13, 14, 20, 22])


def histories(values: np.ndarray) -> Histories:
    columns = values.reshape(values.shape[0], -1)
    return Histories(
        values=columns,
        first=np.zeros(columns.shape[1], dtype=np.intp),
        last_history=np.array([np.datetime64("2025-03-01")] * columns.shape[1]),
        season=7,
        uncertainty_samples=0,
        interval_width=0.8,
    )


def test_each_weekday_is_the_median_of_its_last_four_so_one_odd_week_does_not_move_it():
    # Given eight weeks of one weekly pattern, the last week doubled, and a missing day
    values = np.tile(WEEK, 8)
    values[-7:] *= 2
    values[-10] = np.nan
    grids = histories(values)
    # When fitted with one 14-day backtest window
    fits = seasonal_median.FAMILY.fit(grids, BacktestPlan.of(grids.periods, 14, 1))
    # Then the model repeats the usual week (the median of 3 usual weeks and the odd one,
    # or of 2 and the odd one where a day is missing, is still the usual value)...
    model = fits.models[0]
    assert model is not None
    np.testing.assert_allclose(model["season"], [v if i != 4 else 14.0 for i, v in enumerate(WEEK)])
    # ...and so did the backtest from the rows before its origin
    np.testing.assert_allclose(fits.backtest[0, 0, :7], WEEK)
    # And it is served as a path of the season repeated, its deviation the same every step
    forecaster = compile_archive(model, seasonal_median.KIND, "D", 21)
    np.testing.assert_allclose(forecaster.yhat, np.tile(model["season"], 3))
    assert np.all(forecaster.sigma == forecaster.sigma[0]) and forecaster.sigma[0] > 0


def test_a_customer_without_usable_values_in_the_last_seasons_has_no_model():
    values = np.full(42, np.nan)
    values[:7] = WEEK
    grids = histories(values)
    fits = seasonal_median.FAMILY.fit(grids, BacktestPlan.of(grids.periods, 7, 1))
    assert fits.models == [None]


def _choose(
    backtests: dict[str, np.ndarray], actual: np.ndarray, servable: set[str] | None = None
) -> str:
    candidates = [Candidate(kind, bt, {"kind": kind}) for kind, bt in backtests.items()]
    choice = choose(candidates, actual, [datetime(2025, 1, 1)], None, {}, 1, servable)
    assert choice is not None
    return choice.kind


def test_the_combination_is_served_when_within_the_gates_tolerance_of_naive():
    # Given a combination of four members whose mean misses by 0.4% of the level more
    # than seasonal naive (within the gate's 0.5%)
    actual = np.full((1, 10), 100.0)
    members = {
        kind: np.full((1, 10), 100.0 + offset)
        for kind, offset in (
            ("ets", 10.0),
            ("theta", 10.0),
            ("prophet", 8.8),
            ("seasonal_median", 8.8),
        )
    }
    naive = {"seasonal_naive": np.full((1, 10), 91.0)}
    # Then it is served; 0.6% worse, and the candidate of least error is instead (with
    # seasonal naive servable, the naive blend: naive under, the combination over)
    assert _choose({**members, **naive}, actual) == COMBINATION
    members["prophet"] = np.full((1, 10), 109.6)
    assert _choose({**members, **naive}, actual) == NAIVE_BLEND
    assert _choose({**members, **naive}, actual, servable=set(members)) == "seasonal_median"
