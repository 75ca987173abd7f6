"""FleetcastProphet reuses the component matrix across fits: nothing else may change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from prophet import Prophet
from prophet.serialize import model_to_json

from fleetcast_contracts.holiday_calendar import HolidayCalendar, calendar_years, holidays_frame
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


@pytest.mark.parametrize("unit", ["ns", "us", "s"])
@pytest.mark.parametrize("frequency", ["D", "h"])
def test_seasonal_features_of_customers_with_different_gaps_are_prophets_own(
    unit: str, frequency: str
) -> None:
    # Given customers in turn whose days (or hours) have different gaps, some reaching
    # times no earlier customer had
    rng = np.random.default_rng(7)
    grid = pd.date_range("2023-03-01", periods=900, freq=frequency).as_unit(unit)
    for start in (0, 100, 0, 300, 50):
        rows = np.sort(rng.choice(np.arange(start, start + 600), rng.integers(30, 600), False))
        dates = pd.Series(grid[rows], name="ds")
        # When fleetcast's model and Prophet's make each seasonality's Fourier terms
        for period, order, name in ((365.25, 10, "yearly"), (7, 3, "weekly"), (1, 4, "daily")):
            ours = FleetcastProphet.make_seasonality_features(dates, period, order, name)
            stock = Prophet.make_seasonality_features(dates, period, order, name)
            # Then they are the same numbers, bit for bit, in the same frame
            pd.testing.assert_frame_equal(ours, stock, check_exact=True)


def test_models_of_customers_with_different_gaps_are_prophets_own() -> None:
    # Given customers fitted in turn, each missing different days
    silence_stan_logging()
    settings = {"yearly_seasonality": 10, "weekly_seasonality": 3, "daily_seasonality": False}
    rng = np.random.default_rng(11)
    for seed in (4, 5, 6):
        frame = history(seed, periods=500)
        frame = frame.drop(index=rng.choice(500, 40, replace=False)).reset_index(drop=True)
        # When fleetcast's model and Prophet's own fit them
        ours = FleetcastProphet(uncertainty_samples=0, **settings).fit(frame)  # type: ignore[arg-type]
        stock = Prophet(uncertainty_samples=0, **settings).fit(frame)  # type: ignore[arg-type]
        # Then the serialised models are identical
        assert model_to_json(ours) == model_to_json(stock)


def shaped_history(shape: str) -> pd.DataFrame:
    rng = np.random.default_rng(len(shape))
    if shape == "hourly":
        ds = pd.date_range("2024-02-01", periods=24 * 20, freq="h")
    elif shape == "short":
        ds = pd.date_range("2024-02-01", periods=9, freq="D")
    else:
        ds = pd.date_range("2023-02-01", periods=400, freq="D")
    y = 50 + 10 * np.sin(np.arange(ds.size) / 3) + rng.normal(0, 2, ds.size)
    frame = pd.DataFrame({"ds": ds, "y": y})
    if shape == "gaps, unsorted, negative":
        frame = frame.drop(index=rng.choice(ds.size, 60, replace=False))
        frame = frame.sample(frac=1.0, random_state=3)
        frame["y"] -= 80
    if shape == "constant":
        frame["y"] = 7.25
    if shape == "microseconds":
        frame["ds"] = frame["ds"].dt.as_unit("us") + pd.Timedelta(microseconds=3)
    return frame


@pytest.mark.parametrize(
    "shape", ["daily", "hourly", "short", "gaps, unsorted, negative", "constant", "microseconds"]
)
def test_a_plain_history_is_set_up_as_prophet_sets_it_up(shape: str) -> None:
    # Given a history of ds and y only
    silence_stan_logging()
    frame = shaped_history(shape)
    settings = {"uncertainty_samples": 0, "daily_seasonality": shape == "hourly"}
    ours = FleetcastProphet(**settings)  # type: ignore[arg-type]
    assert ours._plain_history(frame)
    stock = Prophet(**settings)  # type: ignore[arg-type]
    # When each fits it
    ours.fit(frame.copy())
    stock.fit(frame.copy())
    # Then the prepared history, its scales and the serialised models are Prophet's
    pd.testing.assert_frame_equal(ours.history, stock.history, check_exact=True)
    assert (ours.start, ours.t_scale, ours.y_scale) == (stock.start, stock.t_scale, stock.y_scale)
    assert model_to_json(ours) == model_to_json(stock)
    future = pd.DataFrame({"ds": frame["ds"].sort_values().iloc[-5:].to_numpy()})
    pd.testing.assert_frame_equal(ours.predict(future), stock.predict(future))


def test_a_history_with_more_than_ds_and_y_or_a_timezone_is_set_up_by_prophet() -> None:
    frame = shaped_history("daily")
    assert FleetcastProphet()._plain_history(frame)
    assert not FleetcastProphet()._plain_history(frame.assign(note="x"))
    assert not FleetcastProphet()._plain_history(frame.assign(ds=frame["ds"].dt.tz_localize("UTC")))


@pytest.mark.parametrize(("country", "subdivision"), [("US", None), ("DE", "BY")])
def test_holiday_models_are_prophets_own(country: str, subdivision: str | None) -> None:
    # Given customers with one calendar fitted in turn (the later ones reuse the holiday
    # names, frames and features of the first), one on other dates
    silence_stan_logging()
    calendar = HolidayCalendar.of(country, subdivision)
    for seed, periods in ((1, 420), (2, 420), (3, 400)):
        frame = history(seed, periods)
        future = pd.DataFrame({"ds": pd.date_range(frame["ds"].iloc[-1], periods=120)})

        def model(cls: type[Prophet], frame: pd.DataFrame = frame) -> Prophet:
            holidays = None
            if subdivision is not None:
                years = calendar_years(frame["ds"].iloc[0].date(), frame["ds"].iloc[-1].date())
                holidays = holidays_frame(calendar, years)
            built = cls(uncertainty_samples=0, holidays=holidays)
            if subdivision is None:
                built.add_country_holidays(country_name=country)
            return built.fit(frame)

        # When fleetcast's model and Prophet's own fit and predict the same data
        ours, stock = model(FleetcastProphet), model(Prophet)
        # Then the serialised models and the forecasts (holidays included) are identical
        assert model_to_json(ours) == model_to_json(stock)
        pd.testing.assert_frame_equal(ours.predict(future), stock.predict(future))
        assert (ours.predict(future)["holidays"] != 0).any()


def test_country_holidays_cannot_be_added_after_fitting() -> None:
    silence_stan_logging()
    model = FleetcastProphet(uncertainty_samples=0).fit(history(4, 60))
    with pytest.raises(Exception, match="prior to model fitting"):
        model.add_country_holidays(country_name="US")
