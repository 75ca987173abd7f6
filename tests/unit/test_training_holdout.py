"""The numpy holdout fit and forecast are Prophet's own fit and predict of the window."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetcast_contracts.holiday_calendar import (
    HolidayCalendar,
    calendar_years,
    holiday_dates,
    holidays_frame,
)
from fleetcast_training.exact_map import NotSolvedExactly
from fleetcast_training.holdout import holdout_forecast
from fleetcast_training.prophet_model import FleetcastProphet
from fleetcast_training.stan_backend import IN_PROCESS, FleetcastStanBackend, silence_stan_logging


def history(days: int, freq: str = "D", seed: int = 0, gaps: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    periods = days * (24 if freq == "h" else 1)
    ds = pd.date_range("2024-02-03", periods=periods, freq=freq)
    day = np.asarray((ds - ds[0]) / pd.Timedelta(days=1))
    y = 200 + 0.2 * day + 30 * np.sin(2 * np.pi * day / 7) + 20 * np.sin(2 * np.pi * day / 365.25)
    y = y + (10 * np.sin(2 * np.pi * day) if freq == "h" else 0) + rng.normal(0, 4, periods)
    frame = pd.DataFrame({"ds": ds, "y": y})
    if gaps:
        frame = frame[rng.uniform(size=periods) > 0.25].reset_index(drop=True)
    return frame


def prophets_holdout(
    frame: pd.DataFrame,
    rows: int,
    backend: FleetcastStanBackend,
    calendar: HolidayCalendar | None = None,
    **orders: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(Prophet's forecast of the last ``rows`` from a fit on the rest, ours); with
    ``calendar``, both models get its holidays as training adds them."""

    def model() -> FleetcastProphet:
        frame_of_holidays = None
        if calendar is not None and calendar.subdivision is not None:
            years = calendar_years(frame["ds"].iloc[0].date(), frame["ds"].iloc[-1].date())
            frame_of_holidays = holidays_frame(calendar, years)
        built = FleetcastProphet(
            uncertainty_samples=0,
            holidays=frame_of_holidays,
            **orders,  # type: ignore[arg-type]
        )
        if calendar is not None and calendar.subdivision is None:
            built.add_country_holidays(country_name=calendar.country)
        built.stan_backend = backend
        return built

    scored = model()
    scored.fit(frame.iloc[:-rows])
    expected = scored.predict(frame[["ds"]].iloc[-rows:])["yhat"].to_numpy()
    served = model()
    served.fit(frame)
    assert backend.last_stan_data is not None
    ours = holdout_forecast(
        backend.last_stan_data,
        frame["ds"].to_numpy(),
        frame["y"].to_numpy(dtype=np.float64),
        rows,
    )
    return expected, ours


@pytest.mark.parametrize(
    ("frame", "rows", "orders"),
    [
        (history(730), 7, {"yearly_seasonality": 10, "weekly_seasonality": 3}),
        (history(400, gaps=True, seed=1), 7, {"yearly_seasonality": 10, "weekly_seasonality": 3}),
        (history(35, seed=2), 7, {"weekly_seasonality": 3, "yearly_seasonality": False}),
        (history(20, seed=3), 7, {"weekly_seasonality": 3, "yearly_seasonality": False}),
        (history(30, freq="h", seed=4), 24, {"daily_seasonality": 4, "weekly_seasonality": 3}),
    ],
    ids=["two years", "gaps", "few changepoints", "too short for changepoints", "hourly"],
)
def test_the_numpy_holdout_forecast_is_prophets(
    tmp_path: Path, frame: pd.DataFrame, rows: int, orders: dict[str, int]
):
    # Given a history, and Prophet fitted on all but its last rows, then on all of it
    silence_stan_logging()
    backend = FleetcastStanBackend(tmp_path)
    expected, ours = prophets_holdout(frame, rows, backend, **orders)
    # Then the numpy window fit forecasts what Prophet's fit and predict do
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
    assert backend.fit_methods == {IN_PROCESS: 2}


def holiday_history(start: str, end: str, calendar: HolidayCalendar, seed: int) -> pd.DataFrame:
    """Daily use with a weekly cycle that drops by a third on the calendar's holidays."""
    rng = np.random.default_rng(seed)
    ds = pd.date_range(start, end, freq="D")
    day = np.asarray((ds - ds[0]) / pd.Timedelta(days=1))
    y = 300 + 30 * np.sin(2 * np.pi * day / 7) + rng.normal(0, 4, ds.size)
    years = range(ds[0].year, ds[-1].year + 1)
    dates = {day for day, _ in holiday_dates(calendar.country, calendar.subdivision, years)}
    y[np.array([stamp.date() in dates for stamp in ds])] *= 2 / 3
    return pd.DataFrame({"ds": ds, "y": y})


@pytest.mark.parametrize(
    ("calendar", "start", "end", "learnt"),
    [
        (HolidayCalendar.of("US"), "2023-03-01", "2024-12-28", True),
        (HolidayCalendar.of("US"), "2023-03-01", "2025-01-03", True),
        (HolidayCalendar.of("DE", "BY"), "2023-06-01", "2025-01-08", True),
        # Christmas first appears in the held-out week: the window fit has not seen it.
        (HolidayCalendar.of("DE", "BY"), "2024-10-01", "2024-12-29", False),
    ],
    ids=["US Christmas held out", "US across New Year", "DE-BY Epiphany held out", "DE-BY short"],
)
def test_the_numpy_holdout_forecast_is_prophets_with_holidays(
    tmp_path: Path, calendar: HolidayCalendar, start: str, end: str, learnt: bool
):
    # Given a history with holiday dips, whose last week holds a holiday, and Prophet with
    # the calendar's holidays fitted on all but that week, then on all of it
    silence_stan_logging()
    backend = FleetcastStanBackend(tmp_path)
    frame = holiday_history(start, end, calendar, seed=7)
    orders = {"weekly_seasonality": 3, "yearly_seasonality": False}
    expected, ours = prophets_holdout(frame, 7, backend, calendar, **orders)
    # Then the numpy window fit (holiday columns of the full fit's X rows) forecasts what
    # Prophet's fit and predict do: a dip on a holiday the window has seen, none on one
    # it has not
    np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
    assert backend.fit_methods == {IN_PROCESS: 2}
    assert bool(expected.min() < 0.8 * np.median(expected)) is learnt


def test_a_constant_window_forecasts_its_value(tmp_path: Path):
    # Given a history that is constant until its last week
    silence_stan_logging()
    frame = history(60, seed=5)
    frame.loc[: len(frame) - 8, "y"] = 12.5
    backend = FleetcastStanBackend(tmp_path)
    expected, ours = prophets_holdout(frame, 7, backend, weekly_seasonality=3)
    # Then both forecast the constant, as Prophet does without calling Stan
    np.testing.assert_allclose(ours, expected, rtol=1e-12)
    np.testing.assert_allclose(ours, 12.5)


def test_a_multiplicative_model_is_not_scored_in_numpy(tmp_path: Path):
    silence_stan_logging()
    frame = history(100, seed=6)
    backend = FleetcastStanBackend(tmp_path)
    model = FleetcastProphet(uncertainty_samples=0, seasonality_mode="multiplicative")
    model.stan_backend = backend
    model.fit(frame)
    assert backend.last_stan_data is not None
    with pytest.raises(NotSolvedExactly, match="multiplicative"):
        holdout_forecast(backend.last_stan_data, frame["ds"].to_numpy(), frame["y"].to_numpy(), 7)
