"""Any key S3 allows under incoming/ is processed and trained, end to end: keys with '+',
'%', ':', spaces and non-ASCII letters, one of S3's full 1024 bytes, '//', '.', '..',
segments too long for a file name, a key that is the prefix of a folder; and no key makes
the local job runner write outside a job's folder."""

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_pipeline import finished, readings, registry, to_csv, upload

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import run_ids
from fleetcast_common.jobs import Upload, processing_job_request
from fleetcast_common.settings import ProcessingSettings
from fleetcast_contracts import layout
from fleetcast_contracts.stages import PROCESSING, TRAINING

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
KEY_EVENTS = [
    "s3_object_created_plus_key.json",
    "s3_object_created_unusual_key.json",
    "s3_object_created_longest_key.json",
]


def sample_key(name: str) -> str:
    key: str = json.loads((ROOT / "events" / name).read_text())["detail"]["object"]["key"]
    return key


@pytest.mark.parametrize("event_name", KEY_EVENTS)
def test_an_upload_under_any_key_s3_allows_is_processed_and_trained(
    stack: EmbeddedStack, event_name: str
) -> None:
    # Given a file uploaded under the sample event's key
    key = sample_key(event_name)
    customer = "keys-" + event_name.removeprefix("s3_object_created_").removesuffix("_key.json")
    frame = readings([customer], "2024-01-01", 60, seed=3)
    # When the pipeline runs
    run_id = upload(stack, key.removeprefix(layout.INCOMING_PREFIX), to_csv(frame))
    status = finished(stack, run_id)
    # Then every row was read from that object and the customer has a live model
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert (status.rows_read, status.rows_rejected) == (len(frame), 0)
    assert status.job(TRAINING).status == "Completed", status.job(TRAINING).failure
    live = registry(stack).live(customer)
    assert live is not None and live.run_id == run_id


ESCAPE = f"fleetcast-pwned-{uuid.uuid4().hex[:8]}"
HOSTILE_KEYS = {
    # (the key's part under incoming/, the file name fleetcast status shows)
    "double-slash": ("/probe.csv", "probe.csv"),
    "dot-dot": (f"u.csv_/../../../../tmp/{ESCAPE}/evil.csv", "evil.csv"),
    "dot": ("./here.csv", "here.csv"),
    "long-segment": ("é" * 140 + ".csv", "é" * 140 + ".csv"),
    "unicode": ("Zählerstände März/日本語 (2).csv", "日本語 (2).csv"),
}


@pytest.mark.parametrize("shape", sorted(HOSTILE_KEYS))
def test_a_key_of_any_shape_is_processed_from_a_safe_copy_and_writes_nothing_outside(
    stack: EmbeddedStack, shape: str
) -> None:
    # Given a file uploaded under a key with '//', '.', '..', a 280-byte segment or unicode
    name, file_name = HOSTILE_KEYS[shape]
    customer = f"hostile-{shape}"
    frame = readings([customer], "2024-01-01", 10, seed=4)
    # When the pipeline runs
    run_id = upload(stack, name, to_csv(frame))
    status = finished(stack, run_id)
    # Then every row was read, and the run names the upload as it was put
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert (status.rows_read, status.rows_rejected) == (len(frame), 0)
    assert (status.source, status.source_key) == (file_name, layout.INCOMING_PREFIX + name)
    # And no file was written where the key's path would lead
    assert not Path("/probe.csv").exists()
    assert not Path("/tmp", ESCAPE).exists()


def test_a_key_that_is_the_prefix_of_a_folder_is_processed(stack: EmbeddedStack) -> None:
    # Given incoming/pre/inner.csv exists (an upload of its own)
    inner = readings(["prefix-inner"], "2024-01-01", 10, seed=6)
    assert finished(stack, upload(stack, "pre/inner.csv", to_csv(inner))).rows_read == 10
    # When incoming/pre is uploaded
    frame = readings(["prefix-file"], "2024-01-01", 10, seed=7)
    run_id = upload(stack, "pre", to_csv(frame))
    status = finished(stack, run_id)
    # Then it is read alone (not "[Errno 17] File exists")
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert (status.source_key, status.rows_read) == ("incoming/pre", len(frame))


def test_a_job_whose_input_holds_a_key_leaving_its_folder_fails_naming_the_key(
    stack: EmbeddedStack,
) -> None:
    """The local job runner itself, for any job (not only start-processing's): the S3Prefix
    runs/<run>/upload/u.csv also matches runs/<run>/upload/u.csv_/../../..., which it
    refuses to write. (Under the artifacts bucket's runs/, which the execution role may
    read: it has no grant on the raw bucket.)"""
    assert stack.info is not None
    info = stack.info
    s3, sagemaker = stack.client("s3"), stack.client("sagemaker")
    escape = f"fleetcast-pwned-{uuid.uuid4().hex[:8]}"
    staged = "runs/q9999999999-20240101t000000/upload/job-u.csv"
    evil = f"{staged}_/../../../../tmp/{escape}/evil.csv"
    known = run_ids(info.job_name_prefix, sagemaker)
    s3.put_object(Bucket=info.artifacts_bucket, Key=evil, Body=b"evil")
    s3.put_object(Bucket=info.artifacts_bucket, Key=staged, Body=b"plain")
    # When a processing job (start-processing's request, under a name of no run) reads
    # the prefix incoming/job-u.csv
    settings = ProcessingSettings.from_env(
        stack.template.function_environment("StartProcessingFunction")
    )
    uploaded = Upload(
        bucket=info.raw_bucket,
        key="incoming/job-u.csv",
        revision="-",
        size=5,
        uploaded_at=datetime.now(UTC),
    )
    request = processing_job_request(
        settings, "q9999999999-20240101t000000", uploaded, staged, False
    )
    name = f"{info.job_name_prefix}-unsafe-{uuid.uuid4().hex[:8]}"
    request["ProcessingJobName"] = name
    (raw,) = request["ProcessingInputs"]
    raw["S3Input"]["S3Uri"] = f"s3://{info.artifacts_bucket}/{staged}"
    sagemaker.create_processing_job(**request)
    deadline = time.monotonic() + 120
    while (job := sagemaker.describe_processing_job(ProcessingJobName=name))[
        "ProcessingJobStatus"
    ] == "InProgress":
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.5)
    # Then it fails saying which key, and what is wrong with it, and writes nothing there
    assert job["ProcessingJobStatus"] == "Failed"
    assert f"S3 key {evil!r}" in job["FailureReason"]
    assert "'..' path segment" in job["FailureReason"]
    assert not Path("/tmp", escape).exists()
    # (The two puts are in the artifacts bucket: no upload, no run)
    assert run_ids(info.job_name_prefix, sagemaker) == known
