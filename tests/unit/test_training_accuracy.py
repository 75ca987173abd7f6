"""The accuracy measures of the run report, on values worked out by hand."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from fleetcast_training.evaluation import in_sample_naive_mae, mae, mase, rmse, smape, wape
from fleetcast_training.history import History


def values(*numbers: float) -> np.ndarray:
    return np.array(numbers, dtype=np.float64)


def daily(*numbers: float) -> History:
    times = pd.date_range("2025-01-01", periods=len(numbers), freq="D").to_numpy()
    return History(times, np.array(numbers, dtype=np.float64))


def test_wape_weighs_absolute_errors_by_the_actual_volume():
    # |110-100| + |0-10| + |45-50| = 25 over 100 + 10 + 50 = 160
    assert wape(values(100, 10, 50), values(110, 0, 45)) == pytest.approx(25 / 160)
    # A zero actual counts its error but adds no volume: 10 / 100
    assert wape(values(100, 0), values(100, 10)) == pytest.approx(0.1)


def test_wape_of_an_all_zero_holdout_is_undefined_not_infinite():
    assert wape(values(0, 0, 0), values(1, 0, 2)) is None
    assert wape(values(0, 0), values(0, 0)) is None


def test_rmse_squares_before_averaging():
    # errors 3, -4, 0: sqrt((9 + 16 + 0) / 3)
    assert rmse(values(10, 10, 10), values(13, 6, 10)) == pytest.approx(np.sqrt(25 / 3))
    assert rmse(values(5, 5), values(5, 5)) == 0


def test_in_sample_naive_mae_compares_each_row_with_one_season_earlier():
    # Given 9 days with season 7: days 8 and 9 have a day one week earlier
    history = daily(1, 2, 3, 4, 5, 6, 7, 4, 8)
    # Then the scale is mean(|4 - 1|, |8 - 2|) = 4.5
    assert in_sample_naive_mae(history, timedelta(days=7)) == pytest.approx(4.5)


def test_in_sample_naive_mae_bridges_a_gap_like_the_forecast():
    # Given day 2 missing: day 9's week-earlier value is the latest before it (day 1)
    every_day = daily(*range(1, 11))
    kept = np.arange(10) != 1
    history = History(every_day.times[kept], every_day.values[kept])
    # day 8 (value 8) against day 1 (1), day 9 (9) against day 1 (1), day 10 against day 3
    expected = (7 + 8 + 7) / 3
    assert in_sample_naive_mae(history, timedelta(days=7)) == pytest.approx(expected)


def test_in_sample_naive_mae_needs_a_season_of_history():
    assert in_sample_naive_mae(daily(1, 2, 3), timedelta(days=7)) is None


def test_mase_scales_the_mae_by_the_in_sample_naive_mae():
    # MAE 3 over a scale of 4.5
    assert mase(values(10, 20), values(13, 17), 4.5) == pytest.approx(3 / 4.5)


def test_mase_of_a_flat_history_is_undefined_whatever_the_forecast():
    # Given a flat fitted window, the seasonal-naive in-sample MAE is 0
    scale = in_sample_naive_mae(daily(*[5.0] * 14), timedelta(days=7))
    assert scale == 0
    # Then MASE is None (null in the export), for a perfect forecast and a wrong one alike
    assert mase(values(5, 5), values(5, 5), scale) is None
    assert mase(values(5, 5), values(6, 4), scale) is None
    assert mase(values(5, 5), values(6, 4), None) is None


def test_the_measures_of_zeros_against_zeros():
    zeros = values(0, 0, 0)
    assert smape(zeros, zeros) == 0
    assert mae(zeros, zeros) == 0
    assert rmse(zeros, zeros) == 0
    assert wape(zeros, zeros) is None
