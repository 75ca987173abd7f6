"""register-models tells a page summary that is missing (a job from before summaries: read
its manifest) from one it may not read (a grant missing: fail, retry, dead-letter, alarm),
rather than taking S3's AccessDenied for "missing" (issue 27, finding 1). The S3 answers
are botocore's own (Stubber), in the shapes S3 gives them."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from fleetcast_common.registration import plan_registration
from fleetcast_contracts import layout
from fleetcast_contracts.training import manifest_name, manifest_summary_name
from fleetcast_contracts.training_manifest import TrainingManifest

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


def test_a_missing_summary_is_read_from_the_manifest() -> None:
    s3, stub = s3_answering("NoSuchKey", 404)
    manifest = TrainingManifest(run_id=RUN, host="algo-1", hosts=["algo-1"], customers=[])
    stub.add_response(
        "get_object",
        {"Body": _body(manifest.model_dump_json().encode())},
        {"Bucket": BUCKET, "Key": MANIFEST},
    )
    with stub:
        plan, chunks = plan_registration(RUN, f"fleetcast-t-{RUN}", BUCKET, 250, s3)
    assert (plan.hosts_reporting, chunks) == (1, [])


def _body(data: bytes) -> Any:
    import io

    from botocore.response import StreamingBody

    return StreamingBody(io.BytesIO(data), len(data))
