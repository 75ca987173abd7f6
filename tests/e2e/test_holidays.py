"""Holidays end to end on a local stack whose default holiday country is FR: a metadata
upload gives one customer US holidays and another Bavaria's, a third has none and gets
the default; after their readings are trained, the live models' archives record those
calendars and the API's forecast dips on each calendar's holidays."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_pipeline import finished, registry, to_csv
from test_serving import get

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import run_ids, wait_for_new_run
from fleetcast_contracts import layout
from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.stages import PROCESSING, TRAINING

pytestmark = [
    pytest.mark.e2e,
    # Its stack has DefaultHolidayCountry=FR: it cannot share a process with the session's.
    pytest.mark.own_stack,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
CALENDARS = {
    "hol-us": HolidayCalendar.of("US"),
    "hol-by": HolidayCalendar.of("DE", "BY"),
    "hol-default": HolidayCalendar.of("FR"),  # no metadata: the stack's default
}
START, END = "2023-01-01", "2024-12-10"


@pytest.fixture(scope="module")
def holiday_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    state_dir: Path = tmp_path_factory.mktemp("fleetcast-holidays")
    local = EmbeddedStack(
        state_dir=state_dir,
        port=0,
        parameters={"TrainingInstanceCount": "1", "DefaultHolidayCountry": "FR"},
    )
    local.start()
    yield local
    local.stop()


def readings() -> pd.DataFrame:
    """Two years of daily use, 40% lower on each customer's own holidays."""
    dates = pd.date_range(START, END, freq="D")
    rng = np.random.default_rng(5)
    frames = []
    for customer_id, calendar in CALENDARS.items():
        days = {d for d, _ in holiday_dates(calendar.country, calendar.subdivision, (2023, 2024))}
        holiday = np.array([stamp.date() in days for stamp in dates])
        use = 500 * (1 - 0.15 * (dates.day_of_week >= 5)) + rng.normal(0, 8, dates.size)
        frames.append(
            pd.DataFrame(
                {
                    "customer_id": customer_id,
                    "timestamp": dates.strftime("%Y-%m-%dT08:00:00Z"),
                    "consumption": np.where(holiday, 0.6 * use, use).round(3),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def put(stack: EmbeddedStack, key: str, body: bytes) -> str:
    assert stack.info is not None
    sagemaker = stack.client("sagemaker")
    known = run_ids(stack.info.job_name_prefix, sagemaker)
    stack.client("s3").put_object(Bucket=stack.info.raw_bucket, Key=key, Body=body)
    return wait_for_new_run(stack.info.job_name_prefix, sagemaker, known)


def test_customers_are_forecast_with_their_own_holidays(holiday_stack: EmbeddedStack) -> None:
    stack = holiday_stack
    assert stack.info is not None
    # Given customer metadata uploaded before any readings (kept until they arrive)
    metadata = b"customer_id,country,subdivision,tariff\nhol-us,US,,flat\nhol-by,DE,BY,night\n"
    metadata_run = put(stack, "incoming/metadata/customers.csv", metadata)
    # (a metadata upload that retrains nobody is done once processed: no training job)
    metadata_status = finished(stack, metadata_run)
    assert metadata_status.job(PROCESSING).status == "Completed", metadata_status
    assert metadata_status.customers_to_train == 0 and metadata_status.job(TRAINING).name is None
    # When the customers' readings are uploaded and trained
    run_id = put(stack, "incoming/holidays.csv", to_csv(readings()))
    status = finished(stack, run_id)
    assert status.customers_registered == len(CALENDARS), status

    models = registry(stack)
    s3 = stack.client("s3")
    env = stack.info.environment()
    for customer_id, calendar in CALENDARS.items():
        # Then each live model's archive records its calendar (the default for the third)
        live = models.live(customer_id)
        assert live is not None and live.run_id == run_id
        archive = s3.get_object(
            Bucket=stack.info.artifacts_bucket, Key=layout.model_key(customer_id, run_id)
        )
        _, recorded = read_archive(archive["Body"].read())
        assert recorded.holiday_calendar == calendar, customer_id
        # And the API's forecast over Christmas dips on Christmas Day
        code, _, body = get(env, f"/customers/{customer_id}/forecast?period=21")
        assert code == 200, body
        yhat = {date.fromisoformat(p["ds"][:10]): p["yhat"] for p in body["forecast"]}
        ordinary = np.median(list(yhat.values()))
        assert yhat[date(2024, 12, 25)] < 0.8 * ordinary, (customer_id, yhat)
        # And on 26 December only where that is a holiday (Bavaria's Second Day of Christmas)
        assert bool(yhat[date(2024, 12, 26)] < 0.8 * ordinary) is (customer_id == "hol-by")
