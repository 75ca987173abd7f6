"""The training container fits only the periods processing marks ``ok`` (issue 26, item 1):
incomplete and inactive periods are gaps, left out of the fit, not filled in."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from prophet.serialize import model_from_json
from test_training_job import DAYS, FIRST_DAY, Instance, run_container, weekly_series

from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.training_manifest import CustomerOutcome

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
