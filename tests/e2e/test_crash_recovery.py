"""A crash of the local stack leaves no run half done (issue 25): events and SQS messages
in flight are not kept, so at the next start the stack sends again what each unfinished
run lacks, and every run reaches its end, registered once.

The first stack is a real `fleetcast up`; the messages a crash would lose are kept from
their functions by taking the functions off their EventBridge rules (as a crash between
the job's end and the event's delivery would), and one registration is cut short by doing
the coordinator's work and one chunk of it here, with the layer's own functions, as a
register-models that queued its chunks just before the stack died."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from test_embedded_restart import (
    JOB_SECONDS,
    START_SECONDS,
    Up,
    start_up,
    upload_and_follow,
    upload_only,
    ups,
)
from test_pipeline import readings, to_csv

from fleetcast.embedded.stack import StackInfo
from fleetcast.status import RunStatus, follow_run, run_ids
from fleetcast_common.registration import plan_registration, register_chunk, start_registration
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts.stages import TRAINING

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
__all__ = ["ups"]  # the fixture, shared with the restart tests

CUSTOMERS = 3


def _table(info: StackInfo, name: str) -> Any:
    return boto3.resource(
        "dynamodb",
        endpoint_url=info.endpoint_url,
        region_name=info.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).Table(name)


def _deliver_nothing_to(up: Up, rule_suffix: str) -> None:
    """Take the function off the rule: its events go nowhere, as if lost in a crash."""
    events = up.client("events")
    (rule,) = [r["Name"] for r in events.list_rules()["Rules"] if r["Name"].endswith(rule_suffix)]
    targets = events.list_targets_by_rule(Rule=rule)["Targets"]
    events.remove_targets(Rule=rule, Ids=[target["Id"] for target in targets])


def _wait_for_training(up: Up, run_id: str, wanted: str = "Completed") -> None:
    sagemaker = up.client("sagemaker")
    job = TRAINING.job_name(up.info().job_name_prefix, run_id)
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            status = sagemaker.describe_training_job(TrainingJobName=job)["TrainingJobStatus"]
        except sagemaker.exceptions.ClientError:
            status = None
        if status == wanted:
            return
        assert time.monotonic() < deadline, f"{job} is {status}, never {wanted}"
        time.sleep(0.3)


def _snapshot_after_now(up: Up) -> None:
    """Wait for a snapshot that holds everything done so far. A write marks the state
    changed, so a snapshot follows within seconds; but one written after it may have been
    forked before it. Snapshots are taken one at a time, so the one after that was forked
    after it."""
    info = up.info()
    snapshot = up.state_dir / "aws-state.pickle"
    deadline = time.monotonic() + JOB_SECONDS
    since = time.time()
    for _ in range(2):
        up.client("s3").put_object(Bucket=info.raw_bucket, Key="notes/mark.txt", Body=b"now")
        while not (snapshot.is_file() and snapshot.stat().st_mtime > since):
            assert time.monotonic() < deadline, "no snapshot followed the last change"
            time.sleep(0.2)
        since = snapshot.stat().st_mtime


def _follow(up: Up, run_id: str) -> RunStatus:
    info = up.info()
    return follow_run(
        run_id,
        info.job_name_prefix,
        info.artifacts_bucket,
        up.client("sagemaker"),
        up.client("s3"),
        _table(info, info.registry_table),
        START_SECONDS,
    )


def _cut_registration_short(up: Up, run_id: str) -> int:
    """The coordinator's work for the run, in chunks of one customer, and its first chunk
    registered; the other chunks' messages "lost". How many chunks it planned."""
    info = up.info()
    s3, registry = up.client("s3"), ModelRegistry(_table(info, info.registry_table))
    job = TRAINING.job_name(info.job_name_prefix, run_id)
    plan, chunks = plan_registration(run_id, job, info.artifacts_bucket, 1, s3)
    start_registration(plan, s3, info.artifacts_bucket, registry)
    register_chunk(chunks[0], info.artifacts_bucket, s3, registry)
    return len(chunks)


def _said(up: Up) -> str:
    return " ".join(up.output().split())


