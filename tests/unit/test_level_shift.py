"""A level shift at the end of a customer's history: found, and the members that cannot
follow it left out of the combination and of what may be served."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np
import pytest

from fleetcast_contracts.quality_gate import passes_quality_gate
from fleetcast_forecasters.gaussian import common_fields
from fleetcast_training.level_shift import LevelShift, find
from fleetcast_training.selection import COMBINATION, Candidate, Choice, choose

WEEK = np.array([6.0, 6.5, 5.5, 6.0, 7.0, 8.0, 7.5])
LAST = np.datetime64("2025-03-01")
ORIGINS = [datetime(2025, 2, 1), datetime(2025, 2, 15)]


def household(days: int = 120, seed: int = 3) -> np.ndarray:
    """A household's daily use: a weekly pattern and day-to-day noise."""
    rng = np.random.default_rng(seed)
    return np.tile(WEEK, days // 7 + 1)[:days] * rng.lognormal(0.0, 0.15, days)


@pytest.mark.parametrize(("age", "scale", "direction"), [(22, 0.2, "fall"), (9, 2.5, "rise")])
def test_a_level_kept_since_a_fall_or_a_rise_is_found_with_its_age(age, scale, direction):
    # Given a household whose use moved to a fifth (or to 2.5 times) `age` days before
    # the end
    values = household()
    values[-age:] *= scale
    # Then the shift is found, that many days old, or a day or two older where the last
    # days before it were already beyond every day of the eight weeks before them
    found = find(values, 1)
    assert found is not None and found.direction == direction
    assert age <= found.days <= age + 2


def test_ordinary_households_have_no_shift():
    # Given 200 households of ordinary variation (a weekly pattern, 15% noise a day), one
    # with a week away in the middle of the eight weeks before the end
    away = household(seed=11)
    away[-40:-33] *= 0.2
    values = [household(seed=seed) for seed in range(200)] + [away]
    # Then none of them has a shift at the end
    assert [find(v, 1) for v in values] == [None] * len(values)


def test_a_shift_younger_than_a_week_is_not_one_yet():
    # Given a fall 5 days before the end (less than a weekly season)
    values = household()
    values[-5:] *= 0.2
    # Then it is not reported
    assert find(values, 1) is None


def test_missing_days_are_left_out_of_the_test_not_taken_as_low():
    # Given a fall 10 days before the end with two days missing after it and a
    # missing week before it
    values = household()
    values[-10:] *= 0.2
    values[[-3, -7]] = np.nan
    values[-40:-33] = np.nan
    # Then the shift is still found, and a history too short for the test has none
    assert find(values, 1) == LevelShift(10, "fall")
    assert find(values[-60:], 1) is None


def test_hourly_histories_are_tested_on_their_daily_totals():
    # Given an hourly history (a daily shape) whose level fell 12 days before the end
    days = household()
    shape = np.linspace(0.5, 1.5, 24) / 24
    hourly = (days[:, None] * shape[None, :]).ravel()
    hourly[-12 * 24 :] *= 0.3
    # Then the fall is found, in days
    assert find(hourly, 24) == LevelShift(12, "fall")


def prophet_model(yearly: bool) -> dict[str, Any]:
    names = ["yearly", "weekly"] if yearly else ["weekly"]
    return {"seasonalities": [names, {name: {} for name in names}], "kind": "prophet"}


def models(prophet_yearly: bool = False) -> dict[str, dict[str, Any]]:
    """Stand-in models: choose only passes the chosen one on (no compile here)."""
    kinds = ("seasonal_naive", "seasonal_median", "ets", "theta")
    return {kind: {"kind": kind} for kind in kinds} | {"prophet": prophet_model(prophet_yearly)}


def chosen(
    fitted: dict[str, dict[str, Any]], levels: dict[str, float], shift: LevelShift | None
) -> Choice:
    """The choice for candidates whose backtests are constant forecasts at ``levels``."""
    candidates = [Candidate(k, np.full((2, 14), level), fitted[k]) for k, level in levels.items()]
    common = common_fields(LAST, 0, 0.8)
    choice = choose(candidates, ACTUAL, ORIGINS, None, common, 1, shift=shift)
    assert choice is not None
    return choice


ACTUAL = np.full((2, 14), 100.0)
LEVELS = {
    "seasonal_naive": 100.0,
    "seasonal_median": 100.0,
    "ets": 101.0,
    "theta": 99.0,
    "prophet": 100.0,
}


def test_a_fall_three_weeks_old_leaves_prophet_out_of_the_combination():
    # Given a customer whose backtest (before the shift) passes the gate for every member,
    # and a fall 22 days before the end
    fitted = models()
    choice = chosen(fitted, LEVELS, LevelShift(22, "fall"))
    # Then the combination is served without Prophet (the seasonal median's four weeks
    # are mostly after the shift: it stays), and the archive says why
    assert choice.kind == COMBINATION
    assert [m["kind"] for m in choice.model["members"]] == ["seasonal_median", "ets", "theta"]
    assert choice.backtest.level_shift_days == 22
    assert "a level fall 22 days before the end" in choice.backtest.why
    assert "prophet cannot follow: left out" in choice.backtest.why
    # And Prophet is still scored, as every candidate is
    assert choice.backtest.score("prophet") is not None
    assert passes_quality_gate(choice.metrics)


def test_a_young_shift_leaves_the_seasonal_median_out_too_but_not_a_yearly_prophet():
    # Given a rise 9 days before the end, and a Prophet model with yearly seasonality
    fitted = models(prophet_yearly=True)
    choice = chosen(fitted, LEVELS, LevelShift(9, "rise"))
    # Then the seasonal median (three of its four weeks before the shift) is left out;
    # Prophet, whose yearly terms may know the season's rise, stays
    assert choice.kind == COMBINATION
    assert [m["kind"] for m in choice.model["members"]] == ["ets", "theta", "prophet"]
    assert "seasonal_median cannot follow" in choice.backtest.why


def test_with_a_shift_the_fallback_serves_only_what_follows_it_or_naive():
    # Given a fall 8 days old, a combination of the followers that fails the gate, and
    # Prophet (which cannot follow) the least backtest error
    fitted = models()
    levels = LEVELS | {"ets": 130.0, "theta": 125.0, "prophet": 100.0, "seasonal_naive": 110.0}
    choice = chosen(fitted, levels, LevelShift(8, "fall"))
    # Then seasonal naive is served (the least error of what may be), not Prophet
    assert choice.kind == "seasonal_naive"
    assert choice.backtest.runner_up is not None
    assert passes_quality_gate(choice.metrics)


def test_a_shift_no_servable_member_can_follow_changes_nothing():
    # Given only Prophet (without yearly terms) and seasonal naive among the candidates
    fitted = models()
    levels = {"seasonal_naive": 100.0, "prophet": 100.0}
    without = chosen(fitted, levels, None)
    shifted = chosen(fitted, levels, LevelShift(10, "fall"))
    # Then the choice is the one made without the shift
    assert shifted.kind == without.kind
    assert shifted.backtest.level_shift_days is None
