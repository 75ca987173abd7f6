"""Training one customer in-process: the faster Stan backend, options and failures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prophet import Prophet

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.quality_gate import passes_quality_gate
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_forecasters import seasonal_naive
from fleetcast_training.customer_training import CustomerTrainer
from fleetcast_training.failures import FailureKind
from fleetcast_training.history import History
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.stan_backend import ScratchStanBackend, silence_stan_logging

RUN_ID = "q0000000904-20260101t120000"


def series(periods: int, freq: str = "D", seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ds = pd.date_range("2025-01-01", periods=periods, freq=freq)
    hours = np.arange(periods) * (24 if freq == "D" else 1)
    y = 300 + 40 * np.sin(2 * np.pi * hours / 168) + 15 * np.sin(2 * np.pi * hours / 24)
    return pd.DataFrame({"ds": ds, "y": y + rng.normal(0, 5, periods)})


def trainer(tmp_path: Path, **hyperparameters: str) -> CustomerTrainer:
    silence_stan_logging()
    settings = Hyperparameters.parse({"run_id": RUN_ID, **hyperparameters})
    (tmp_path / "checkpoints").mkdir(parents=True)
    (tmp_path / "scratch").mkdir(parents=True)
    return CustomerTrainer(settings, tmp_path / "checkpoints", tmp_path / "scratch")


def write_customer(tmp_path: Path, frame: pd.DataFrame) -> Path:
    path = tmp_path / "acme.csv"
    frame.to_csv(path, index=False)
    return path


def test_scratch_backend_reaches_the_same_optimum_as_prophets_own(tmp_path: Path):
    # Given one series
    history = series(200)
    silence_stan_logging()
    # When fitted with Prophet's backend and with ours
    stock = Prophet().fit(history)
    ours = Prophet()
    ours.stan_backend = ScratchStanBackend(tmp_path)
    ours.fit(history)
    # Then CmdStan returned the very same parameters
    assert stock.params.keys() == ours.params.keys()
    for name in stock.params:
        np.testing.assert_array_equal(ours.params[name], stock.params[name])
    # And the fit left no files behind
    assert list(tmp_path.iterdir()) == []


def test_every_candidate_is_scored_on_one_backtest_and_the_choice_recorded(tmp_path: Path):
    # Given a customer with enough history for three 30-day windows
    source = write_customer(tmp_path, series(200))
    # When trained with every family as a candidate
    report = trainer(tmp_path).train("acme", source)
    # Then its archive says which family made the model and how every candidate scored
    assert report.result.outcome is CustomerOutcome.TRAINED
    model_json, metadata = read_archive(tmp_path / "checkpoints" / "acme.tar.gz")
    backtest = metadata.backtest
    assert backtest is not None
    assert backtest.horizon == 30 and backtest.windows == 3
    kinds = {score.model_kind for score in backtest.candidates}
    assert kinds == {
        "seasonal_naive",
        "seasonal_median",
        "ets",
        "theta",
        "prophet",
        "combination",
        "naive_blend",
    }
    assert metadata.model_kind == backtest.chosen != backtest.runner_up
    assert json.loads(model_json)["kind" if backtest.chosen != "prophet" else "growth"]
    # And the served model passes the quality gate: its backtest error is not worse than
    # seasonal naive's by more than the gate's tolerance
    chosen, naive = backtest.score(backtest.chosen), backtest.score("seasonal_naive")
    assert chosen is not None and naive is not None
    assert chosen.wape is not None and naive.wape is not None
    assert passes_quality_gate(metadata.metrics)
    assert metadata.metrics.wape == chosen.wape and metadata.metrics.naive_wape == naive.wape
    assert metadata.metrics.holdout_days == 30 and metadata.metrics.windows == 3


def test_a_customer_whose_use_fell_weeks_ago_is_not_served_prophets_old_level(tmp_path: Path):
    # Given a customer whose use fell to a fifth 25 days before the end of its history
    frame = series(200)
    frame.loc[frame.index[-25:], "y"] *= 0.2
    source = write_customer(tmp_path, frame)
    # When trained with every family as a candidate
    report = trainer(tmp_path).train("acme", source)
    # Then its archive records the fall, Prophet (scored still) is in no served model,
    # and the served forecast is at the new level
    assert report.result.outcome is CustomerOutcome.TRAINED
    model_json, metadata = read_archive(tmp_path / "checkpoints" / "acme.tar.gz")
    assert metadata.backtest is not None
    assert metadata.backtest.level_shift_days == 25
    assert "prophet cannot follow: left out" in metadata.backtest.why
    assert metadata.backtest.score("prophet") is not None
    model = json.loads(model_json)
    assert metadata.model_kind != "prophet"
    assert "prophet" not in {member["kind"] for member in model.get("members", [])}
    assert report.forecast is not None
    new_level = float(frame["y"].iloc[-25:].mean())
    assert 0.75 * new_level < float(np.mean(report.forecast.yhat)) < 1.25 * new_level


def test_hourly_customer_is_scored_on_whole_days(tmp_path: Path):
    # Given four weeks of hourly data and a one-day holdout (a backtest of three windows
    # needs them and a week of hours, the season, before them)
    source = write_customer(tmp_path, series(672, freq="h"))
    hourly = trainer(tmp_path, frequency="H", holdout_days="1", min_rows="48")
    # When trained
    report = hourly.train("acme", source)
    # Then the last 24 hours were held out, against the same hour a week before
    assert report.result.outcome is CustomerOutcome.TRAINED
    _, metadata = read_archive(tmp_path / "checkpoints" / "acme.tar.gz")
    assert metadata.frequency is Frequency.HOURLY
    assert metadata.rows == 672
    assert metadata.metrics.holdout_days == 1
    assert metadata.metrics.smape < 0.1


@pytest.mark.parametrize(
    ("candidates", "prophet_scored"), [({}, False), ({"candidates": "ets,theta,prophet"}, True)]
)
def test_an_hourly_model_fits_prophet_only_where_it_is_named(
    tmp_path: Path, candidates: dict[str, str], prophet_scored: bool
):
    # Given four weeks of hourly data
    source = write_customer(tmp_path, series(672, freq="h"))
    # When trained with the default candidates, and with Prophet named among them
    hourly = trainer(tmp_path, frequency="H", holdout_days="1", min_rows="48", **candidates)
    report = hourly.train("acme", source)
    # Then the default (an hourly model's: every family but Prophet) fits no Prophet model,
    # and a list that names Prophet has it scored like every other candidate
    assert report.result.outcome is CustomerOutcome.TRAINED
    _, metadata = read_archive(tmp_path / "checkpoints" / "acme.tar.gz")
    assert metadata.backtest is not None
    assert (metadata.backtest.score("prophet") is not None) is prophet_scored
    assert metadata.backtest.score("ets") is not None


def test_a_prophet_fit_that_raises_leaves_the_other_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a Prophet fit that raises
    source = write_customer(tmp_path, series(60))

    def explode(self: Prophet, *_: object, **__: object) -> Prophet:
        raise RuntimeError("Error during optimization!")

    monkeypatch.setattr(Prophet, "fit", explode)
    # When the customer is trained
    report = trainer(tmp_path).train("acme", source)
    # Then it is served by another family, scored without Prophet
    assert report.result.outcome is CustomerOutcome.TRAINED
    _, metadata = read_archive(tmp_path / "checkpoints" / "acme.tar.gz")
    assert metadata.backtest is not None
    assert "prophet" not in {score.model_kind for score in metadata.backtest.candidates}
    assert metadata.model_kind != "prophet"


def test_an_exception_in_every_candidate_fails_that_customer_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a seasonal naive whose fit raises, the only candidate besides a failing Prophet
    source = write_customer(tmp_path, series(60))

    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("Error during optimization!")

    monkeypatch.setattr(Prophet, "fit", explode)
    monkeypatch.setattr(type(seasonal_naive.FAMILY), "fit", explode)
    # When the customer is trained
    report = trainer(tmp_path, candidates="prophet").train("acme", source)
    # Then it comes back failed, with the error, and no archive
    assert report.result.outcome is CustomerOutcome.FAILED
    assert report.failure_kind is FailureKind.FIT_FAILED
    assert report.result.reason == "RuntimeError: Error during optimization!"
    assert not (tmp_path / "checkpoints" / "acme.tar.gz").exists()


@pytest.mark.parametrize(("days", "yearly_order"), [(200, 0), (400, 10)])
def test_yearly_seasonality_is_on_after_one_year_of_history(
    tmp_path: Path, days: int, yearly_order: int
):
    # Given a customer with under or over a year of daily history (Prophet's own "auto"
    # would wait for two years)
    history = series(days)
    # When its seasonalities are resolved
    orders = trainer(tmp_path)._prophet._seasonality_orders(History.of(history))
    # Then yearly terms are used once a year is there, and weekly ones always
    assert orders["yearly"] == yearly_order
    assert orders["weekly"] > 0


def test_fits_are_counted_by_method(tmp_path: Path):
    # Given a linear additive customer and a multiplicative one
    source = write_customer(tmp_path, series(60))
    additive = trainer(tmp_path).train("acme", source)
    (tmp_path / "checkpoints").rename(tmp_path / "first")
    (tmp_path / "scratch").rename(tmp_path / "first-scratch")
    multiplicative = trainer(tmp_path, seasonality_mode="multiplicative").train("acme", source)
    # Then the first is fitted in-process on its whole history and before each of the
    # backtest's three origins, the second as often by CmdStan, with why
    assert additive.result.fit_methods == {"in-process": 4}
    assert multiplicative.result.fit_methods == {"cmdstan (multiplicative components)": 4}
    assert multiplicative.result.outcome is CustomerOutcome.TRAINED


@pytest.mark.parametrize(
    ("periods", "freq", "settings"),
    [
        (10, "D", {}),
        (20, "D", {}),
        (800, "D", {}),
        (30, "h", {}),
        (100, "h", {"daily_seasonality": "false", "weekly_seasonality": "5"}),
        (120, "7D", {}),
        (120, "7D", {"weekly_seasonality": "true", "yearly_seasonality": "false"}),
    ],
)
def test_seasonality_orders_are_prophets_auto_choices(
    tmp_path: Path, periods: int, freq: str, settings: dict[str, str]
):
    # Given a history (under a year, or over two, where fleetcast's yearly rule and
    # Prophet's agree) and the seasonality settings
    history = series(periods, freq=freq)
    ours = trainer(tmp_path, **settings)
    # When resolved by the trainer and by Prophet's own set_auto_seasonalities
    orders = ours._prophet._seasonality_orders(History.of(history))
    hyper = Hyperparameters.parse({"run_id": RUN_ID, **settings})
    probe = Prophet(
        yearly_seasonality=hyper.yearly_seasonality,
        weekly_seasonality=hyper.weekly_seasonality,
        daily_seasonality=hyper.daily_seasonality,
    )
    probe.history = history[["ds"]]
    probe.set_auto_seasonalities()
    # Then they are the same
    expected = {
        name: probe.seasonalities[name]["fourier_order"] if name in probe.seasonalities else 0
        for name in ("yearly", "weekly", "daily")
    }
    assert orders == expected


@pytest.mark.parametrize("export_days", ["30", "0"])
def test_the_export_forecast_reports_its_own_cpu_time(tmp_path: Path, export_days: str):
    # Given a trainer with the run's forecast export on, or off
    source = write_customer(tmp_path, series(400))
    report = trainer(tmp_path, forecast_export_days=export_days).train("acme", source)
    # Then a forecast comes with the CPU time it took, and no forecast costs none
    if export_days == "0":
        assert report.forecast is None and report.export_cpu_seconds == 0.0
    else:
        assert report.forecast is not None and len(report.forecast.yhat) == 30
        assert 0.0 < report.export_cpu_seconds < 5.0


def test_a_batch_fits_every_customer_then_forecasts_them_as_one_by_one(tmp_path: Path):
    # Given two customers and one that fails
    sources = []
    for number, frame in enumerate((series(400, seed=1), series(300, seed=2), series(5))):
        path = tmp_path / f"c{number}.csv"
        frame.to_csv(path, index=False)
        sources.append((f"c{number}", path))
    # When one trainer takes them as a batch, and another one by one
    told: list[str] = []
    batched = trainer(tmp_path / "batch").train_batch(sources, told.append)
    one_by_one = trainer(tmp_path / "alone")
    alone = [one_by_one.train(*source) for source in sources]
    # Then it was told each customer before reading it, each readable one before its fit,
    # then each trained one before its forecast
    assert told == ["c0", "c1", "c2", "c0", "c1", "c0", "c1"]
    # And the reports are the same: outcomes, and the forecasts to the number
    assert [r.result.outcome for r in batched] == [r.result.outcome for r in alone]
    assert batched[2].result.outcome is CustomerOutcome.FAILED and batched[2].forecast is None
    for ours, theirs in zip(batched[:2], alone[:2], strict=True):
        assert ours.forecast is not None and theirs.forecast is not None
        np.testing.assert_array_equal(ours.forecast.yhat, theirs.forecast.yhat)
        np.testing.assert_array_equal(ours.forecast.yhat_upper, theirs.forecast.yhat_upper)
