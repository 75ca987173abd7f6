"""Holidays in the numpy families: a customer with a calendar gets its history's holiday
dips from seasonal naive, ETS, Theta and their combination, in the backtest and in the
served forecast (compile_archive), and a customer without one gets none."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_contracts.model_archive import read_archive
from fleetcast_forecasters.candidates import BacktestPlan, Histories
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.holiday_effects import (
    CHRISTMAS_WEEK,
    GridHolidays,
    holiday_offsets,
    with_christmas_week,
)
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.customer_training import CustomerTrainer
from fleetcast_training.holiday_fits import fit_families
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.stan_backend import silence_stan_logging

RUN_ID = "q0000000904-20260101t120000"
US = HolidayCalendar.of("US")
DAY = np.timedelta64(1, "D")


def dipping(start: str, end: str, seed: int = 5) -> pd.DataFrame:
    """Daily use, lower at weekends, 40% lower on US public holidays."""
    ds = pd.date_range(start, end, freq="D")
    days = {d for d, _ in holiday_dates("US", None, range(ds[0].year, ds[-1].year + 1))}
    rng = np.random.default_rng(seed)
    use = 500 * (1 - 0.15 * (ds.day_of_week >= 5)) + rng.normal(0, 8, ds.size)
    holiday = np.array([stamp.date() in days for stamp in ds])
    return pd.DataFrame({"ds": ds, "y": np.where(holiday, 0.6 * use, use)})


def trained(
    tmp_path: Path, candidates: str, calendar: HolidayCalendar | None, history: pd.DataFrame
) -> tuple[str, str]:
    silence_stan_logging()
    settings = Hyperparameters.parse({"run_id": RUN_ID, "candidates": candidates})
    folder = tmp_path / candidates.replace(",", "-")
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "scratch").mkdir()
    source = folder / "c-7.csv"
    history.to_csv(source, index=False)
    calendars = CustomerCalendars({"c-7": calendar} if calendar else {})
    trainer = CustomerTrainer(settings, folder / "checkpoints", folder / "scratch", calendars)
    trainer.train("c-7", source)
    model_json, metadata = read_archive(folder / "checkpoints" / "c-7.tar.gz")
    return model_json, metadata.model_kind


@pytest.mark.parametrize(
    "candidates", ["seasonal_naive", "ets", "theta", "ets,theta", "seasonal_naive,ets,theta"]
)
def test_a_numpy_familys_forecast_dips_on_a_holiday_as_the_history_did(
    tmp_path: Path, candidates: str
) -> None:
    # Given two years of history to 2023-12-31, 40% lower on US holidays
    history = dipping("2022-01-01", "2023-12-31")
    # When a family that knows no calendar of its own is trained with the US calendar
    model_json, kind = trained(tmp_path, candidates, US, history)
    forecast = compile_archive(model_json, kind, "D").forecast(14, seed=1)
    yhat = dict(zip((str(d)[:10] for d in forecast.dates), forecast.yhat, strict=True))
    # Then its served forecast dips on New Year's Day 2024 (a Monday) like the history's
    # holidays did (against the Monday after), and on no other day
    assert kind in [*candidates.split(","), "combination"]
    assert yhat["2024-01-01"] < 0.75 * yhat["2024-01-08"], yhat
    weekdays = [
        v for d, v in yhat.items() if d != "2024-01-01" and date.fromisoformat(d).weekday() < 5
    ]
    assert min(weekdays) > 0.95 * yhat["2024-01-08"], yhat
    # And without the calendar the same family does not
    plain_json, plain_kind = trained(tmp_path / "plain", candidates, None, history)
    plain = compile_archive(plain_json, plain_kind, "D").forecast(14, seed=1).yhat
    assert plain[0] > 0.9 * plain[7]
    assert "holidays" not in plain_json


def test_the_combination_holds_its_members_holidays_and_none_of_its_own(tmp_path: Path) -> None:
    history = dipping("2022-01-01", "2023-12-31")
    model_json, kind = trained(tmp_path, "ets,theta", US, history)
    model = json.loads(model_json)
    assert kind == "combination" and "holidays" not in model
    members = {member["kind"]: member["model"] for member in model["members"]}
    assert set(members) == {"ets", "theta"}
    for member in members.values():
        effects = member["holidays"]["effects"]
        assert member["holidays"]["country"] == "US"
        # New Year's Day 2022 was a Saturday (use 425), 2023's a Sunday: 40% of 425 less
        assert effects["New Year's Day"] == pytest.approx(-0.4 * 425, rel=0.1)
        assert effects["Independence Day"] == pytest.approx(-0.4 * 500, rel=0.1)


def grid(values: np.ndarray, last: str) -> Histories:
    return Histories(
        values=values[:, None],
        first=np.zeros(1, dtype=np.intp),
        last_history=np.array([np.datetime64(last)]),
        season=7,
        uncertainty_samples=0,
        interval_width=0.8,
    )


def test_an_effect_is_learnt_from_occurrences_before_the_origin_only() -> None:
    # Given an exactly weekly series 60 lower on every US holiday before Independence Day
    # 2023, and 100 lower on that one
    ds = pd.date_range("2022-01-01", "2023-12-31", freq="D")
    values = np.where(ds.day_of_week >= 5, 425.0, 500.0)
    found = GridHolidays.on_grid(US, np.datetime64("2023-12-31"), ds.size, DAY)
    july4 = int(np.flatnonzero(ds == "2023-07-04")[0])
    values[found.rows[found.rows < july4]] -= 60
    values[july4] -= 100
    # When the effects are learnt before Independence Day 2023, and on everything
    index = found.names.index("Independence Day")
    between = found.effects(values, july4)
    everything = found.effects(values, ds.size)
    # Then each is the mean dip of the occurrences it saw
    assert between[index] == pytest.approx(-60)
    assert everything[index] == pytest.approx(-80)
    # And a holiday not seen before the origin (2023-11-10, the first Veterans Day
    # observed on a Friday) has the mean of every occurrence seen
    unseen = found.names.index("Veterans Day (observed)")
    assert between[unseen] == pytest.approx(-60)
    # And the offsets put them on the holiday's rows ahead of the origin alone
    offsets = found.offsets(everything, july4 - 3, 7)
    assert offsets.tolist() == [0, 0, 0, pytest.approx(-80), 0, 0, 0]


def test_holiday_periods_are_left_out_of_the_fits_and_put_back_in_the_backtest() -> None:
    # Given an exactly weekly series 200 lower on US holidays (and the days between
    # Christmas and New Year)
    ds = pd.date_range("2022-01-01", "2023-12-31", freq="D")
    base = np.where(ds.day_of_week >= 5, 425.0, 500.0)
    holidays = {d for d, _ in with_christmas_week(holiday_dates("US", None, (2022, 2023)))}
    values = np.where([s.date() in holidays for s in ds], base - 200, base)
    from fleetcast_forecasters import seasonal_naive

    plan = BacktestPlan.of(ds.size, 30, 3)
    fits, fitted = fit_families(
        {"seasonal_naive": seasonal_naive.FAMILY}, grid(values, "2023-12-31"), plan, [US], DAY
    )
    # Then the fitted history has gaps where the holidays were
    assert np.isnan(fitted.values[:, 0]).sum() == len(
        [d for d in holidays if date(2022, 1, 1) <= d <= date(2023, 12, 31)]
    )
    # And seasonal naive's backtest is exact, Thanksgiving, Christmas and the first
    # "Veterans Day (observed)" (given the others' effect) included
    actual = np.stack([values[o : o + 30] for o in plan.origins])
    np.testing.assert_allclose(fits["seasonal_naive"].backtest[0], actual, atol=1e-9)


def test_serving_adds_the_effects_on_the_forecasts_dates_every_hour_of_the_day() -> None:
    model = {
        "holidays": {"country": "US", "subdivision": None, "effects": {"New Year's Day": -50.0}}
    }
    hours = np.datetime64("2023-12-31T00:00", "ns") + np.arange(72) * np.timedelta64(1, "h")
    offsets = holiday_offsets(model, hours.astype(np.int64))
    assert offsets is not None
    assert offsets.tolist() == [0.0] * 24 + [-50.0] * 24 + [0.0] * 24
    assert holiday_offsets({}, hours.astype(np.int64)) is None
    with pytest.raises(ValueError, match="holidays are not readable"):
        holiday_offsets({"holidays": {"country": "US"}}, hours.astype(np.int64))


def test_a_customer_too_short_to_leave_its_holidays_out_keeps_them_and_trains(
    tmp_path: Path,
) -> None:
    # Given four weeks of history with three Bavarian holidays (1, 9 and 20 May 2024),
    # backtested from its 23rd day on: without them it would have fewer than the three
    # weeks a fit needs before that
    ds = pd.date_range("2024-05-01", periods=28, freq="D")
    history = pd.DataFrame({"ds": ds, "y": 300 + 30 * (ds.day_of_week >= 5)})
    # When it is trained with that calendar
    model_json, kind = trained(
        tmp_path, "seasonal_naive,ets,theta", HolidayCalendar.of("DE", "BY"), history
    )
    # Then it has a model, which forecasts every day, scored on every window (the first
    # would have been lost with its holidays left out)
    forecast = compile_archive(model_json, kind, "D").forecast(7, seed=1)
    assert np.isfinite(forecast.yhat).all()
    _, metadata = read_archive(tmp_path / "seasonal_naive-ets-theta" / "checkpoints" / "c-7.tar.gz")
    assert metadata.backtest is not None and metadata.backtest.windows == 3


def test_the_days_between_christmas_and_new_year_are_a_holiday_where_christmas_is() -> None:
    # Given the US calendar of 2023 (25 December a holiday) and Japan's (not)
    us = with_christmas_week(holiday_dates("US", None, (2023,)))
    japan = with_christmas_week(holiday_dates("JP", None, (2023,)))
    # Then the US has 24 and 26 to 31 December as Christmas week, Christmas Day itself
    # keeping its own name; Japan has no Christmas week
    week = sorted(day.day for day, name in us if name == CHRISTMAS_WEEK)
    assert week == [24, 26, 27, 28, 29, 30, 31]
    assert (date(2023, 12, 25), "Christmas Day") in us
    assert not [day for day, name in japan if name == CHRISTMAS_WEEK]


def test_a_building_closed_for_christmas_week_is_forecast_closed_the_next_year() -> None:
    # Given two years of a weekly building that closes (down 300) between Christmas and
    # New Year, forecast from 20 December 2023
    from fleetcast_forecasters import seasonal_naive

    ds = pd.date_range("2022-01-01", "2023-12-19", freq="D")
    base = np.where(ds.day_of_week >= 5, 200.0, 500.0)
    closed = [(12, 24) <= (s.month, s.day) <= (12, 31) for s in ds]
    values = np.where(closed, base - 300, base)
    plan = BacktestPlan.of(ds.size, 14, 2)
    fits, _ = fit_families(
        {"seasonal_naive": seasonal_naive.FAMILY}, grid(values, "2023-12-19"), plan, [US], DAY
    )
    model = fits["seasonal_naive"].models[0]
    assert model is not None
    # When its served model forecasts the next two weeks
    forecast = compile_archive(model, "seasonal_naive", "D", 14).yhat
    # Then the Christmas week's working days are forecast about 300 lower than the week
    # before them (Christmas Day its own holiday, learnt the same way)
    days = pd.date_range("2023-12-20", periods=14, freq="D")
    week_before = {d.day_of_week: forecast[i] for i, d in enumerate(days) if d.day < 24}
    for i, day in enumerate(days):
        if day.month == 12 and day.day in (27, 28, 29) and day.day_of_week < 5:
            assert forecast[i] == pytest.approx(week_before[day.day_of_week] - 300, abs=30)
