"""ModelFrequency=H end to end on a local stack of its own (issue 27, "What to build" 3):
hourly readings become hourly histories and hourly models, the API forecasts a day ahead
and more hour by hour, and the run's export and accuracy report are hourly too."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from forecast_api_helpers import violations
from test_pipeline import finished, registry, to_csv, upload
from test_serving import get_when_ready

from fleetcast.cli import main
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_contracts import layout
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.stages import PROCESSING, TRAINING

pytestmark = [
    pytest.mark.e2e,
    # ModelFrequency=H: it cannot share the session's (daily) stack.
    pytest.mark.own_stack,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
CUSTOMERS = ["hour-a", "hour-b", "hour-c"]
START, DAYS = "2024-09-01", 91
EXPORT_DAYS = 3
# Use peaks at 19:00 UTC every day, lowest at 07:00.
PEAK_HOUR = 19


@pytest.fixture(scope="module")
def hourly_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    local = EmbeddedStack(
        state_dir=tmp_path_factory.mktemp("fleetcast-hourly"),
        port=0,
        parameters={
            "ModelFrequency": "H",
            "TrainingInstanceCount": "1",
            "HoldoutDays": "2",
            "ForecastExportDays": str(EXPORT_DAYS),
        },
    )
    local.start()
    yield local
    local.stop()


def hourly_readings() -> pd.DataFrame:
    """Four readings an hour (as a smart meter's quarter hours), a daily cycle, lower at
    weekends: the processing job totals them per UTC hour."""
    stamps = pd.date_range(START, periods=DAYS * 96, freq="15min", tz="UTC")
    rng = np.random.default_rng(11)
    hour = stamps.hour.to_numpy()
    daily = 1 + 0.5 * np.cos(2 * np.pi * (hour - PEAK_HOUR) / 24)
    weekly = 1 - 0.2 * (stamps.day_of_week.to_numpy() >= 5)
    frames = []
    for index, customer_id in enumerate(CUSTOMERS):
        use = (5 + index) * daily * weekly + rng.normal(0, 0.05, stamps.size)
        frames.append(
            pd.DataFrame(
                {
                    "customer_id": customer_id,
                    "timestamp": stamps.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "consumption": use.round(3),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@pytest.fixture(scope="module")
def hourly_run(hourly_stack: EmbeddedStack) -> dict[str, Any]:
    run_id = upload(hourly_stack, "hourly.csv.gz", gzip.compress(to_csv(hourly_readings())))
    return {"run_id": run_id, "status": finished(hourly_stack, run_id)}


def test_hourly_readings_make_hourly_models(
    hourly_stack: EmbeddedStack, hourly_run: dict[str, Any]
) -> None:
    status = hourly_run["status"]
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert status.job(TRAINING).status == "Completed", status.job(TRAINING).failure
    assert status.customers_registered == len(CUSTOMERS)
    assert hourly_stack.info is not None
    s3 = hourly_stack.client("s3")
    for customer_id in CUSTOMERS:
        live = registry(hourly_stack).live(customer_id)
        assert live is not None and live.run_id == hourly_run["run_id"]
        # One row an hour: 91 days of quarter hours, totalled per hour
        assert live.rows == DAYS * 24
        archive = s3.get_object(
            Bucket=hourly_stack.info.artifacts_bucket, Key=layout.MODELS_PREFIX + live.target_model
        )["Body"].read()
        _, metadata = read_archive(archive)
        assert metadata.frequency.lower() == "h"


# (720: 30 days of hours, an hourly model's longest forecast)
@pytest.mark.parametrize("period", [24, 48, 168, 720])
def test_the_api_forecasts_a_day_ahead_and_more_hour_by_hour(
    hourly_stack: EmbeddedStack, hourly_run: dict[str, Any], period: int
) -> None:
    assert hourly_stack.info is not None
    env = hourly_stack.info.environment()
    for customer_id in CUSTOMERS:
        status, _, body = get_when_ready(env, f"/customers/{customer_id}/forecast?period={period}")
        assert status == 200, body
        # (in the model's own unit, and saying so)
        assert (body["frequency"], body["period_unit"], body["period"]) == ("H", "hour", period)
        # (each hour in UTC with its offset, as docs/openapi.json says: RFC 3339)
        assert violations("/customers/{customer_id}/forecast", status, body) == []
        stamps = pd.to_datetime([point["ds"] for point in body["forecast"]], utc=True)
        # Then `period` hours, one after the other, from the hour after the history's last
        assert len(stamps) == period
        assert (pd.Series(stamps).diff().dropna() == pd.Timedelta(hours=1)).all()
        assert stamps[0] == pd.Timestamp(START, tz="UTC") + pd.Timedelta(hours=DAYS * 24)
        # And the forecast follows the day's cycle: highest in the evening, not the morning
        yhat = pd.Series([point["yhat"] for point in body["forecast"]], index=stamps.hour)
        by_hour = yhat.groupby(level=0).mean()
        assert abs(int(by_hour.idxmax()) - PEAK_HOUR) <= 2, by_hour.round(2).to_dict()


def test_the_model_says_it_is_hourly_and_a_longer_forecast_is_refused_in_hours(
    hourly_stack: EmbeddedStack, hourly_run: dict[str, Any]
) -> None:
    assert hourly_stack.info is not None
    env = hourly_stack.info.environment()
    # When the model route is asked, then it names the frequency and its longest forecast
    status, _, model = get_when_ready(env, f"/customers/{CUSTOMERS[0]}/model")
    assert status == 200, model
    assert (model["frequency"], model["period_unit"], model["max_period"]) == ("H", "hour", 720)
    assert violations("/customers/{customer_id}/model", status, model) == []
    # And past 720 hours, the refusal speaks of hours (not of days)
    status, _, body = get_when_ready(env, f"/customers/{CUSTOMERS[0]}/forecast?period=721")
    assert status == 400, body
    assert "720 hours for an hourly model" in body["message"]
    assert "whole number of days" not in body["message"]


def test_the_cli_speaks_of_hours_and_draws_an_hourly_chart(
    hourly_stack: EmbeddedStack,
    hourly_run: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert hourly_stack.info is not None
    for name, value in hourly_stack.info.environment().items():
        monkeypatch.setenv(name, value)
    plot = tmp_path / "hourly.png"
    # When the CLI forecasts 48 hours of an hourly customer, with its chart
    assert main(["forecast", CUSTOMERS[0], "--period", "48", "--plot", str(plot)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    # Then it says hours of an hourly model, and the chart is drawn
    assert f"customer {CUSTOMERS[0]}: next 48 hours from hourly model v1" in printed, printed
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_export_and_the_report_are_hourly(
    hourly_stack: EmbeddedStack,
    hourly_run: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert hourly_stack.info is not None
    for name, value in hourly_stack.info.environment().items():
        monkeypatch.setenv(name, value)
    run_id = hourly_run["run_id"]
    # The export: ForecastExportDays of hours for every customer
    output = tmp_path / "hourly.parquet"
    assert main(["export", "--run", run_id, "-o", str(output)]) == 0
    forecasts = pq.read_table(output).to_pandas()
    assert forecasts.groupby("customer_id").size().to_dict() == dict.fromkeys(
        CUSTOMERS, EXPORT_DAYS * 24
    )
    for _, rows in forecasts.groupby("customer_id"):
        assert (
            np.diff(pd.to_datetime(rows["ds"]).sort_values().to_numpy()) == np.timedelta64(1, "h")
        ).all()
    # The accuracy table and its report: every customer scored on its hours
    accuracy = tmp_path / "accuracy.parquet"
    assert main(["export", "--run", run_id, "--table", "accuracy", "-o", str(accuracy)]) == 0
    scored = pq.read_table(accuracy).to_pandas()
    assert sorted(scored["customer_id"]) == CUSTOMERS
    assert (scored["rows"] == DAYS * 24).all()
    report = tmp_path / "report.html"
    assert main(["report", "--run", run_id, "-o", str(report)]) == 0
    assert all(customer_id in report.read_text() for customer_id in CUSTOMERS)