def test_a_stack_killed_with_runs_half_done_finishes_every_run_at_its_next_start(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a stack whose end-of-job events reach neither register-models nor
    # start-processing's next upload (start-training still hears of processing's end)
    state_dir = tmp_path / "state"
    first = start_up(state_dir, tmp_path / "first.log", "--port", "0", "--api-port", "0")
    ups.append(first)
    _deliver_nothing_to(first, "-RegisterModelsFunction-TrainingFinished")
    _deliver_nothing_to(first, "-StartProcessingFunction-ProcessingEnded")
    body = {
        name: to_csv(readings([f"{name}-{i}" for i in range(CUSTOMERS)], "2024-01-01", 90, seed=3))
        for name in ("trained", "cut", "ahead", "behind")
    }
    # And a run whose training completed and whose registration never started
    trained = upload_only(first, "trained.csv", body["trained"])
    _wait_for_training(first, trained)
    # And a run whose registration was cut short: 1 of its 3 chunks counted
    cut = upload_only(first, "cut.csv", body["cut"])
    _wait_for_training(first, cut)
    assert _cut_registration_short(first, cut) == CUSTOMERS
    # And two uploads close together: the first trained, the second waiting for it to end
    info = first.info()
    s3, queue = first.client("s3"), UploadQueue(_table(info, info.upload_queue_table))
    ahead = upload_only(first, "ahead.csv", body["ahead"])
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/behind.csv", Body=body["behind"])
    deadline = time.monotonic() + JOB_SECONDS
    while not queue.waiting():
        assert time.monotonic() < deadline, "the second upload never reached the queue"
        time.sleep(0.1)
    (behind,) = [waiting.run_id for waiting in queue.waiting()]
    _wait_for_training(first, ahead)
    assert [waiting.run_id for waiting in queue.waiting()] == [behind]
    _snapshot_after_now(first)

    # When the stack is killed (kill -9), and started again
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait()
    second = start_up(state_dir, tmp_path / "second.log", "--port", "0", "--api-port", "0")
    ups.append(second)

    # Then the start says what it re-drove: the lost ends of jobs, and the lost chunks
    said = _said(second)
    assert "re-driven" in said, said
    prefix = info.job_name_prefix
    assert f"the end of processing job {prefix}-p-{ahead}" in said, said
    assert f"the end of training job {prefix}-t-{ahead}, {prefix}-t-{trained}" in said or (
        f"the end of training job {prefix}-t-{trained}, {prefix}-t-{ahead}" in said
    ), said
    assert f"2 registration chunks of run {cut} not yet counted (numbers 1-2" in said, said
    # And every run reaches its end: registered, every customer live with its first model
    runs = {
        name: _follow(second, run_id)
        for name, run_id in zip(body, (trained, cut, ahead, behind), strict=True)
    }
    for name, run in runs.items():
        assert run.registered and run.customers_registered == CUSTOMERS, (name, run)
    registry = ModelRegistry(_table(second.info(), info.registry_table))
    for name, run in runs.items():
        for i in range(CUSTOMERS):
            live = registry.live(f"{name}-{i}")
            assert live is not None and (live.run_id, live.model_version) == (run.run_id, 1)
            # nothing registered twice: one model record per customer
            assert [m.run_id for m in registry.models(f"{name}-{i}")] == [run.run_id]

    # And after another crash, with every run finished, nothing is re-driven again
    _snapshot_after_now(second)
    os.kill(second.process.pid, signal.SIGKILL)
    second.process.wait()
    third = start_up(state_dir, tmp_path / "third.log", "--port", "0", "--api-port", "0")
    ups.append(third)
    assert "re-driven" not in _said(third), _said(third)
    again = upload_and_follow(third, "after.csv", body["trained"])
    assert again.registered, again


def test_three_versions_uploaded_just_before_a_kill_survive_and_are_each_processed(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a stack whose upload events never reach start-processing (as if the stack
    # died before delivering them)
    state_dir = tmp_path / "state"
    first = start_up(state_dir, tmp_path / "first.log", "--port", "0", "--api-port", "0")
    ups.append(first)
    _deliver_nothing_to(first, "-StartProcessingFunction-UploadedCsv")
    info = first.info()
    s3 = first.client("s3")
    # When one key of the versioned raw bucket is written three times (30 days each, a
    # value of its own), and the stack is killed (kill -9) as the last write is answered
    key = "incoming/daily.csv"
    versions = []
    for number in range(3):
        days = readings(["v-0"], f"2024-0{2 * number + 1}-01", 30, seed=number)
        days["consumption"] = float(number + 1)
        versions.append(s3.put_object(Bucket=info.raw_bucket, Key=key, Body=to_csv(days)))
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait()
    second = start_up(state_dir, tmp_path / "second.log", "--port", "0", "--api-port", "0")
    ups.append(second)

    # Then every version is still there (each acknowledged once kept), and the start
    # sends each one's event again, the queue having seen none
    listed = second.client("s3").list_object_versions(Bucket=info.raw_bucket, Prefix=key)
    assert {v["VersionId"] for v in listed["Versions"]} == {v["VersionId"] for v in versions}
    said = _said(second)
    assert "the S3 event of 3 uploads the upload queue never saw" in said, said
    # And each version is processed, reading its own rows
    sagemaker = second.client("sagemaker")
    deadline = time.monotonic() + START_SECONDS
    while len(found := run_ids(info.job_name_prefix, sagemaker)) < 3:
        assert time.monotonic() < deadline, f"{len(found)} of 3 versions started"
        time.sleep(0.5)
    runs = [_follow(second, run_id) for run_id in sorted(found)]
    assert sorted(run.source_version or "" for run in runs) == sorted(
        v["VersionId"] for v in versions
    )
    assert [run.rows_read for run in runs] == [30, 30, 30]
    assert all(run.registered for run in runs), runs
    # And nothing is listed as lost or not processed
    assert not any(run.not_processed_reason for run in runs)
