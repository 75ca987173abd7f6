"""The quality gate end to end on a local stack that serves Prophet alone (issue 25 item 6):
an exactly periodic customer's corrected history goes live, and a customer whose newer
model is rejected is told, by the API and the CLI, that its live model predates its latest
data.

The stack has ``ModelCandidates=prophet``: with every family a candidate, seasonal naive
is one, so training never offers a model worse than naive on its backtest and none is
rejected (docs/model-families.md). Prophet alone is gated as every model was before
families existed, against seasonal naive on the backtest; ``ForecastExportDays=7`` makes
that backtest's windows a week long, so the last one is the two periodic weeks' second,
which naive repeats exactly and Prophet misses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from test_pipeline import finished, registry, to_csv, upload
from test_serving import environment, get_when_ready

from fleetcast import cli
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_contracts.families import PROPHET

pytestmark = [
    pytest.mark.e2e,
    # Its stack has other parameters: it cannot share a process with the session's.
    pytest.mark.own_stack,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
PERIODIC = "gate-periodic"
SHIFTED = "gate-shifted"
START = "2024-01-01"


def daily(customer_id: str, start: str, values: np.ndarray) -> pd.DataFrame:
    dates = pd.date_range(start, periods=len(values), freq="D")
    return pd.DataFrame(
        {
            "customer_id": customer_id,
            "timestamp": dates.strftime("%Y-%m-%dT08:00:00Z"),
            "consumption": values,
        }
    )


def weekdays_and_weekends(start: str, days: int, weekday: float, weekend: float) -> np.ndarray:
    dates = pd.date_range(start, periods=days, freq="D")
    return np.where(dates.day_of_week >= 5, weekend, weekday)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    state_dir: Path = tmp_path_factory.mktemp("fleetcast-gate")
    local = EmbeddedStack(
        state_dir=state_dir,
        port=0,
        parameters={
            "TrainingInstanceCount": "1",
            "ModelCandidates": "prophet",
            "ForecastExportDays": "7",
        },
    )
    local.start()
    yield local
    local.stop()


@pytest.fixture(scope="module")
def runs(stack: EmbeddedStack) -> dict[str, Any]:
    """Two uploads: first a periodic customer at 10 on weekdays and 5 at weekends and a
    noisy one near 50; then the periodic one's history corrected to 25 and 12.5, and two
    more weeks of the noisy one, exactly periodic at a fifth of its level, which no model
    fitted on its history forecasts (its trend may not bend in the last fifth of it) while
    seasonal naive repeats them exactly."""
    noise = np.random.default_rng(7).normal(50, 5, 120).round(3)
    first = pd.concat(
        [
            daily(PERIODIC, START, weekdays_and_weekends(START, 70, 10, 5)),
            daily(SHIFTED, START, noise),
        ]
    )
    first_run = upload(stack, "gate-first.csv", to_csv(first))
    assert finished(stack, first_run).customers_registered == 2
    shift_start = str((pd.Timestamp(START) + pd.Timedelta(days=120)).date())
    second = pd.concat(
        [
            daily(PERIODIC, START, weekdays_and_weekends(START, 70, 25, 12.5)),
            daily(SHIFTED, shift_start, weekdays_and_weekends(shift_start, 14, 10, 5)),
        ]
    )
    second_run = upload(stack, "gate-corrected.csv", to_csv(second))
    status = finished(stack, second_run)
    assert stack.info is not None
    return {
        "first": first_run,
        "second": second_run,
        "status": status,
        "env": stack.info.environment(),
    }


def test_an_exactly_periodic_customers_corrected_history_goes_live(
    stack: EmbeddedStack, runs: dict[str, Any]
) -> None:
    # Then the corrected model is live, though seasonal naive's holdout error is exactly 0
    live = registry(stack).live(PERIODIC)
    assert live is not None and live.run_id == runs["second"], live
    assert live.metrics.naive_smape == 0 and live.held_back is None
    # (Prophet's: no model is exactly naive's, so only the gate's tolerance lets it live)
    assert live.model_kind == PROPHET
    # And the API forecasts the corrected levels, 25 on weekdays and 12.5 at weekends
    status, _, body = get_when_ready(runs["env"], f"/customers/{PERIODIC}/forecast?period=14")
    assert status == 200, body
    assert (body["run_id"], body["data_end"]) == (runs["second"], "2024-03-10")
    days = pd.to_datetime([point["ds"] for point in body["forecast"]])
    expected = np.where(days.day_of_week >= 5, 12.5, 25.0)
    np.testing.assert_allclose([p["yhat"] for p in body["forecast"]], expected, rtol=1e-3)
    assert "newer_model" not in body


def test_a_rejected_newer_model_is_named_in_every_answer_from_the_older_one(
    stack: EmbeddedStack, runs: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Then the shifted customer's newer model was rejected and the first stays live
    live = registry(stack).live(SHIFTED)
    assert live is not None and live.run_id == runs["first"], live
    assert runs["status"].customers_registered == 1
    # And both routes answer from the first model and say why the newer one is not live
    for route in ("forecast", "model"):
        status, _, body = get_when_ready(runs["env"], f"/customers/{SHIFTED}/{route}")
        assert status == 200 and body["run_id"] == runs["first"], body
        newer = body["newer_model"]
        assert (newer["run_id"], newer["status"], newer["data_end"]) == (
            runs["second"],
            "rejected",
            "2024-05-13",
        )
        # (a backtested model's reason: its backtest error against naive's, no ratio)
        assert "backtest mean absolute error" in newer["reason"]
        assert "over seasonal naive's" in newer["reason"]
        assert "predates the customer's latest data" in newer["message"]
    # And `fleetcast forecast` prints it as a note
    with environment(runs["env"]):
        assert cli.main(["forecast", SHIFTED]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"note: the live model (run {runs['first']}, data to 2024-04-29) predates" in printed
