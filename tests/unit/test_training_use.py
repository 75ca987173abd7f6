"""The training container fits only the periods processing marks ``ok`` (issue 26, item 1):
incomplete and inactive periods are gaps, left out of the fit, not filled in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prophet.serialize import model_from_json
from test_training_job import DAYS, FIRST_DAY, Instance, run_container, weekly_series

from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.training import manifest_summary_name
from fleetcast_contracts.training_manifest import CustomerOutcome, ManifestSummary
from fleetcast_training.history import History
from fleetcast_training.run_exports import EXPORTS_DIR, FORECASTS

LEADING = 30


def _with_use(frame: pd.DataFrame, use: list[str]) -> pd.DataFrame:
    return frame.assign(use=use)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Instance:
    # Given a customer whose first 30 days are zeros before it was connected (inactive),
    # with 5 incomplete days later; and one whose every day is inactive
    instance = Instance.create(tmp_path_factory.mktemp("opt-ml"))
    series = weekly_series(1, days=LEADING + DAYS)
    series.loc[: LEADING - 1, "y"] = 0.0
    use = ["inactive"] * LEADING + ["ok"] * DAYS
    for day in range(LEADING + 40, LEADING + 45):
        series.loc[day, "y"] = 1.0  # a day of a few readings of many
        use[day] = "incomplete"
    idle = weekly_series(2).assign(y=0.0)
    instance.add_part(
        "part-00000.parquet",
        {"joins": _with_use(series, use), "idle": _with_use(idle, ["inactive"] * DAYS)},
    )
    assert run_container(instance).exit_code == 0
    return instance


def test_inactive_and_incomplete_periods_are_left_out_of_the_fit(trained: Instance) -> None:
    # Then the model was fitted on the ok days only: from the first day after the zeros,
    # without the five incomplete days
    model_json, metadata = read_archive(trained.archive("joins"))
    assert metadata.rows == DAYS - 5
    first_ok = FIRST_DAY + pd.Timedelta(days=LEADING)
    assert metadata.data_start == first_ok.date()
    history = model_from_json(model_json).history
    assert history is not None and len(history) == DAYS - 5
    assert history["ds"].min() == first_ok
    assert not (history["y"] <= 1.0).any()


def test_a_customer_with_nothing_to_fit_fails_saying_what_was_left_out(trained: Instance) -> None:
    result = {r.customer_id: r for r in trained.manifest().customers}["idle"]
    assert result.outcome is CustomerOutcome.FAILED
    assert result.reason == f"has 0 rows to fit ({DAYS} inactive left out), needs at least 28"
    assert not Path(trained.archive("idle")).exists()


@pytest.fixture(scope="module")
def glitched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Instance, pd.DataFrame]:
    # Given a customer whose meter sent one day a thousand times its largest (a register
    # rolling over), ten days before the end of its history; and the same customer
    # without the glitch
    instance = Instance.create(tmp_path_factory.mktemp("opt-ml"))
    clean = weekly_series(3)
    glitch = clean.copy()
    glitch.loc[DAYS - 10, "y"] = 1000 * clean["y"].max()
    ok = ["ok"] * DAYS
    instance.add_part(
        "part-00000.parquet", {"glitch": _with_use(glitch, ok), "clean": _with_use(clean, ok)}
    )
    assert run_container(instance).exit_code == 0
    return instance, clean


def test_an_implausible_period_is_left_out_of_the_fit_and_the_forecast_keeps_its_level(
    glitched: tuple[Instance, pd.DataFrame],
) -> None:
    instance, clean = glitched
    # Then the glitch's day was left out of the fit, as a gap
    _, metadata = read_archive(instance.archive("glitch"))
    _, clean_metadata = read_archive(instance.archive("clean"))
    assert metadata.rows == DAYS - 1 and clean_metadata.rows == DAYS
    # And the manifest counts it, for the customer and for the instance (registration's
    # record adds the instances' up, and `fleetcast status` shows the run's)
    results = {r.customer_id: r for r in instance.manifest().customers}
    assert results["glitch"].implausible_periods == 1
    assert results["clean"].implausible_periods is None
    summary = ManifestSummary.model_validate_json(
        (instance.checkpoints / manifest_summary_name("algo-1")).read_text()
    )
    assert summary.implausible_periods == 1
    # And the forecast is at the customer's level, as the clean customer's is
    exported = pd.concat(
        pd.read_parquet(path)
        for path in (instance.checkpoints / EXPORTS_DIR / FORECASTS).glob("*.parquet")
    )
    level = float(clean["y"].tail(28).mean())
    for customer_id in ("glitch", "clean"):
        mean = float(exported.loc[exported["customer_id"] == customer_id, "yhat"].mean())
        assert 0.8 * level < mean < 1.2 * level, customer_id


def test_implausible_needs_fifty_times_the_95th_percentile_and_twenty_periods() -> None:
    days = np.arange(40)
    times = (np.datetime64("2025-01-01") + days).astype("datetime64[us]")
    values = 10.0 + days % 7
    p95 = float(np.percentile(values, 95))
    # Given a period just above 50 times the 95th percentile, and, apart, one just below
    above, below = values.copy(), values.copy()
    above[5], below[5] = 50.5 * p95, 49.5 * p95
    # Then only the one above is left out, and counted
    history = History(times, above)
    assert len(history.for_fitting()) == 39
    assert history.left_out() == {"implausible": 1}
    assert history.implausible().values.tolist() == [50.5 * p95]
    assert len(History(times, below).for_fitting()) == 40
    # And a customer of fewer than 20 positive periods has none judged so
    short = History(times[:19], above[:19])
    assert len(short.for_fitting()) == 19 and short.left_out() == {}
