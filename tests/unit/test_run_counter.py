"""Run ids are never handed out twice (fleetcast.embedded.run_counter): the numbers the
upload counter hands out are written down as they go, and a restored counter that is
behind them, or behind any run number the kept state holds, is set forward."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.backends import get_backend
from template_helpers import local_template

from fleetcast.embedded import run_counter
from fleetcast.embedded.template import ACCOUNT_ID, REGION
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts.ids import run_id_for_upload, upload_sequence

TABLE = "upload-queue"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    """The upload-queue table as template.yaml declares it, in moto."""
    properties = local_template().resolve(
        local_template().resources["UploadQueueTable"]["Properties"]
    )
    with mock_aws():
        client = boto3.client(
            "dynamodb",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_table(
            TableName=TABLE,
            KeySchema=properties["KeySchema"],
            AttributeDefinitions=properties["AttributeDefinitions"],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client
        run_counter.stop_recording(TABLE)


def next_run_number(client: Any) -> int:
    table = boto3.resource(
        "dynamodb", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t"
    ).Table(TABLE)
    return UploadQueue(table)._next_sequence()


def test_a_counter_restored_behind_the_numbers_handed_out_is_set_forward(
    dynamodb: Any, tmp_path: Path
) -> None:
    # Given a stack writing down the numbers its counter hands out, and three handed out
    written = tmp_path / run_counter.HANDED_OUT_FILE
    run_counter.record_handed_out(TABLE, written)
    assert [next_run_number(dynamodb) for _ in range(3)] == [1, 2, 3]
    assert run_counter.handed_out(written) == 3
    # When the counter is restored as a snapshot taken after the first one had it
    dynamodb.put_item(
        TableName=TABLE,
        Item={"queue": {"S": "counter"}, "entry": {"S": "uploads"}, "last": {"N": "1"}},
    )
    # Then it is set forward to the last number handed out, and the next one is new
    floor = max(run_counter.handed_out(written), 0)
    assert run_counter.raise_counter(dynamodb, TABLE, floor) == 1
    assert next_run_number(dynamodb) == 4
    # and a counter already there is left alone
    assert run_counter.raise_counter(dynamodb, TABLE, 2) is None


def test_the_floor_is_the_highest_run_number_any_key_item_job_or_folder_holds(
    dynamodb: Any, tmp_path: Path
) -> None:
    # Given kept state naming runs 3 (a job), 5 (an item), 7 (an S3 key) and 9 (the job
    # folder of a job the snapshot does not have)
    def run(number: int) -> str:
        return run_id_for_upload(number, datetime(2026, 12, 3, tzinfo=UTC))

    s3 = boto3.client("s3", region_name=REGION, aws_access_key_id="t", aws_secret_access_key="t")
    s3.create_bucket(Bucket="artifacts")
    s3.put_object(Bucket="artifacts", Key=f"runs/{run(7)}/manifest.json", Body=b"{}")
    dynamodb.put_item(TableName=TABLE, Item={"queue": {"S": "waiting"}, "entry": {"S": run(5)}})
    jobs = tmp_path / "jobs"
    (jobs / f"fleetcast-t-{run(9)}").mkdir(parents=True)
    texts = run_counter.kept_texts(
        get_backend("s3")[ACCOUNT_ID]["aws"],
        get_backend("dynamodb")[ACCOUNT_ID][REGION],
        [f"fleetcast-p-{run(3)}"],
        jobs,
    )
    # Then the floor is 9
    assert run_counter.highest_in(texts) == 9
    assert upload_sequence(run(9)) == 9
    assert run_counter.highest_in(["no run here", "q123"]) == 0
