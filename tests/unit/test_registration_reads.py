"""register-models tells a page summary that is missing (the run's checkpoints are
incomplete: fail naming it) from one it may not read (a grant missing: S3's own error),
and never takes S3's AccessDenied for "missing" (issue 27, finding 1); either way the
plan fails, is retried, then dead-lettered (an alarm). The S3 answers
are botocore's own (Stubber), in the shapes S3 gives them."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from fleetcast_common.registration import ManifestPartError, plan_registration
from fleetcast_contracts import layout
from fleetcast_contracts.training import manifest_name, manifest_summary_name

RUN, BUCKET = "q0000000001-20260101t000000", "artifacts"
MANIFEST = layout.checkpoint_prefix(RUN) + manifest_name("algo-1")
SUMMARY = layout.checkpoint_prefix(RUN) + manifest_summary_name("algo-1")


def s3_answering(summary_error: str, status: int) -> tuple[Any, Stubber]:
    s3 = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(s3)
    stub.add_response(
        "list_objects_v2",
        {"Contents": [{"Key": MANIFEST}], "KeyCount": 1, "IsTruncated": False},
        {"Bucket": BUCKET, "Prefix": layout.manifest_prefix(RUN)},
    )
    stub.add_client_error(
        "get_object",
        service_error_code=summary_error,
        http_status_code=status,
        expected_params={"Bucket": BUCKET, "Key": SUMMARY},
    )
    return s3, stub


def test_a_summary_it_may_not_read_fails_the_plan() -> None:
    s3, stub = s3_answering("AccessDenied", 403)
    with stub, pytest.raises(ClientError) as raised:
        plan_registration(RUN, f"fleetcast-t-{RUN}", BUCKET, 250, s3)
    assert raised.value.response["Error"]["Code"] == "AccessDenied"


def test_a_missing_summary_fails_the_plan_naming_it() -> None:
    s3, stub = s3_answering("NoSuchKey", 404)
    with stub, pytest.raises(ManifestPartError, match=f"{SUMMARY} is missing"):
        plan_registration(RUN, f"fleetcast-t-{RUN}", BUCKET, 250, s3)
