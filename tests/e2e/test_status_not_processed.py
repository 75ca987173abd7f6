"""`fleetcast status` shows the uploads that left the queue without a run (issue 25): one
whose version was gone when its turn came (replaced), one older than an upload of its key
that reached the queue first (superseded). They were only in start-processing's log."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from test_pipeline import readings, to_csv

from fleetcast.cli import main
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import run_ids, wait_for_new_run

pytestmark = pytest.mark.e2e
HEADER = b"customer_id,timestamp,consumption\n"
# Older than any sequencer moto gives an event ("617f08299329d189"): S3 orders one key's
# events by it.
OLDER_SEQUENCER = "0000000000000001"


def _late_event(stack: EmbeddedStack, key: str, version_id: str) -> None:
    """An older upload's "Object Created" event, delivered late (EventBridge may deliver
    out of order), through the stack's own EventBridge."""
    assert stack.info is not None
    bucket = stack.info.raw_bucket
    detail = {
        "version": "0",
        "bucket": {"name": bucket},
        "object": {
            "key": key,
            "size": len(HEADER),
            "etag": "0123456789abcdef0123456789abcdef",
            "version-id": version_id,
            "sequencer": OLDER_SEQUENCER,
        },
        "request-id": "late-delivery",
        "requester": stack.info.account_id,
        "reason": "PutObject",
    }
    answer = stack.client("events").put_events(
        Entries=[
            {
                "Source": "aws.s3",
                "DetailType": "Object Created",
                "Resources": [f"arn:aws:s3:::{bucket}"],
                "Time": datetime.now(UTC) - timedelta(minutes=1),
                "Detail": json.dumps(detail),
            }
        ]
    )
    assert answer["FailedEntryCount"] == 0, answer


def _of_key(capsys: pytest.CaptureFixture[str], key: str) -> list[dict[str, object]]:
    """``fleetcast status --json``'s uploads of ``key``, as it lists them now."""
    assert main(["status", "--json"]) == 0
    return [r for r in json.loads(capsys.readouterr().out) if r["source_key"] == key]


def test_status_shows_replaced_and_superseded_uploads_with_key_version_reason_and_run(
    stack: EmbeddedStack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert stack.info is not None
    info = stack.info
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    known = run_ids(info.job_name_prefix, sagemaker)
    # Given an upload being processed
    busy = readings([f"nb-{i}" for i in range(20)], "2024-01-01", 90, seed=5)
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/np-busy.csv", Body=to_csv(busy))
    blocker = wait_for_new_run(info.job_name_prefix, sagemaker, known)
    # When an upload queued behind it is deleted (its version) before its turn
    gone = s3.put_object(Bucket=info.raw_bucket, Key="incoming/np-gone.csv", Body=HEADER)
    s3.delete_object(
        Bucket=info.raw_bucket, Key="incoming/np-gone.csv", VersionId=gone["VersionId"]
    )
    # And an older version's event of a key arrives after the newer upload's
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/np-twice.csv", Body=HEADER)
    for name, value in info.environment().items():
        monkeypatch.setenv(name, value)
    deadline = time.monotonic() + 120
    while not _of_key(capsys, "incoming/np-twice.csv"):
        assert time.monotonic() < deadline, "the newer upload never reached the queue"
        time.sleep(0.5)
    _late_event(stack, "incoming/np-twice.csv", "an-older-version")
    # (the event reaches the queue through EventBridge and a function, asynchronously: on a
    # loaded machine after the runs are done, so --wait alone may come back before it)
    deadline = time.monotonic() + 120
    while len(_of_key(capsys, "incoming/np-twice.csv")) < 2:
        assert time.monotonic() < deadline, "the older version's event never reached the queue"
        time.sleep(0.5)

    # Then, once nothing more will happen, fleetcast status --json lists both with the
    # key, the version, why, and (superseded) the run that took its place
    # (np-twice.csv's processed upload has no data rows: its run fails, which --wait's exit
    # status says when it waited for it, 1; 0 when the run had failed before the wait began)
    assert main(["status", "--wait", "600", "--json"]) in (0, 1)
    shown = json.loads(capsys.readouterr().out)
    (replaced,) = [r for r in shown if r["source_key"] == "incoming/np-gone.csv"]
    assert replaced["jobs"]["processing"]["status"] == "Replaced", replaced
    assert replaced["source_version"] == gone["VersionId"]
    assert f"version {gone['VersionId']}) no longer exists" in replaced["not_processed_reason"]
    assert replaced["run_id"] > blocker
    of_twice = [r for r in shown if r["source_key"] == "incoming/np-twice.csv"]
    assert len(of_twice) == 2, of_twice
    superseded = next(r for r in of_twice if r["jobs"]["processing"]["status"] == "Superseded")
    processed = next(r for r in of_twice if r["jobs"]["processing"]["status"] != "Superseded")
    assert superseded["source_version"] == "an-older-version"
    assert superseded["superseded_by"] == processed["run_id"]
    assert processed["run_id"] in superseded["not_processed_reason"]
    # And the table shows them too, the superseded one with the run that took its place
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["status"]) == 0
    table = capsys.readouterr().out
    assert f"Superseded by {processed['run_id']}" in table, table
    assert "Replaced" in table and "version an-older-version" in table, table
