"""Customers of one model shape share Prophet's preprocessing: the archived models are
Prophet's own, byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prophet.serialize import model_from_json, model_to_dict

from fleetcast_contracts.families import PROPHET
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import HolidayCalendar
from fleetcast_contracts.model_archive import read_archive
from fleetcast_forecasters.prophet_compile import compile_model
from fleetcast_training import prophet_candidate
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.customer_training import SHARED, CustomerTrainer
from fleetcast_training.grid_fit import ShapeTemplate, values_json
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.prophet_model import FleetcastProphet
from fleetcast_training.stan_backend import IN_PROCESS, FleetcastStanBackend, silence_stan_logging

RUN_ID = "q0000000904-20260101t120000"


def meter(ds: pd.DatetimeIndex, seed: int, kind: str = "usage") -> pd.DataFrame:
    """A customer's readings on ``ds``: daily/weekly/yearly cycles and noise, with the
    quirks of real meters by ``kind``."""
    rng = np.random.default_rng(seed)
    hours = ((ds - pd.Timestamp("2020-01-01")) / pd.Timedelta(hours=1)).to_numpy()
    y = (
        rng.uniform(50, 5000)
        + rng.uniform(0, 300) * np.sin(2 * np.pi * hours / 168 + rng.uniform(0, 6))
        + rng.uniform(0, 300) * np.sin(2 * np.pi * hours / 8766)
        + rng.uniform(0, 100) * np.sin(2 * np.pi * hours / 24)
        + rng.normal(0, rng.uniform(1, 80), ds.size)
    ).copy()
    if kind == "level shift":
        y[ds.size // 2 :] += rng.uniform(500, 2000)
    elif kind == "outliers":
        y[rng.choice(ds.size, 5, replace=False)] *= 8
    elif kind == "near zero":
        y = rng.uniform(0, 1e-3, ds.size)
    elif kind == "negative":
        y -= 2 * y.mean()
    elif kind == "mostly zero":
        y = np.where(rng.uniform(size=ds.size) < 0.9, 0.0, y)
    return pd.DataFrame({"ds": ds, "y": y})


def with_gaps(frame: pd.DataFrame, seed: int, share: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kept = rng.uniform(size=len(frame)) >= share
    kept[0] = kept[-1] = True
    return frame[kept].reset_index(drop=True)


def fleet() -> dict[str, pd.DataFrame]:
    """Varied customers, several per shape: the first of each shape is fitted by Prophet."""
    two_years = pd.date_range("2023-01-01", "2024-12-31", freq="D")
    kinds = ["usage", "level shift", "outliers", "near zero", "negative", "mostly zero"]
    customers = {}
    for number in range(24):
        frame = meter(two_years, number, kinds[number % len(kinds)])
        if number % 3 == 1:
            frame = with_gaps(frame, number, 0.02 + 0.1 * (number % 4))
        if number % 4 == 2:
            frame = frame.iloc[number * 3 :].reset_index(drop=True)  # starts later
        if number % 5 == 3:
            frame = frame.iloc[: -number * 2].reset_index(drop=True)  # ends earlier
        customers[f"daily-{number:02d}"] = frame
    # Short histories: Prophet lowers its changepoints to the rows it has.
    for number, days in enumerate((30, 33, 45, 60)):
        customers[f"short-{number}"] = meter(
            pd.date_range("2024-03-01", periods=days, freq="D"), 100 + number
        )
    # Hourly, three weeks, with gaps.
    hours = pd.date_range("2024-05-01", periods=21 * 24, freq="h")
    for number in range(4):
        customers[f"hourly-{number}"] = with_gaps(meter(hours, 200 + number), number, 0.05)
    customers["constant"] = pd.DataFrame({"ds": two_years, "y": 42.0})
    return customers


def train_fleet(
    folder: Path,
    customers: dict[str, pd.DataFrame],
    calendars: CustomerCalendars | None,
    kept: int,
    frequency: str = "D",
) -> tuple[CustomerTrainer, dict[str, str]]:
    silence_stan_logging()
    settings = Hyperparameters.parse(
        {
            "run_id": RUN_ID,
            "forecast_export_days": "0",
            "candidates": "prophet",
            "frequency": frequency,
        }
    )
    for name in ("checkpoints", "scratch", "input"):
        (folder / name).mkdir(parents=True)
    trainer = CustomerTrainer(
        settings, folder / "checkpoints", folder / "scratch", calendars, shapes_kept=kept
    )
    models = {}
    for customer_id, frame in customers.items():
        source = folder / "input" / f"{customer_id}.csv"
        frame.to_csv(source, index=False)
        report = trainer.train(customer_id, source)
        assert report.failure_kind is None, report.result.reason
        models[customer_id], _ = read_archive(folder / "checkpoints" / f"{customer_id}.tar.gz")
    return trainer, models


@pytest.mark.parametrize(
    "calendar",
    [None, HolidayCalendar.of("US"), HolidayCalendar.of("DE", "BY")],
    ids=["no holidays", "US", "DE-BY"],
)
def test_models_from_a_shared_shape_are_prophets_own_json(tmp_path: Path, calendar):
    # Given a varied fleet (gaps, other start and end days, short and hourly histories,
    # level shifts, outliers, near-zero and constant series) on one holiday calendar
    customers = fleet()
    calendars = CustomerCalendars(default=calendar)
    # When it is trained with shared preprocessing, and with Prophet's for every customer
    shared, shared_models = train_fleet(tmp_path / "shared", customers, calendars, kept=16)
    alone, alone_models = train_fleet(tmp_path / "alone", customers, calendars, kept=0)
    # Then most customers took the shared path, the rest (one per shape, the constant
    # series) went through Prophet
    assert alone.preprocessing == {PROPHET: len(customers)}
    assert shared.preprocessing[SHARED] >= len(customers) // 2
    assert shared.preprocessing[SHARED] + shared.preprocessing[PROPHET] == len(customers)
    # And every archived model is the same text
    for customer_id in customers:
        assert shared_models[customer_id] == alone_models[customer_id], customer_id
    # And every fit was the exact in-process one
    assert alone._backend.fit_methods.keys() == {IN_PROCESS}


def test_a_shared_model_forecasts_as_prophet_does(tmp_path: Path):
    # Given two customers of one shape, the second with gaps
    days = pd.date_range("2023-01-01", "2024-12-31", freq="D")
    customers = {"first": meter(days, 1), "second": with_gaps(meter(days, 2), 2, 0.1)}
    trainer, models = train_fleet(tmp_path, customers, CustomerCalendars(), kept=16)
    assert trainer.preprocessing == {PROPHET: 1, SHARED: 1}
    # When the second's model is loaded by Prophet
    model = model_from_json(models["second"])
    # Then it has the customer's own history and predicts its own fitted values
    assert model.history is not None
    assert len(model.history) == len(customers["second"])
    # (pandas writes ten decimals)
    np.testing.assert_allclose(model.history["y"], customers["second"]["y"], rtol=1e-12)
    fitted = model.predict(customers["second"][["ds"]])
    assert np.abs(fitted["yhat"] - customers["second"]["y"]).mean() < customers["second"]["y"].std()


def test_a_template_is_kept_only_if_it_rebuilds_prophets_dict(tmp_path: Path):
    # Given Prophet's fit of a customer with fleetcast's backend, and its dict
    silence_stan_logging()
    frame = meter(pd.date_range("2024-01-01", periods=120, freq="D"), 3)
    backend = FleetcastStanBackend(tmp_path)
    model = FleetcastProphet()
    model.stan_backend = backend
    model.fit(frame)
    fitted = model_to_dict(model)
    assert backend.last_stan_data is not None
    # Then a template is made from it
    assert ShapeTemplate.of(fitted, model.history, backend.last_stan_data, 25) is not None
    # But not when the dict it must rebuild differs in any field
    altered = {**fitted, "history_dates": fitted["history_dates"].replace("2024", "2025")}
    assert ShapeTemplate.of(altered, model.history, backend.last_stan_data, 25) is None


def test_values_are_printed_as_pandas_to_json_prints_them():
    values = np.array([0.1, 1e-12, 123456789.123456789, 5.0, -0.0, 1e20, -3.25])
    frame = pd.DataFrame({"y": values})
    printed = frame.to_json(orient="records")
    assert printed == "[" + ",".join(f'{{"y":{v}}}' for v in values_json(values)) + "]"


def test_a_shape_covers_its_years_so_other_customers_gaps_need_no_prophet_fit(tmp_path: Path):
    # Given a first customer that starts in March and misses a fifth of its days, and a
    # second with every day of the same two years, on a holiday calendar
    days = pd.date_range("2023-01-01", "2024-12-31", freq="D")
    first = with_gaps(meter(days, 5), 5, 0.2).iloc[60:].reset_index(drop=True)
    customers = {"first": first, "second": meter(days, 6)}
    calendars = CustomerCalendars(default=HolidayCalendar.of("US"))
    # When trained with shared preprocessing and with Prophet's alone
    shared, shared_models = train_fleet(tmp_path / "shared", customers, calendars, kept=16)
    _, alone_models = train_fleet(tmp_path / "alone", customers, calendars, kept=0)
    # Then the second customer's days came from the first one's shape, not from a fit of
    # its own, and both models are Prophet's text
    assert shared.preprocessing == {PROPHET: 1, SHARED: 1}
    assert shared_models == alone_models


def train_hourly(
    folder: Path, customers: dict[str, pd.DataFrame], kept: int
) -> tuple[CustomerTrainer, dict[str, str]]:
    """``train_fleet`` for hourly models (ModelFrequency=H)."""
    return train_fleet(folder, customers, None, kept, frequency="H")


def test_an_hourly_models_json_keeps_four_weeks_of_history_and_forecasts_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given hourly customers of ten weeks, the second with gaps
    hours = pd.date_range("2024-03-04", periods=10 * 168, freq="h")
    customers = {
        "first": meter(hours, 11),
        "second": with_gaps(meter(hours, 12), 12, 0.05),
        "third": meter(hours, 13),
    }
    # When they are trained with shared preprocessing, with Prophet's, and keeping the
    # whole history in the JSON
    shared, shared_models = train_hourly(tmp_path / "shared", customers, kept=16)
    _, alone_models = train_hourly(tmp_path / "alone", customers, kept=0)
    monkeypatch.setitem(prophet_candidate.KEPT_HISTORY_DAYS, Frequency.HOURLY, None)
    _, whole_models = train_hourly(tmp_path / "whole", customers, kept=16)
    # Then the shared path's models are Prophet's text, cut the same way
    assert shared.preprocessing[SHARED] >= 1
    assert shared_models == alone_models
    for customer_id, frame in customers.items():
        model, whole = (
            model_from_json(shared_models[customer_id]),
            model_from_json(whole_models[customer_id]),
        )
        # And each keeps its last four weeks of rows: dates, values, fitted trend
        assert model.history is not None and whole.history is not None
        assert model.history_dates is not None
        assert len(whole.history) == len(frame)
        assert len(model.history) == len(model.history_dates) == 28 * 24
        assert model.params["trend"].shape == (1, 28 * 24)
        np.testing.assert_array_equal(model.history_dates, frame["ds"].iloc[-28 * 24 :])
        np.testing.assert_array_equal(model.params["trend"], whole.params["trend"][:, -28 * 24 :])
        # And Prophet forecasts the next 30 days exactly as from the whole history
        future = pd.DataFrame(
            {"ds": pd.date_range(frame["ds"].iloc[-1], periods=721, freq="h")[1:]}
        )
        model.uncertainty_samples = whole.uncertainty_samples = 0
        np.testing.assert_array_equal(model.predict(future)["yhat"], whole.predict(future)["yhat"])
        # And so does the endpoint's compiled model, interval included, for any period
        for period in (720, 24, 1):
            ours = compile_model(shared_models[customer_id], "H", 720).forecast(period, 3)
            theirs = compile_model(whole_models[customer_id], "H", 720).forecast(period, 3)
            np.testing.assert_array_equal(ours.yhat, theirs.yhat)
            # (a one-period interval reads the history's mean step: the same up to
            # rounding where the rows are regular, a little off where hours are missing)
            tolerance = 1e-9 if period > 1 or customer_id != "second" else 1e-3
            for name in ("yhat_lower", "yhat_upper"):
                np.testing.assert_allclose(
                    getattr(ours, name), getattr(theirs, name), rtol=tolerance
                )
