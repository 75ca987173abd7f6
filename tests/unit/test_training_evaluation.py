"""Holdout error measures and the seasonal-naive baseline."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from fleetcast_training.evaluation import mae, seasonal_naive, smape
from fleetcast_training.history import History


def test_smape_is_symmetric_bounded_and_zero_for_zero_against_zero():
    actual = np.array([100.0, 0.0, 50.0])
    forecast = np.array([110.0, 0.0, 0.0])
    # 2*10/210, 0 (both zero), 2*50/50
    assert smape(actual, forecast) == pytest.approx((20 / 210 + 0 + 2) / 3)
    assert smape(forecast, actual) == smape(actual, forecast)
    assert mae(actual, forecast) == pytest.approx(60 / 3)


def test_seasonal_naive_repeats_last_week_and_bridges_gaps():
    # Given two weeks of daily values 0..13, with day 9 missing
    ds = pd.date_range("2025-01-01", periods=14, freq="D")
    history = pd.DataFrame({"ds": ds, "y": np.arange(14.0)}).drop(index=9)
    # When forecasting the next ten days
    targets = pd.Series(pd.date_range("2025-01-15", periods=10, freq="D"))
    forecast = seasonal_naive(History.of(history), targets.to_numpy(), timedelta(days=7))
    # Then each day takes the value of the same weekday in the last week; the missing
    # day 9 is bridged by day 8
    assert forecast.tolist() == [7, 8, 8, 10, 11, 12, 13, 7, 8, 8]
