"""The synthetic readings generator."""

from __future__ import annotations

import gzip
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetcast import datagen
from fleetcast.datagen import generate_readings, write_readings
from fleetcast_contracts.holiday_calendar import holiday_dates


def test_default_shape_one_reading_per_day_with_a_few_gaps() -> None:
    # Given the defaults: 1000 customers, 730 days from 2022-01-01, one reading a day
    # When generated
    readings = generate_readings()

    # Then ids are "0".."999", dates are in range, and about 1 % of days are missing
    assert list(readings.columns) == ["customer_id", "timestamp", "consumption"]
    assert set(readings["customer_id"]) == {str(index) for index in range(1000)}
    assert readings["timestamp"].min() == "2022-01-01"
    assert readings["timestamp"].max() == "2023-12-31"
    missing = 1000 * 730 - len(readings)
    assert 0.005 * 730_000 < missing < 0.02 * 730_000
    per_customer = readings.groupby("customer_id").size()
    assert per_customer.max() <= 730 and per_customer.min() >= 700
    assert not readings.duplicated(["customer_id", "timestamp"]).any()
    assert (readings["consumption"] > 0).all()


def test_same_arguments_same_rows_and_another_seed_other_rows() -> None:
    # Given two calls with the same arguments and one with another seed
    first = generate_readings(30, days=60, seed=5)
    again = generate_readings(30, days=60, seed=5)
    other = generate_readings(30, days=60, seed=6)

    # Then the first two are identical and the third is not
    pd.testing.assert_frame_equal(first, again)
    assert not first["consumption"].equals(other["consumption"])


def test_a_customer_does_not_depend_on_who_else_is_generated() -> None:
    # Given customer "3" generated among five, and alone by id
    among_five = generate_readings(5, days=40, seed=2)
    alone = generate_readings(customer_ids=["3"], days=40, seed=2)

    # Then its rows are the same
    pd.testing.assert_frame_equal(
        among_five[among_five["customer_id"] == "3"].reset_index(drop=True), alone
    )


def test_offset_gives_new_customers_and_later_days_continue_the_curve() -> None:
    # Given a first upload and a second one adding later days and new customers
    first = generate_readings(5, days=365, gap_rate=0, seed=1)
    later = generate_readings(
        customer_ids=["0", "1", "2", "3", "4", "5", "6"],
        start=date(2023, 1, 1),
        days=30,
        gap_rate=0,
        seed=1,
    )
    offset = generate_readings(3, customer_offset=1000, days=2, seed=1)

    # Then the offset ids start at 1000
    assert sorted(set(offset["customer_id"])) == ["1000", "1001", "1002"]
    # And each existing customer's January 2023 is close to its January 2022 (yearly cycle)
    for customer_id in "01234":
        january_2022 = first[
            (first["customer_id"] == customer_id) & first["timestamp"].str.startswith("2022-01")
        ]["consumption"].mean()
        january_2023 = later[later["customer_id"] == customer_id]["consumption"].mean()
        assert abs(january_2023 - january_2022) < 40


def test_yearly_cycle_uses_real_days_not_epoch_nanoseconds() -> None:
    # Given two years of one customer without gaps
    readings = generate_readings(customer_ids=["c"], days=730, gap_rate=0, seed=4)
    values = readings["consumption"].to_numpy()

    # When compared week by week and month by month
    weekly_means = values[: 104 * 7].reshape(104, 7).mean(axis=1)
    monthly_means = values[:720].reshape(24, 30).mean(axis=1)

    # Then consecutive weeks barely move (the sample's 8-day wave would swing them), the
    # year swings widely, and a year later repeats it
    assert np.abs(np.diff(weekly_means)).max() < 60
    assert monthly_means.max() - monthly_means.min() > 150
    first_year = values[:364].reshape(52, 7).mean(axis=1)
    second_year = values[365:729].reshape(52, 7).mean(axis=1)
    assert np.corrcoef(first_year, second_year)[0, 1] > 0.9


def test_weekends_are_lower() -> None:
    # Given a year of readings for 50 customers
    readings = generate_readings(50, days=364, seed=8)
    weekday = pd.to_datetime(readings["timestamp"]).dt.day_of_week

    # When weekend and weekday means are compared per customer
    weekend = readings[weekday >= 5].groupby("customer_id")["consumption"].mean()
    workday = readings[weekday < 5].groupby("customer_id")["consumption"].mean()

    # Then every customer uses less at weekends
    assert (weekend < workday).all()


def test_several_readings_a_day_at_irregular_times_sum_to_the_daily_total() -> None:
    # Given one and four readings a day for the same customers and days
    daily = generate_readings(10, days=20, seed=9)
    raw = generate_readings(10, days=20, readings_per_day=4, seed=9)

    # Then the raw readings are 4 a day, at increasing, irregular UTC times
    assert len(raw) == 4 * len(daily)
    times = pd.to_datetime(raw["timestamp"], format="ISO8601", utc=True)
    assert raw["timestamp"].str.endswith("Z").all()
    per_day = raw.assign(time=times, day=times.dt.strftime("%Y-%m-%d"))
    assert per_day.groupby(["customer_id", "day"]).size().eq(4).all()
    assert per_day.groupby("customer_id")["time"].apply(lambda t: t.is_monotonic_increasing).all()
    assert per_day["time"].dt.strftime("%H:%M:%S").nunique() > 700
    # And each day's readings add up to that day's single reading
    sums = per_day.groupby(["customer_id", "day"])["consumption"].sum()
    expected = daily.set_index(["customer_id", "timestamp"])["consumption"]
    assert np.allclose(sums.to_numpy(), expected.loc[sums.index].to_numpy(), atol=0.003)


