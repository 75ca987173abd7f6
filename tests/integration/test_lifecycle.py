"""What the artifacts bucket's lifecycle rules expire (issue 41: every upload's staged copy
and every run's model archives were kept for ever), against a moto server with the
template's buckets and rules, applied by the local stack's lifecycle
(:mod:`fleetcast.embedded.lifecycle`) as S3 would apply them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from template_helpers import load_template

from fleetcast.embedded.lifecycle import expire, lifecycle_rules
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.resources import create_resources
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import Outcome, start_processing
from fleetcast_common.settings import ProcessingSettings
from fleetcast_common.upload_queue import UploadQueue, WaitingUpload
from fleetcast_contracts import layout

ROOT = Path(__file__).resolve().parents[2]
DAY = timedelta(days=1)


def _rule_days(rule_id: str) -> int:
    rules = load_template()["Resources"]["ArtifactsBucket"]["Properties"]
    (rule,) = (r for r in rules["LifecycleConfiguration"]["Rules"] if r["Id"] == rule_id)
    return int(rule["ExpirationInDays"])


def _exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except s3.exceptions.ClientError as error:
        if error.response["Error"]["Code"] in ("404", "NoSuchKey"):
            return False
        raise
    return True


def test_a_staged_upload_expires_once_its_run_is_surely_over(aws_env: str) -> None:
    # Given a stack's resources, and an upload start-processing staged for its job
    prefix = f"lc{uuid.uuid4().hex[:6]}"
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name=prefix,
        parameter_overrides={**LOCAL_IMAGE_PARAMETERS, "JobNamePrefix": prefix},
    )
    create_resources(template, boto3.client, lambda iam, sts: None)
    s3 = boto3.client("s3")
    raw, artifacts = template.physical_name("RawBucket"), template.physical_name("ArtifactsBucket")
    body = b"customer_id,timestamp,consumption\n1,2026-12-01T00:00:00Z,1.0\n"
    put = s3.put_object(Bucket=raw, Key="incoming/r.csv", Body=body)
    now = datetime.now(UTC)
    upload = Upload(
        bucket=raw,
        key="incoming/r.csv",
        revision=put["VersionId"],
        size=len(body),
        uploaded_at=now,
        version_id=put["VersionId"],
        etag=put["ETag"].strip('"'),
        sequencer="617F08299329D189",
    )
    queue = UploadQueue(
        boto3.resource("dynamodb").Table(template.physical_name("UploadQueueTable"))
    )
    run_id = queue.arrive(upload, now).run_id
    queue.add(WaitingUpload(run_id=run_id, upload=upload))
    settings = ProcessingSettings.from_env(template.function_environment("StartProcessingFunction"))
    started = start_processing(upload, settings, boto3.client("sagemaker"), s3, queue, now)
    assert started.outcome is Outcome.STARTED
    staged = layout.staged_upload_key(run_id, upload.key)
    history = layout.HISTORY_PREFIX + "kept.parquet"
    s3.put_object(Bucket=artifacts, Key=history, Body=b"history")
    # Then the copy carries the retention tag the rule expires by
    tags = s3.get_object_tagging(Bucket=artifacts, Key=staged)["TagSet"]
    assert tags == [{"Key": layout.RETENTION_TAG, "Value": layout.STAGED_UPLOAD_RETENTION}]
    days = _rule_days("ExpireStagedUploads")
    # And it is kept while a processing job could still be running on it (the longest
    # a job may run is ProcessingMaxRuntimeSeconds' MaxValue)
    longest = load_template()["Parameters"]["ProcessingMaxRuntimeSeconds"]["MaxValue"]
    assert days * DAY > timedelta(seconds=longest)
    assert expire(s3, artifacts, now + days * DAY - timedelta(hours=1)) == []
    assert _exists(s3, artifacts, staged)
    # But expired after, and its version deleted a day later
    (expired,) = expire(s3, artifacts, now + days * DAY + timedelta(minutes=1))
    assert (expired.key, expired.rule) == (staged, "ExpireStagedUploads")
    assert not _exists(s3, artifacts, staged)
    gone = expire(s3, artifacts, now + (days + 2) * DAY)
    assert [(e.key, e.version_id is not None) for e in gone] == [(staged, True)]
    assert not [
        v for v in s3.list_object_versions(Bucket=artifacts, Prefix=staged).get("Versions", [])
    ]
    # And nothing else went: the upload itself, its record, the history
    assert _exists(s3, raw, upload.key)
    assert _exists(s3, artifacts, layout.upload_record_key(run_id))
    assert _exists(s3, artifacts, history)


@pytest.mark.parametrize(
    ("cloudformation", "api"),
    [
        (
            {"Id": "a", "Status": "Enabled", "Prefix": "runs/", "ExpirationInDays": 3},
            {
                "ID": "a",
                "Status": "Enabled",
                "Filter": {"Prefix": "runs/"},
                "Expiration": {"Days": 3},
            },
        ),
        (
            {"Id": "b", "Status": "Enabled", "TagFilters": [{"Key": "k", "Value": "v"}]},
            {"ID": "b", "Status": "Enabled", "Filter": {"Tag": {"Key": "k", "Value": "v"}}},
        ),
    ],
)
def test_cloudformation_rules_become_the_apis(
    cloudformation: dict[str, Any], api: dict[str, Any]
) -> None:
    assert lifecycle_rules({"Rules": [cloudformation]}) == [api]
