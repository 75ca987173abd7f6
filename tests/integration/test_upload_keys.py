"""S3 keys as EventBridge delivers them (raw, never URL-encoded), of any shape S3 allows,
reach a processing job as a copy of the version their event named, under a name SageMaker
can download."""

from __future__ import annotations

import posixpath
from typing import Any

import boto3
import pytest
from function_helpers import load_function
from test_pipeline_observability import _Context, _event, world
from test_upload_queue import forget_processing_jobs

from fleetcast.embedded.sagemaker_jobs.transfer import split_s3_uri

__all__ = ["world"]  # the fixture, shared with the observability tests

KEY_EVENTS = [
    "s3_object_created.json",
    "s3_object_created_plus_key.json",
    "s3_object_created_unusual_key.json",
    "s3_object_created_longest_key.json",
]
# Linux's limit on one path component, which SageMaker's download of an input meets too.
NAME_MAX_BYTES = 255


@pytest.mark.parametrize("name", KEY_EVENTS)
def test_the_job_reads_exactly_the_uploaded_object_under_a_short_safe_name(
    world: dict[str, Any], name: str
) -> None:
    # Given an object stored under the sample event's key in a versioned bucket (and no
    # job of another test's fresh queue under its run id)
    forget_processing_jobs()
    event = _event(name)
    key = event["detail"]["object"]["key"]
    bucket = event["detail"]["bucket"]["name"]
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    body = f"customer_id,timestamp,consumption\nkeys,2026-11-01,{len(key)}\n".encode()
    put = s3.put_object(Bucket=bucket, Key=key, Body=body)
    event["detail"]["object"]["version-id"] = put["VersionId"]
    # And a newer version of the same key written since (the job must read the queued one)
    s3.put_object(Bucket=bucket, Key=key, Body=b"customer_id,timestamp,consumption\n")
    # When start-processing handles the event
    started = load_function("start_processing").lambda_handler(event, _Context())
    # Then it started a job whose raw input is a copy of that version's bytes (a plain
    # key's too: the key's latest version is another upload's)
    assert started["outcome"] == "started", started
    job = boto3.client("sagemaker").describe_processing_job(ProcessingJobName=started["job_name"])
    (raw,) = [i for i in job["ProcessingInputs"] if i["InputName"] == "raw"]
    uri = raw["S3Input"]["S3Uri"]
    input_bucket, input_key = split_s3_uri(uri)
    assert s3.get_object(Bucket=input_bucket, Key=input_key)["Body"].read() == body
    # And the file SageMaker downloads has a short, plain name the job is told
    file_name = posixpath.basename(input_key)
    assert len(file_name.encode()) <= NAME_MAX_BYTES and file_name.isascii()
    assert job["AppSpecification"]["ContainerArguments"][-2:] == ["--upload-file", file_name]
    assert len(uri) <= 1024
    assert all(len(a) <= 256 for a in job["AppSpecification"]["ContainerArguments"])
