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


def test_a_calibrated_80_percent_interval_covers_about_80_percent_of_new_errors() -> None:
    """Errors of the same kind as the backtest's, on days the calibration never saw."""
    inside = total = 0
    for seed in range(40):
        actual, forecast = backtest_errors(seed=100 + seed, growth=0.05)
        found = calibration.fit(actual, forecast)
        assert found is not None
        future, path = backtest_errors(seed=1000 + seed, growth=0.05)
        half = Z_90 * calibration.deviations(found, path[0])
        inside += int((np.abs(future[0] - path[0]) <= half).sum())
        total += STEPS
    assert 0.74 <= inside / total <= 0.86


def test_too_few_backtest_points_leave_the_family_its_own_interval() -> None:
    actual, forecast = backtest_errors(seed=5, growth=0.0)
    actual[:, 4:] = np.nan
    assert calibration.fit(actual, forecast) is None


@pytest.mark.parametrize(
    "broken",
    [{"steps": 30}, {"steps": 0, "profile": [1, 0], "floor": 1}, {"profile": "x"}],
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
