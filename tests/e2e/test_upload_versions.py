"""Every run reads exactly the object version its event names: two uploads of one key
while the queue is busy are two runs over two different files, and nothing is lost."""

import time

import pandas as pd
import pytest
from test_pipeline import finished, readings, to_csv

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.serving_cli import read_history
from fleetcast.status import run_ids, wait_for_new_run
from fleetcast_contracts.stages import PROCESSING

pytestmark = pytest.mark.e2e
CUSTOMER = "sk"
DAILY_KEY = "incoming/daily.csv"


def _days(start: str, days: int, value: float) -> pd.DataFrame:
    dates = pd.date_range(start, periods=days, freq="D")
    return pd.DataFrame(
        {
            "customer_id": CUSTOMER,
            "timestamp": dates.strftime("%Y-%m-%dT08:00:00Z"),
            "consumption": value,
        }
    )


def test_two_uploads_of_one_key_while_the_queue_is_busy_each_apply_their_own_file(
    stack: EmbeddedStack,
) -> None:
    assert stack.info is not None
    info = stack.info
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    known = run_ids(info.job_name_prefix, sagemaker)
    # Given another upload being processed
    busy = readings([f"busy-{i}" for i in range(200)], "2023-01-01", 365, seed=5)
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/busy.csv", Body=to_csv(busy))
    blocker = wait_for_new_run(info.job_name_prefix, sagemaker, known)
    # When a daily export writes 1-20 Jan to one key, then 21 Jan - 9 Feb to the same key
    # 0.3 s later, while that upload is still processing
    s3.put_object(Bucket=info.raw_bucket, Key=DAILY_KEY, Body=to_csv(_days("2024-01-01", 20, 1.0)))
    time.sleep(0.3)
    s3.put_object(Bucket=info.raw_bucket, Key=DAILY_KEY, Body=to_csv(_days("2024-01-21", 20, 2.0)))
    deadline = time.monotonic() + 300
    while len(new := run_ids(info.job_name_prefix, sagemaker) - known - {blocker}) < 2:
        assert time.monotonic() < deadline, f"only {len(new)} of 2 daily uploads started"
        time.sleep(0.5)
    first, second = sorted(new)
    statuses = [finished(stack, run_id) for run_id in (blocker, first, second)]

    # Then each daily run read its own 20 rows, and both show the upload's real name
    assert all(status.job(PROCESSING).status == "Completed" for status in statuses), statuses
    assert [(s.source, s.rows_read) for s in statuses[1:]] == [("daily.csv", 20)] * 2
    # And the customer's history holds all 40 days, each from the file that carried it
    stored = read_history(s3, info.artifacts_bucket, CUSTOMER)
    assert stored is not None
    assert len(stored) == 40
    assert stored["y"].tolist() == [1.0] * 20 + [2.0] * 20
