"""FleetcastProphet reuses the component matrix across fits: nothing else may change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from prophet import Prophet
from prophet.serialize import model_to_json

from fleetcast_training.prophet_model import FleetcastProphet
from fleetcast_training.stan_backend import silence_stan_logging


def history(seed: int, periods: int = 420) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    day = np.arange(periods)
    y = 500 + 80 * np.sin(2 * np.pi * day / 365.25) + 30 * np.sin(2 * np.pi * day / 7)
    return pd.DataFrame(
        {"ds": pd.date_range("2024-01-01", periods=periods), "y": y + rng.normal(0, 10, periods)}
    )


@pytest.mark.parametrize(
    "settings",
    [
        {"yearly_seasonality": 10, "weekly_seasonality": 3, "daily_seasonality": False},
        {
            "seasonality_mode": "multiplicative",
            "yearly_seasonality": False,
            "weekly_seasonality": 3,
        },
    ],
)
def test_fits_and_forecasts_are_prophets_own(settings: dict[str, object]) -> None:
    # Given two customers fitted in turn, so the second reuses the first one's matrix
    silence_stan_logging()
    for seed in (1, 2):
        frame = history(seed)
        future = frame[["ds"]].iloc[-7:]
        # When fleetcast's model and Prophet's own fit and predict the same data
        ours = FleetcastProphet(uncertainty_samples=0, **settings).fit(frame)  # type: ignore[arg-type]
        stock = Prophet(uncertainty_samples=0, **settings).fit(frame)  # type: ignore[arg-type]
        # Then the serialised models and the forecasts are identical
        assert model_to_json(ours) == model_to_json(stock)
        pd.testing.assert_frame_equal(ours.predict(future), stock.predict(future))


def test_a_different_seasonality_gets_its_own_matrix() -> None:
    # Given a model with weekly terms only, after one with yearly terms too
    silence_stan_logging()
    frame = history(3)
    FleetcastProphet(yearly_seasonality=10, weekly_seasonality=3).fit(frame)
    # When the second fits
    weekly = FleetcastProphet(yearly_seasonality=False, weekly_seasonality=3).fit(frame)
    # Then its components are weekly alone, as Prophet's would be
    assert list(weekly.train_component_cols.columns) == list(
        Prophet(yearly_seasonality=False, weekly_seasonality=3)
        .fit(frame)
        .train_component_cols.columns
    )
