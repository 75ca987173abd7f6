"""Readings merged by timestamp on the local stack (issue 25, item 2): a meter's export cut
at local midnight (UTC+1) into one file a day, uploaded one after the other, keeps every
reading; a file sent again changes nothing; a corrected reading is reported."""

import csv
import io
import time
from datetime import date, timedelta

import pytest
from test_pipeline import upload

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.serving_cli import read_history
from fleetcast.status import RunStatus, run_status
from fleetcast_contracts import layout
from fleetcast_contracts.stages import PROCESSING

pytestmark = pytest.mark.e2e
HEADER = "customer_id,timestamp,consumption\n"
FIRST = date(2024, 3, 1)
DAYS = 3


def _local_day(day: date, value: float = 1.0) -> bytes:
    """24 hourly readings of one local day in UTC+1, written with their offset."""
    rows = "".join(f"localday,{day}T{hour:02d}:00:00+01:00,{value}\n" for hour in range(24))
    return (HEADER + rows).encode()


def _processed(stack: EmbeddedStack, run_id: str, timeout: float = 300) -> RunStatus:
    """The run once its processing job has ended (its few days are too few to train: the
    training job that follows fails them, which is not what this test is about)."""
    assert stack.info is not None
    info = stack.info
    deadline = time.monotonic() + timeout
    while True:
        status = run_status(
            run_id,
            info.job_name_prefix,
            info.artifacts_bucket,
            stack.client("sagemaker"),
            stack.client("s3"),
            stack.resource("dynamodb").Table(info.registry_table),
        )
        if status.job(PROCESSING).status in ("Completed", "Failed", "Stopped"):
            return status
        assert time.monotonic() < deadline, f"{run_id} not processed within {timeout} s"
        time.sleep(0.5)


def test_files_cut_at_local_midnight_keep_every_reading(stack: EmbeddedStack) -> None:
    assert stack.info is not None
    info = stack.info
    s3 = stack.client("s3")
    # Given one file per local day, each holding the last hour of the UTC day before it
    runs = []
    for offset in range(DAYS):
        day = FIRST + timedelta(days=offset)
        runs.append(upload(stack, f"localday-{day}.csv", _local_day(day)))
        status = _processed(stack, runs[-1])
        # Then each run is processed, adding its 24 readings and replacing none
        assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
        assert (status.readings_replaced, status.readings_changed) == (0, 0)

    # Then the stored history holds all of them: the UTC days whole where both files
    # arrived, the first and the last with the hour each file carries
    history = read_history(s3, info.artifacts_bucket, "localday")
    assert history["y"].tolist() == [1.0, 24.0, 24.0, 23.0]
    assert history["y"].sum() == 24.0 * DAYS

    # When the last file is sent again, with one reading corrected
    again = _local_day(FIRST + timedelta(days=DAYS - 1)).replace(
        b"T05:00:00+01:00,1.0", b"T05:00:00+01:00,3.5"
    )
    status = _processed(stack, upload(stack, "localday-again.csv", again))

    # Then its readings replace themselves, the corrected one counted and listed
    assert (status.readings_replaced, status.readings_changed) == (24, 1)
    changed = s3.get_object(
        Bucket=info.artifacts_bucket, Key=layout.report_prefix(status.run_id) + "changed.csv"
    )["Body"].read()
    rows = list(csv.DictReader(io.StringIO(changed.decode())))
    assert [(r["customer_id"], r["timestamp"], r["stored"], r["uploaded"]) for r in rows] == [
        ("localday", f"{FIRST + timedelta(days=DAYS - 1)}T04:00:00.000000Z", "1", "3.5")
    ]
    assert read_history(s3, info.artifacts_bucket, "localday")["y"].sum() == 24.0 * DAYS + 2.5
