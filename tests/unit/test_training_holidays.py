"""Training a customer with its holiday calendar: from the run's calendars file, or the
stack's default country."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prophet.serialize import model_from_json

from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.training import CALENDARS_FILE
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_training.calendars import CustomerCalendars, InvalidCalendarsError
from fleetcast_training.customer_training import CustomerTrainer
from fleetcast_training.failures import JobFailure
from fleetcast_training.hyperparameters import Hyperparameters, InvalidHyperparametersError
from fleetcast_training.stan_backend import IN_PROCESS, silence_stan_logging

RUN_ID = "q0000000904-20260101t120000"


def dipping_history(country: str, subdivision: str | None) -> pd.DataFrame:
    """Two years of daily use, a weekly cycle, 40% lower on the calendar's holidays."""
    rng = np.random.default_rng(11)
    ds = pd.date_range("2023-01-01", "2024-12-31", freq="D")
    day = np.arange(ds.size)
    y = 300 + 30 * np.sin(2 * np.pi * day / 7) + rng.normal(0, 4, ds.size)
    dates = {day for day, _ in holiday_dates(country, subdivision, (2023, 2024))}
    y[np.array([stamp.date() in dates for stamp in ds])] *= 0.6
    return pd.DataFrame({"ds": ds, "y": y})


def write_calendars(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CALENDARS_FILE).write_text(text)
    return folder


def train(tmp_path: Path, customer_id: str, history: pd.DataFrame, calendars: CustomerCalendars):
    silence_stan_logging()
    settings = Hyperparameters.parse({"run_id": RUN_ID, "candidates": "prophet"})
    checkpoints = tmp_path / customer_id / "checkpoints"
    scratch = tmp_path / customer_id / "scratch"
    checkpoints.mkdir(parents=True)
    scratch.mkdir()
    source = tmp_path / customer_id / f"{customer_id}.csv"
    history.to_csv(source, index=False)
    report = CustomerTrainer(settings, checkpoints, scratch, calendars).train(customer_id, source)
    model_json, metadata = read_archive(checkpoints / f"{customer_id}.tar.gz")
    return report.result, model_from_json(model_json), metadata


def test_customers_are_trained_with_their_calendars_in_process(tmp_path: Path):
    # Given the run's calendars: one US customer, one in Bavaria; and a default country
    folder = write_calendars(
        tmp_path / "calendars", "customer_id,country,subdivision\nus-1,US,\nde-1,DE,BY\n"
    )
    calendars = CustomerCalendars.load(folder, default_country="FR")
    # When each is trained on a history that dips on its holidays
    us, us_model, us_meta = train(tmp_path, "us-1", dipping_history("US", None), calendars)
    de, de_model, de_meta = train(tmp_path, "de-1", dipping_history("DE", "BY"), calendars)
    # Then both are fitted in-process (the full fit and one before each backtest origin)
    assert us.outcome is de.outcome is CustomerOutcome.TRAINED
    assert us.fit_methods == de.fit_methods == {IN_PROCESS: 4}
    # And the archives record the calendars
    assert us_meta.holiday_calendar == HolidayCalendar.of("US")
    assert de_meta.holiday_calendar == HolidayCalendar.of("DE", "BY")
    # As Prophet's country holidays, or the subdivision's holidays frame
    assert us_model.country_holidays == "US" and us_model.holidays is None
    assert de_model.country_holidays is None
    assert "Epiphany" in set(de_model.holidays["holiday"])
    # And the forecasts dip on the holidays: July 4 for one, Epiphany for the other
    # (a holidays term of about the 40% drop, and none on an ordinary day)
    future = pd.DataFrame({"ds": pd.to_datetime(["2025-01-06", "2025-07-03", "2025-07-04"])})
    us_effect = us_model.predict(future)["holidays"].to_numpy()
    de_effect = de_model.predict(future)["holidays"].to_numpy()
    assert us_effect[0] == 0 and us_effect[1] == 0 and us_effect[2] < -80
    assert de_effect[0] < -80 and de_effect[1] == 0 and de_effect[2] == 0


def test_a_customer_without_metadata_gets_the_default_country(tmp_path: Path):
    # Given calendars for another customer only, over the default country US
    folder = write_calendars(tmp_path / "calendars", "customer_id,country,subdivision\nx,DE,\n")
    calendars = CustomerCalendars.load(folder, default_country="US")
    # When an unlisted customer is trained
    _, model, metadata = train(tmp_path, "plain", dipping_history("US", None), calendars)
    # Then its model has the default's holidays
    assert metadata.holiday_calendar == HolidayCalendar.of("US")
    assert model.country_holidays == "US"


def test_no_calendar_and_no_default_trains_without_holidays(tmp_path: Path):
    calendars = CustomerCalendars.load(tmp_path / "absent", default_country="")
    _, model, metadata = train(tmp_path, "plain", dipping_history("US", None), calendars)
    assert metadata.holiday_calendar is None
    assert model.country_holidays is None and model.holidays is None


def test_an_unknown_default_country_fails_the_job_naming_it():
    with pytest.raises(InvalidHyperparametersError, match=r"default_holiday_country='XX'.*'XX'"):
        Hyperparameters.parse({"run_id": RUN_ID, "default_holiday_country": "XX"})
    parsed = Hyperparameters.parse({"run_id": RUN_ID, "default_holiday_country": "DE"})
    assert parsed.default_holiday_country == "DE"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("customer,country\n", "header must be customer_id,country,subdivision"),
        ("customer_id,country,subdivision\na,US,\nb,ZZ,\n", "line 3: .*no country 'ZZ'"),
        ("customer_id,country,subdivision\na,DE,XX\n", "line 2: .*no subdivision 'XX'"),
        ("customer_id,country,subdivision\na,US\n", "line 2: expected 3 fields"),
    ],
)
def test_a_calendars_file_processing_could_not_have_written_fails_the_job(
    tmp_path: Path, text: str, problem: str
):
    folder = write_calendars(tmp_path / "calendars", text)
    with pytest.raises(InvalidCalendarsError, match=problem) as raised:
        CustomerCalendars.load(folder, default_country="")
    assert isinstance(raised.value, JobFailure)