@pytest.mark.parametrize("name", ["readings.csv", "readings.csv.gz"])
def test_write_matches_generate_and_gzips_by_name(tmp_path: Path, name: str) -> None:
    # Given a path, plain or .gz
    path = tmp_path / "nested" / name

    # When readings are written
    rows = write_readings(path, 7, days=9, seed=3)

    # Then the file holds the generated rows, compressed when the name ends .gz
    expected = generate_readings(7, days=9, seed=3)
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    text = (gzip.decompress(raw) if name.endswith(".gz") else raw).decode()
    assert text.splitlines()[0] == "customer_id,timestamp,consumption"
    assert text.splitlines()[1].startswith("0,2022-01-0")
    written = pd.read_csv(path, dtype={"customer_id": str, "timestamp": str})
    assert rows == len(expected) == len(written)
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)


def test_a_file_written_a_few_customers_at_a_time_is_the_file_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the file of 7 customers written in one table (3 readings a day, holidays)
    arguments = {"days": 40, "readings_per_day": 3, "seed": 5, "holidays": "US"}
    whole = write_readings(tmp_path / "whole.csv", 7, **arguments)  # type: ignore[arg-type]
    # When it is written 3 customers at a time (as a fleet of 100,000 is, 2000 at a time)
    monkeypatch.setattr(datagen, "CUSTOMERS_PER_TABLE", 3)
    parts = write_readings(tmp_path / "parts.csv", 7, **arguments)  # type: ignore[arg-type]
    # Then both files are the same, byte for byte
    assert parts == whole
    assert (tmp_path / "parts.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()


@pytest.mark.parametrize("arguments", [{"days": 0}, {"gap_rate": 1.0}, {"customers": -1}])
def test_writing_checks_its_arguments_even_for_no_customers(
    tmp_path: Path, arguments: dict[str, int | float]
) -> None:
    with pytest.raises(ValueError):
        write_readings(tmp_path / "r.csv", **{"customers": 0, **arguments})  # type: ignore[arg-type]


def test_explicit_ids_are_validated() -> None:
    with pytest.raises(ValueError, match="invalid customer id"):
        generate_readings(customer_ids=["ok", "../bad"])


@pytest.mark.parametrize(
    "arguments",
    [{"days": 0}, {"readings_per_day": 0}, {"gap_rate": 1.0}, {"customers": -1}],
)
def test_bad_arguments_are_refused(arguments: dict[str, int | float]) -> None:
    with pytest.raises(ValueError):
        generate_readings(**arguments)  # type: ignore[arg-type]


def _by_day(readings: pd.DataFrame) -> pd.Series:
    return readings.set_index(["customer_id", "timestamp"])["consumption"]


def test_public_holidays_drop_20_to_40_percent_and_every_other_day_is_unchanged() -> None:
    # Given two years for 30 customers, with and without the US calendar, same seed
    plain = _by_day(generate_readings(30, days=730, seed=4))
    with_holidays = _by_day(generate_readings(30, days=730, seed=4, holidays="US"))
    us_dates = {
        day.isoformat() for day, _ in holiday_dates("US", None, [2022, 2023]) if day.year >= 2022
    }

    # When the days are compared
    assert plain.index.equals(with_holidays.index)
    on_holiday = plain.index.get_level_values("timestamp").isin(sorted(us_dates))

    # Then every day that is not a holiday keeps its value exactly
    assert with_holidays[~on_holiday].equals(plain[~on_holiday])
    # and every holiday is lower, by 20-40 % of the day's expected use (the noise is the
    # same in both, so the drop is the dip alone), weekend holidays too
    assert {"2022-07-04", "2023-07-04", "2023-12-25"} <= us_dates
    assert on_holiday.sum() > 30 * 15
    drop = (plain - with_holidays)[on_holiday]
    assert (drop > 0).all()
    share = drop / plain[on_holiday]
    weekend = pd.to_datetime(share.index.get_level_values("timestamp")).day_of_week >= 5
    assert weekend.sum() > 30 * 3
    assert share.between(0.12, 0.5).all()
    assert 0.2 < share.median() < 0.4
    # and each customer keeps one dip of its own across holidays
    spread = share.groupby(level="customer_id").agg(["min", "max"])
    assert (spread["max"] - spread["min"] < 0.15).all()
    assert share.groupby(level="customer_id").median().std() > 0.02


def test_a_subdivision_adds_its_own_holidays() -> None:
    # Given Germany and Bavaria for the same seed
    germany = _by_day(generate_readings(5, days=365, start="2023-01-01", seed=2, holidays="DE"))
    bavaria = _by_day(generate_readings(5, days=365, start="2023-01-01", seed=2, holidays="de-by"))

    # Then Epiphany (Friday 6 January 2023, a Bavarian holiday) is lower only in Bavaria,
    # and German Unity Day (Tuesday 3 October) in both
    epiphany = germany.xs("2023-01-06", level="timestamp")
    assert (bavaria.xs("2023-01-06", level="timestamp") < epiphany).all()
    plain = _by_day(generate_readings(5, days=365, start="2023-01-01", seed=2))
    assert epiphany.equals(plain.xs("2023-01-06", level="timestamp"))
    unity = plain.xs("2023-10-03", level="timestamp")
    assert (germany.xs("2023-10-03", level="timestamp") < unity).all()
    assert (bavaria.xs("2023-10-03", level="timestamp") < unity).all()


@pytest.mark.parametrize(
    ("calendar", "message"),
    [("XX", "holidays 'XX': .*no country 'XX'"), ("US-ZZ", "no subdivision 'ZZ'")],
)
def test_an_unknown_calendar_is_refused_by_name(calendar: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_readings(2, days=10, holidays=calendar)
