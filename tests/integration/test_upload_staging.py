"""Every run reads exactly the object version its event names: each upload is copied, by
its version (or, unversioned, only while it still has the event's ETag), into its run's
folder, and the processing job reads that copy. Against a moto server."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import boto3
import pytest
from test_upload_queue import T0, arrive, end, job_of, pipeline, set_status, status, upload

from fleetcast.embedded.sagemaker_jobs.transfer import split_s3_uri
from fleetcast_common import pipeline as pipeline_module
from fleetcast_common.jobs import Upload, UploadRecord
from fleetcast_common.pipeline import Outcome, processing_ended, start_processing
from fleetcast_contracts import layout
from fleetcast_contracts.stages import PROCESSING

__all__ = ["pipeline"]  # the fixture, shared with the upload queue's tests
HEADER = b"customer_id,timestamp,consumption\n"


def raw_input_bytes(world: dict[str, Any], job_name: str) -> bytes:
    """The bytes of the object a processing job was told to read."""
    job = world["sagemaker"].describe_processing_job(ProcessingJobName=job_name)
    (raw,) = [i for i in job["ProcessingInputs"] if i["InputName"] == "raw"]
    bucket, key = split_s3_uri(raw["S3Input"]["S3Uri"])
    body: bytes = world["s3"].get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def put_upload(world: dict[str, Any], bucket: str, key: str, body: bytes, minute: int) -> Upload:
    """An object put under ``key``, as the upload its S3 event describes."""
    put = world["s3"].put_object(Bucket=bucket, Key=key, Body=body)
    etag = put["ETag"].strip('"')  # EventBridge's detail.object.etag has no quotes
    return Upload(
        bucket=bucket,
        key=key,
        revision=put.get("VersionId") or etag,
        size=len(body),
        uploaded_at=T0 + timedelta(minutes=minute),
        version_id=put.get("VersionId"),
        etag=etag,
    )


def test_two_uploads_of_one_plain_key_while_the_queue_is_busy_each_read_their_own_bytes(
    pipeline: dict[str, Any],
) -> None:
    # Given another upload being processed
    assert arrive(pipeline, upload(0)) is Outcome.STARTED
    running = pipeline["queue"].lease().job_name
    # When one key is written twice while that job runs, each write's event queued
    key = f"incoming/daily-{uuid.uuid4().hex[:6]}.csv"
    first = put_upload(pipeline, "raw", key, HEADER + b"sk,2024-01-01,1\n", 1)
    assert arrive(pipeline, first) is Outcome.QUEUED
    second = put_upload(pipeline, "raw", key, HEADER + b"sk,2024-01-21,2\n", 2)
    assert arrive(pipeline, second) is Outcome.QUEUED
    # Then, when their turns come, each job reads the version its event named
    assert end(pipeline, running) == job_of(first)
    assert raw_input_bytes(pipeline, job_of(first)) == HEADER + b"sk,2024-01-01,1\n"
    assert end(pipeline, job_of(first)) == job_of(second)
    assert raw_input_bytes(pipeline, job_of(second)) == HEADER + b"sk,2024-01-21,2\n"
    # And each run records the upload it read, under the key it was put at
    run_id = job_of(first).removeprefix("fleetcast-p-")
    record = UploadRecord.model_validate_json(
        pipeline["s3"]
        .get_object(
            Bucket=pipeline["settings"].artifacts_bucket, Key=layout.upload_record_key(run_id)
        )["Body"]
        .read()
    )
    assert (record.upload.key, record.upload.version_id) == (key, first.version_id)
    assert record.staged_key == f"runs/{run_id}/upload/{key.removeprefix('incoming/')}"


@pytest.fixture
def unversioned(pipeline: dict[str, Any]) -> str:
    bucket = f"raw-plain-{uuid.uuid4().hex[:8]}"
    pipeline["s3"].create_bucket(Bucket=bucket)
    return bucket


def test_an_unversioned_upload_replaced_before_its_turn_is_reported_and_the_queue_moves_on(
    pipeline: dict[str, Any], unversioned: str
) -> None:
    # Given an upload waiting behind a running job in an unversioned bucket
    assert arrive(pipeline, upload(0)) is Outcome.STARTED
    running = pipeline["queue"].lease().job_name
    key = "incoming/daily.csv"
    replaced = put_upload(pipeline, unversioned, key, HEADER + b"sk,2024-01-01,1\n", 1)
    assert arrive(pipeline, replaced) is Outcome.QUEUED
    # And another object written over it, whose own event is queued too
    newer = put_upload(pipeline, unversioned, key, HEADER + b"sk,2024-01-21,2\n", 2)
    assert arrive(pipeline, newer) is Outcome.QUEUED
    # When the running job ends
    set_status(running, "Completed")
    ended = processing_ended(
        running,
        pipeline["settings"],
        pipeline["sagemaker"],
        pipeline["s3"],
        pipeline["queue"],
        T0,
    )
    # Then the replaced upload is not processed, and says so, naming the key and its ETag
    (skipped,) = ended.not_processed
    assert skipped.outcome is Outcome.REPLACED
    assert skipped.run_id == job_of(replaced).removeprefix("fleetcast-p-")
    assert "'incoming/daily.csv'" in (skipped.reason or "")
    assert f"ETag {replaced.etag}" in (skipped.reason or "")
    assert "replaced by another object" in (skipped.reason or "")
    # And the newer object's upload starts, reading its own bytes; nothing else waits
    assert ended.outcome is Outcome.STARTED and ended.job_name == job_of(newer)
    assert raw_input_bytes(pipeline, job_of(newer)) == HEADER + b"sk,2024-01-21,2\n"
    assert pipeline["queue"].waiting() == []
    jobs = pipeline["sagemaker"].list_processing_jobs()["ProcessingJobSummaries"]
    assert job_of(replaced) not in {job["ProcessingJobName"] for job in jobs}


def test_an_upload_deleted_before_its_turn_is_reported_as_its_own_outcome(
    pipeline: dict[str, Any], unversioned: str
) -> None:
    # Given an upload whose object is deleted before its event is handled
    gone = put_upload(pipeline, unversioned, "incoming/gone.csv", HEADER, 0)
    pipeline["s3"].delete_object(Bucket=unversioned, Key=gone.key)
    # When its event arrives
    started = start_processing(
        gone, pipeline["settings"], pipeline["sagemaker"], pipeline["s3"], pipeline["queue"], T0
    )
    # Then it is not processed, says why, and leaves nothing queued or leased
    assert started.outcome is Outcome.REPLACED
    assert "no longer exists" in (started.reason or "")
    assert pipeline["queue"].waiting() == [] and pipeline["queue"].lease() is None


def test_a_large_upload_is_copied_in_parts_at_the_version_its_event_named(
    pipeline: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given copies in parts of S3's smallest size, and an upload of three parts
    part = 5 * 2**20
    monkeypatch.setattr(
        pipeline_module,
        "STAGING_TRANSFER",
        boto3.s3.transfer.TransferConfig(multipart_threshold=part, multipart_chunksize=part),
    )
    body = HEADER + b"x" * (2 * part + 1000)
    key = f"incoming/large-{uuid.uuid4().hex[:6]}.csv"
    uploaded = put_upload(pipeline, "raw", key, body, 0)
    # And a newer version of the key written since
    pipeline["s3"].put_object(Bucket="raw", Key=key, Body=HEADER)
    # When its event is handled
    assert arrive(pipeline, uploaded) is Outcome.STARTED
    # Then the job reads a copy of that version's bytes, made of parts
    assert raw_input_bytes(pipeline, job_of(uploaded)) == body
    staged = layout.staged_upload_key(job_of(uploaded).removeprefix("fleetcast-p-"), key)
    head = pipeline["s3"].head_object(
        Bucket=pipeline["settings"].artifacts_bucket, Key=staged, PartNumber=1
    )
    assert head["PartsCount"] == 3


def test_fleetcast_status_names_the_upload_of_a_run_that_failed_before_its_report(
    pipeline: dict[str, Any], registry_table: Any
) -> None:
    # Given an upload whose key is not a plain file name, whose job failed without a report
    key = "incoming/Zählerstände/März export (2).csv"
    uploaded = put_upload(pipeline, "raw", key, HEADER, 0)
    assert arrive(pipeline, uploaded) is Outcome.STARTED
    set_status(job_of(uploaded), "Failed")
    # When fleetcast status looks at the pipeline
    (run,) = [
        r for r in status(pipeline, registry_table) if r.job(PROCESSING).name == job_of(uploaded)
    ]
    # Then it shows the upload's own file name and key, not None nor its copy's name
    assert run.job(PROCESSING).status == "Failed"
    assert run.source == "März export (2).csv"
    assert run.source_key == key
