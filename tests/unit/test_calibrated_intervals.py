"""Intervals calibrated on the customer's own backtest (fleetcast_forecasters.calibration):
as wide as the served model's errors were, growing with the horizon where they grew."""

from datetime import datetime
from statistics import NormalDist

import numpy as np
import pytest

from fleetcast_forecasters import calibration
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.gaussian import common_fields
from fleetcast_training.selection import Candidate, choose

WINDOWS, STEPS = 3, 30
# An 80% interval's half-width in deviations of a normal.
Z_90 = NormalDist().inv_cdf(0.9)
LAST = np.datetime64("2024-03-31")


def backtest_errors(seed: int, growth: float) -> tuple[np.ndarray, np.ndarray]:
    """Backtest forecasts and actuals whose errors are relative to the level and grow by
    ``growth`` of the first step's deviation every step."""
    rng = np.random.default_rng(seed)
    level = 20 + 5 * np.sin(np.arange(STEPS) * 2 * np.pi / 7)
    forecast = np.tile(level, (WINDOWS, 1))
    deviation = 0.1 * (1 + growth * np.arange(STEPS))
    actual = forecast * (1 + deviation * rng.standard_normal((WINDOWS, STEPS)))
    return actual, forecast


def served_interval(model: dict, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    forecast = compile_archive(model, kind, "D", 60).forecast(60, seed=7)
    assert forecast.yhat_lower is not None and forecast.yhat_upper is not None
    return forecast.yhat, forecast.yhat_lower, forecast.yhat_upper


def flat_model(level: float, sigma: float) -> dict:
    """A seasonal naive model of a flat week at ``level`` with deviation ``sigma``."""
    return {
        "kind": "seasonal_naive",
        "season": [level] * 7,
        "sigma": sigma,
        **common_fields(LAST, 1000, 0.8),
    }


def test_errors_that_grow_with_the_horizon_give_an_interval_that_grows() -> None:
    actual, forecast = backtest_errors(seed=1, growth=0.1)
    found = calibration.fit(actual, forecast)
    assert found is not None
    _, slope = found["profile"]
    assert slope > 0
    deviation = calibration.deviations(found, np.full(STEPS, 20.0))
    assert deviation[-1] > 2 * deviation[0]


def test_errors_that_do_not_grow_give_an_interval_as_wide_at_every_step() -> None:
    actual, forecast = backtest_errors(seed=2, growth=0.0)
    found = calibration.fit(actual, forecast)
    assert found is not None
    deviation = calibration.deviations(found, np.full(STEPS, 20.0))
    assert deviation.max() < 1.6 * deviation.min()
    # about the errors' own deviation: a tenth of the level
    assert 0.07 * 20 < deviation.mean() < 0.13 * 20


def test_the_interval_is_in_proportion_to_the_forecast() -> None:
    actual, forecast = backtest_errors(seed=3, growth=0.0)
    found = calibration.fit(actual, forecast)
    assert found is not None
    low, high = (calibration.deviations(found, np.full(STEPS, v)) for v in (10.0, 40.0))
    np.testing.assert_allclose(high, 4 * low)


def test_the_served_interval_is_the_calibrated_one_whatever_the_family_said() -> None:
    actual, forecast = backtest_errors(seed=4, growth=0.05)
    found = calibration.fit(actual, forecast)
    assert found is not None
    plain = flat_model(20.0, sigma=50.0)
    yhat, lower, upper = served_interval({**plain, calibration.FIELD: found}, "seasonal_naive")
    expected = calibration.deviations(found, yhat) * Z_90
    # (the interval's bounds from 1,000 seeded draws: within a few percent of the normal's)
    np.testing.assert_allclose(upper - yhat, expected, rtol=0.15)
    np.testing.assert_allclose(yhat - lower, expected, rtol=0.15)
    _, plain_lower, plain_upper = served_interval(plain, "seasonal_naive")
    assert ((plain_upper - plain_lower) > 3 * (upper - lower)).all()


def test_a_calibrated_80_percent_interval_covers_a_little_more_of_new_errors_of_the_same_kind() -> (
    None
):
    """Errors of the same kind as the backtest's, on days the calibration never saw: 80%,
    and a little more for the held-out factor (real futures are not quite the past)."""
    inside = total = 0
    for seed in range(40):
        actual, forecast = backtest_errors(seed=100 + seed, growth=0.05)
        found = calibration.fit(actual, forecast)
        assert found is not None
        future, path = backtest_errors(seed=1000 + seed, growth=0.05)
        half = Z_90 * calibration.deviations(found, path[0])
        inside += int((np.abs(future[0] - path[0]) <= half).sum())
        total += STEPS
    assert 0.78 <= inside / total <= 0.9


def spiky_backtest(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Backtest forecasts and actuals whose relative errors are heavy-tailed, as a
    household's hours are: nine in ten a 5% miss, one in ten a 50% one."""
    rng = np.random.default_rng(seed)
    forecast = np.full((WINDOWS, STEPS), 20.0)
    deviation = np.where(rng.random((WINDOWS, STEPS)) < 0.9, 0.05, 0.5)
    return forecast * (1 + deviation * rng.standard_normal((WINDOWS, STEPS))), forecast


def test_heavy_tailed_errors_get_their_own_quantile_not_a_normal_of_their_rms() -> None:
    inside = total = 0
    for seed in range(40):
        actual, forecast = spiky_backtest(200 + seed)
        found = calibration.fit(actual, forecast)
        assert found is not None
        future, path = spiky_backtest(2000 + seed)
        half = Z_90 * calibration.deviations(found, path[0])
        inside += int((np.abs(future[0] - path[0]) <= half).sum())
        total += STEPS
    # A normal of these errors' root mean square (0.165 of the level) covers 93% of them.
    assert 0.78 <= inside / total <= 0.88


def test_the_interval_is_the_backtest_errors_quantile_widened_by_the_held_out_factor() -> None:
    actual, forecast = backtest_errors(seed=8, growth=0.05)
    found = calibration.fit(actual, forecast)
    assert found is not None
    half = Z_90 * np.array([calibration.deviations(found, row) for row in forecast])
    standardised = np.sort((np.abs(actual - forecast) / half).ravel())
    # split conformal's rank of the 90 errors: the 73rd smallest
    rank = int(np.ceil((standardised.size + 1) * 0.8)) - 1
    assert standardised[rank] == pytest.approx(1 / calibration.HELD_OUT_FACTOR)
    assert calibration.HELD_OUT_FACTOR > 1


def test_a_wider_interval_asked_for_is_calibrated_to_its_own_quantile() -> None:
    actual, forecast = backtest_errors(seed=9, growth=0.0)
    found_80, found_95 = (calibration.fit(actual, forecast, width) for width in (0.8, 0.95))
    assert found_80 is not None and found_95 is not None
    half_95 = NormalDist().inv_cdf(0.975) * calibration.deviations(found_95, forecast[0])
    half_80 = Z_90 * calibration.deviations(found_80, forecast[0])
    assert (half_95 > 1.3 * half_80).all()
    inside = np.abs(actual - forecast) <= NormalDist().inv_cdf(0.975) * np.array(
        [calibration.deviations(found_95, row) for row in forecast]
    )
    assert inside.mean() >= 0.95


def test_too_few_backtest_points_leave_the_family_its_own_interval() -> None:
    actual, forecast = backtest_errors(seed=5, growth=0.0)
    actual[:, 4:] = np.nan
    assert calibration.fit(actual, forecast) is None


@pytest.mark.parametrize(
    "broken",
    [
        {"steps": 30},
        {"steps": 0, "profile": [1, 0], "floor": 1},
        {"profile": "x"},
        {"steps": 30, "profile": [1, 0], "floor": 1, "by_phase": [1.0, 0.0]},
        {"steps": 30, "profile": [1, 0], "floor": 1, "by_phase": "wide"},
    ],
)
def test_a_broken_calibration_is_refused_with_a_clear_error(broken: dict) -> None:
    with pytest.raises(ValueError, match="calibration is not one"):
        compile_archive({**flat_model(20.0, 1.0), calibration.FIELD: broken}, "seasonal_naive", "D")


def test_the_chosen_model_carries_the_calibration_of_its_own_backtest() -> None:
    actual, forecast = backtest_errors(seed=6, growth=0.05)
    naive = Candidate("seasonal_naive", forecast, flat_model(20.0, 1.0))
    origins = [datetime(2024, 1, 1), datetime(2024, 1, 31), datetime(2024, 3, 1)]
    choice = choose([naive], actual, origins, None, common_fields(LAST, 1000, 0.8), 1)
    assert choice is not None
    assert choice.model[calibration.FIELD] == calibration.fit(actual, forecast)
    # ...not written into the candidate's own model
    assert calibration.FIELD not in naive.model


def test_the_calibration_is_of_the_interval_width_the_model_serves() -> None:
    actual, forecast = backtest_errors(seed=10, growth=0.05)
    naive = Candidate("seasonal_naive", forecast, flat_model(20.0, 1.0))
    origins = [datetime(2024, 1, 1), datetime(2024, 1, 31), datetime(2024, 3, 1)]
    choice = choose([naive], actual, origins, None, common_fields(LAST, 1000, 0.9), 1)
    assert choice is not None
    assert choice.model[calibration.FIELD] == calibration.fit(actual, forecast, 0.9)
    assert choice.model[calibration.FIELD] != calibration.fit(actual, forecast, 0.8)


HOURS, DAYS = 24, 30
# The hours of the day whose errors are wider in hourly_backtest (a household's evening).
WIDE_HOURS = np.arange(16, 22)


def hourly_backtest(seed: int, steps: int = DAYS * HOURS) -> tuple[np.ndarray, np.ndarray]:
    """An hourly backtest's three windows of ``steps`` hours, back to back and ending at
    the history's last hour (which ends a day), whose relative errors are four times as
    wide in :data:`WIDE_HOURS` as in the others."""
    rng = np.random.default_rng(seed)
    forecast = np.full((WINDOWS, steps), 20.0)
    # window w's first hour is (WINDOWS - w) * steps hours before the served path's
    hour = (np.arange(steps)[None, :] - (WINDOWS - np.arange(WINDOWS))[:, None] * steps) % HOURS
    deviation = np.where(np.isin(hour, WIDE_HOURS), 0.2, 0.05)
    return forecast * (1 + deviation * rng.standard_normal((WINDOWS, steps))), forecast


def test_a_daily_calibration_has_no_phases_and_serves_its_profile_alone() -> None:
    actual, forecast = backtest_errors(seed=11, growth=0.05)
    found = calibration.fit(actual, forecast)
    assert found is not None
    assert set(found) == {"steps", "profile", "floor"}
    assert calibration.fit(actual, forecast, periods_per_day=1) == found
    intercept, slope = found["profile"]
    yhat = np.linspace(0.0, 40.0, STEPS)
    expected = (intercept + slope * np.arange(STEPS)) * np.maximum(yhat, found["floor"])
    np.testing.assert_array_equal(calibration.deviations(found, yhat), expected)


def test_an_hourly_archive_without_phases_is_served_as_its_profile_alone() -> None:
    """A model trained before the phases were fitted: the same deviation at every hour."""
    archived = {"steps": 720, "profile": [0.3, 0.0001], "floor": 0.5}
    yhat = np.full(800, 2.0)
    steps = np.arange(800.0)
    expected = (0.3 + 0.0001 * np.minimum(steps, 719)) * 2.0
    expected[720:] *= np.sqrt((steps[720:] + 1) / 720)
    np.testing.assert_array_equal(calibration.deviations(archived, yhat), expected)


def test_the_hours_whose_errors_were_wider_get_a_wider_interval() -> None:
    actual, forecast = hourly_backtest(seed=12)
    found = calibration.fit(actual, forecast, periods_per_day=HOURS)
    assert found is not None
    assert len(found["by_phase"]) == HOURS
    pooled = calibration.fit(actual, forecast)
    assert pooled is not None
    deviation, flat = (calibration.deviations(c, np.full(2 * HOURS, 20.0)) for c in (found, pooled))
    hour = np.arange(2 * HOURS) % HOURS
    wide = np.isin(hour, WIDE_HOURS)
    # (an hour's share covered is counted with its neighbours': 15:00 and 22:00 between)
    calm = ~np.isin(hour, np.arange(WIDE_HOURS[0] - 1, WIDE_HOURS[-1] + 2))
    assert deviation[wide].min() > 1.4 * deviation[calm].max()
    assert (deviation[calm] < flat[calm]).all() and (deviation[wide] > flat[wide]).all()


def test_a_horizon_of_no_whole_days_still_finds_each_hour_of_the_day() -> None:
    """Back-to-back windows of 30 hours start at different hours of the day; each point's
    hour is counted from the served path's first hour, not from its window's."""
    actual, forecast = hourly_backtest(seed=13, steps=30)
    found = calibration.fit(actual, forecast, periods_per_day=HOURS)
    assert found is not None
    factors = np.array(found["by_phase"])
    wide = np.isin(np.arange(HOURS), WIDE_HOURS)
    calm = ~np.isin(np.arange(HOURS), np.arange(WIDE_HOURS[0] - 1, WIDE_HOURS[-1] + 2))
    assert factors[wide].min() > factors[calm].max()


def test_the_hourly_calibration_covers_each_hour_of_new_errors_more_evenly() -> None:
    inside = {"phases": np.zeros(HOURS), "pooled": np.zeros(HOURS)}
    for seed in range(10):
        actual, forecast = hourly_backtest(seed=300 + seed)
        future, path = hourly_backtest(seed=3000 + seed)
        for name, ppd in (("phases", HOURS), ("pooled", 1)):
            found = calibration.fit(actual, forecast, periods_per_day=ppd)
            assert found is not None
            half = Z_90 * calibration.deviations(found, path[-1])
            hits = np.abs(future[-1] - path[-1]) <= half
            inside[name] += hits.reshape(DAYS, HOURS).mean(axis=0) / 10
    wide = np.isin(np.arange(HOURS), WIDE_HOURS)
    assert inside["phases"][wide].mean() > inside["pooled"][wide].mean() + 0.1
    spread = {name: v[~wide].mean() - v[wide].mean() for name, v in inside.items()}
    # (halfway: the calm hours' errors a quarter as wide are still covered more)
    assert 0 < spread["phases"] < 0.75 * spread["pooled"]


def test_an_hourly_model_is_chosen_with_its_weeks_calibration() -> None:
    actual, forecast = hourly_backtest(seed=14)
    naive = Candidate("seasonal_naive", forecast, flat_model(20.0, 1.0))
    origins = [datetime(2024, 1, 1), datetime(2024, 1, 31), datetime(2024, 3, 1)]
    last_hour = np.datetime64("2024-03-31T22:00")  # a Sunday
    choice = choose([naive], actual, origins, None, common_fields(last_hour, 1000, 0.8), HOURS)
    assert choice is not None
    # (the served path's first hour, Sunday 23:00, is the week's 6 * 24 + 23rd)
    assert choice.model[calibration.FIELD] == calibration.fit(
        actual, forecast, periods_per_day=HOURS, first_of_week=6 * HOURS + 23
    )
    assert len(choice.model[calibration.FIELD]["by_phase"]) == 7 * HOURS


def weekend_backtest(seed: int, first_of_week: int) -> tuple[np.ndarray, np.ndarray]:
    """An hourly backtest (three windows of 30 days, back to back, ending where the served
    path starts at hour ``first_of_week`` of the week) whose relative errors are a quarter
    as wide on Saturdays and Sundays (a building shut at the weekend)."""
    rng = np.random.default_rng(seed)
    steps = DAYS * HOURS
    forecast = np.full((WINDOWS, steps), 20.0)
    ahead = np.arange(steps)[None, :] - (WINDOWS - np.arange(WINDOWS))[:, None] * steps
    weekend = (first_of_week + ahead) % (7 * HOURS) >= 5 * HOURS
    deviation = np.where(weekend, 0.05, 0.2)
    return forecast * (1 + deviation * rng.standard_normal((WINDOWS, steps))), forecast


@pytest.mark.parametrize("first_of_week", [0, 100])
def test_weekend_hours_whose_errors_were_narrower_get_a_narrower_interval(
    first_of_week: int,
) -> None:
    actual, forecast = weekend_backtest(seed=15, first_of_week=first_of_week)
    found = calibration.fit(actual, forecast, periods_per_day=HOURS, first_of_week=first_of_week)
    assert found is not None
    factors = np.array(found["by_phase"])
    # Laid out from the served path's first hour: its weekend hours are the narrow ones
    # (as narrow as a share covered drawn halfway toward 80% allows)
    weekend = (first_of_week + np.arange(7 * HOURS)) % (7 * HOURS) >= 5 * HOURS
    assert factors[weekend].max() < 0.8 < 1.0 < factors[~weekend].min()
    # (and served so: a Saturday's deviation below a Tuesday's)
    deviation = calibration.deviations(found, np.full(7 * HOURS, 20.0))
    assert deviation[weekend].max() < deviation[~weekend].min()
    # Without the week, one factor for each hour of the day, whatever the day
    assert len(calibration.fit(actual, forecast, periods_per_day=HOURS)["by_phase"]) == HOURS


NEW_YEAR = {"country": "US", "subdivision": None, "effects": {"New Year's Day": -8.0}}


def new_year_forecast(model: dict, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """The point path and the 80% interval's half-width of ``model`` from 29 December 2023
    to 3 January 2024 (New Year's Day the fourth)."""
    forecast = compile_archive(
        model, kind, "D", 6, last_history=np.datetime64("2023-12-28")
    ).forecast(6, seed=7)
    assert forecast.yhat_upper is not None
    return forecast.yhat, forecast.yhat_upper - forecast.yhat


def test_a_holidays_effect_widens_the_interval_on_that_day_only() -> None:
    # Given a calibrated flat model whose history learnt New Year's Day's dip
    actual, forecast = backtest_errors(seed=11, growth=0.0)
    found = calibration.fit(actual, forecast)
    assert found is not None
    plain = {**flat_model(20.0, 1.0), calibration.FIELD: found}
    # When it is served over New Year, with and without that effect
    yhat, half = new_year_forecast({**plain, "holidays": NEW_YEAR}, "seasonal_naive")
    plain_yhat, plain_half = new_year_forecast(plain, "seasonal_naive")
    # Then the day's forecast carries the dip and its interval is at least the dip wide
    assert yhat[3] == pytest.approx(plain_yhat[3] - 8.0)
    assert half[3] > Z_90 * 8.0 * 0.9
    assert half[3] > 1.5 * plain_half[3]
    # ...and the other days are as the calibration alone says
    np.testing.assert_allclose(np.delete(half, 3), np.delete(plain_half, 3), rtol=1e-9)


def test_a_combinations_holiday_widening_is_its_members_effects_as_weighted() -> None:
    actual, forecast = backtest_errors(seed=12, growth=0.0)
    found = calibration.fit(actual, forecast)
    assert found is not None
    member = {**flat_model(20.0, 1.0), "holidays": NEW_YEAR}
    model = {
        "kind": "combination",
        "members": [
            {"kind": "seasonal_naive", "model": member, "weight": 3.0},
            {"kind": "seasonal_naive", "model": flat_model(20.0, 1.0)},
        ],
        "sigma": 1.0,
        **common_fields(np.datetime64("2023-12-28"), 1000, 0.8),
        calibration.FIELD: found,
    }
    yhat, half = new_year_forecast(model, "combination")
    # the path dips by three quarters of the effect, and the deviation is widened by as much
    assert yhat[3] == pytest.approx(20.0 - 6.0)
    deviation = calibration.deviations(found, yhat)
    np.testing.assert_allclose(half[3], Z_90 * np.hypot(deviation[3], 6.0), rtol=0.15)
    np.testing.assert_allclose(half[:3], Z_90 * deviation[:3], rtol=0.15)
