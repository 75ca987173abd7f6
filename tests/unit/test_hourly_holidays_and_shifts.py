"""Holidays and the level-shift rule on hourly models (issue 42): an hourly customer's
served forecast dips on every hour of a public holiday as its history did, and a level
shift near the end of an hourly history is found (in days) and followed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_contracts.model_archive import ModelMetadata, read_archive
from fleetcast_forecasters.families import compile_archive
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.customer_training import CustomerTrainer
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.stan_backend import silence_stan_logging

RUN_ID = "q0000000904-20260101t120000"
US = HolidayCalendar.of("US")
CANDIDATES = "seasonal_naive,ets,theta"


def hourly_use(start: str, end: str, seed: int = 3) -> pd.DataFrame:
    """Hourly use with an evening peak, 40% lower on every hour of a US public holiday."""
    ds = pd.date_range(start, end, freq="h")
    days = {d for d, _ in holiday_dates("US", None, range(ds[0].year, ds[-1].year + 1))}
    rng = np.random.default_rng(seed)
    use = 5 + 2 * np.cos(2 * np.pi * (ds.hour - 19) / 24) + rng.normal(0, 0.1, ds.size)
    holiday = np.array([stamp.date() in days for stamp in ds])
    return pd.DataFrame({"ds": ds, "y": np.where(holiday, 0.6 * use, use)})


def trained_hourly(
    tmp_path: Path, history: pd.DataFrame, calendar: HolidayCalendar | None
) -> tuple[str, ModelMetadata]:
    silence_stan_logging()
    settings = Hyperparameters.parse(
        {"run_id": RUN_ID, "candidates": CANDIDATES, "frequency": "H", "holdout_days": "2"}
    )
    (tmp_path / "checkpoints").mkdir(parents=True)
    (tmp_path / "scratch").mkdir()
    source = tmp_path / "c-7.csv"
    history.to_csv(source, index=False)
    calendars = CustomerCalendars({"c-7": calendar} if calendar else {})
    CustomerTrainer(settings, tmp_path / "checkpoints", tmp_path / "scratch", calendars).train(
        "c-7", source
    )
    return read_archive(tmp_path / "checkpoints" / "c-7.tar.gz")


def test_an_hourly_models_forecast_dips_on_every_hour_of_a_holiday(tmp_path: Path) -> None:
    # Given hourly history from 2022-01-01 to 2023-12-20 23:00, 40% lower on US holidays
    # (its last week has none: an hourly model's season is a week, which repeats the week)
    history = hourly_use("2022-01-01", "2023-12-20 23:00")
    # When it is trained hourly with the US calendar
    model_json, metadata = trained_hourly(tmp_path, history, US)
    assert metadata.frequency is Frequency.HOURLY
    forecast = compile_archive(model_json, metadata.model_kind, metadata.frequency).forecast(
        144, seed=1
    )
    hours = pd.DatetimeIndex(forecast.dates)
    yhat = pd.Series(forecast.yhat, index=hours)
    # Then Christmas Day is lower than the day after it, hour for hour, by about as much
    # as the history's holidays were
    christmas = yhat["2023-12-25"].to_numpy()
    after = yhat["2023-12-26"].to_numpy()
    assert len(christmas) == len(after) == 24
    ratio = christmas.sum() / after.sum()
    assert 0.5 < ratio < 0.75, ratio
    # And the day after it keeps the daily shape: its evening above its morning
    assert yhat["2023-12-26 19:00"] > yhat["2023-12-26 07:00"] + 2
    # And without the calendar, no dip
    plain_json, plain = trained_hourly(tmp_path / "plain", history, None)
    plain_yhat = compile_archive(plain_json, plain.model_kind, plain.frequency).forecast(144, 1)
    assert plain_yhat.yhat[96:120].sum() > 0.9 * plain_yhat.yhat[120:144].sum()


def test_a_level_shift_in_an_hourly_history_is_found_in_days_and_followed(
    tmp_path: Path,
) -> None:
    # Given half a year of hourly history whose level fell from 5 to 2 an hour 12 days
    # before its end (the daily shape as it was)
    history = hourly_use("2023-06-01", "2023-11-30 23:00")
    fell = history["ds"] >= pd.Timestamp("2023-11-30") - pd.Timedelta(days=11)
    history.loc[fell, "y"] -= 3
    # When it is trained hourly
    model_json, metadata = trained_hourly(tmp_path, history, None)
    # Then the shift is found, its age in days
    assert metadata.backtest.level_shift_days == 12, metadata.backtest
    # And the served forecast follows the new level, not the old
    forecast = compile_archive(model_json, metadata.model_kind, metadata.frequency).forecast(48, 1)
    new_level = history.loc[fell, "y"].tail(24 * 7).mean()
    assert abs(forecast.yhat.mean() - new_level) < 0.25 * new_level, (
        metadata.model_kind,
        forecast.yhat.mean(),
        new_level,
    )
