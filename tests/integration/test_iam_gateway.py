"""IAM at the local stack's gateway, with template.yaml's roles as SAM makes them: a call a
role is not allowed fails as AWS fails it, in each protocol's shape, and is logged with
its action, resource and role; an unknown key is refused; ``enforce=False`` (what
``fleetcast up --no-iam`` sets) allows everything. The gateway serves moto in process."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.iam.local_iam import LocalIam
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.registration import ManifestPartError, RegistrationChunk, register_chunk
from fleetcast_contracts import layout
from fleetcast_contracts.training import manifest_name

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
RUN_41 = "q0000000041-20261206t000000"


@pytest.fixture(scope="module")
def template() -> LocalTemplate:
    return LocalTemplate(
        ROOT / "template.yaml",
        parameter_overrides={
            "CostReportSender": "cost-watch@example.com",
            "CostReportRecipients": "ops@example.com",
        },
    )


@pytest.fixture(scope="module")
def iam_gateway(template: LocalTemplate) -> Iterator[tuple[Gateway, LocalIam]]:
    iam = LocalIam(template)
    gateway = Gateway()
    gateway.guard(iam.guard)
    gateway.start()
    admin = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    iam.create_roles(
        admin.client("iam", endpoint_url=gateway.url), admin.client("sts", endpoint_url=gateway.url)
    )
    admin.client("s3", endpoint_url=gateway.url).create_bucket(
        Bucket=template.physical_name("ArtifactsBucket")
    )
    try:
        yield gateway, iam
    finally:
        gateway.stop()


def as_function(iam_gateway: tuple[Gateway, LocalIam], function: str, service: str) -> Any:
    gateway, iam = iam_gateway
    return iam.client(iam.roles.of_function(function).arn, service, gateway.url)


def refusal(call: Any) -> tuple[str, int, str]:
    with pytest.raises(ClientError) as raised:
        call()
    error = raised.value.response
    return (
        error["Error"]["Code"],
        error["ResponseMetadata"]["HTTPStatusCode"],
        error["Error"].get("Message", ""),
    )


def test_each_protocol_answers_access_denied_as_aws_does(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate, caplog: pytest.LogCaptureFixture
) -> None:
    # Given the forecast API's role (GetItem on the registry, InvokeEndpoint on its endpoint)
    bucket = template.physical_name("ArtifactsBucket")
    role = iam_gateway[1].roles.of_function("ForecastApiFunction").name
    cases = [
        # S3 (rest-xml): 403 AccessDenied
        (
            lambda: as_function(iam_gateway, "ForecastApiFunction", "s3").get_object(
                Bucket=bucket, Key="models/x"
            ),
            "AccessDenied",
            403,
            "s3:GetObject",
            f"arn:aws:s3:::{bucket}/models/x",
        ),
        # DynamoDB (JSON): 400 AccessDeniedException
        (
            lambda: as_function(iam_gateway, "ForecastApiFunction", "dynamodb").put_item(
                TableName="fleetcast-ModelRegistryTable",
                Item={"customer_id": {"S": "7"}, "record": {"S": "LIVE"}},
            ),
            "AccessDeniedException",
            400,
            "dynamodb:PutItem",
            "table/fleetcast-ModelRegistryTable",
        ),
        # SQS (JSON, query compatible): 403 AccessDenied
        (
            lambda: as_function(iam_gateway, "ForecastApiFunction", "sqs").send_message(
                QueueUrl="http://127.0.0.1/123456789012/fleetcast-registration-chunks",
                MessageBody="x",
            ),
            "AccessDenied",
            403,
            "sqs:SendMessage",
            "fleetcast-registration-chunks",
        ),
        # SageMaker (JSON): 400 AccessDeniedException
        (
            lambda: as_function(
                iam_gateway, "ForecastApiFunction", "sagemaker"
            ).list_training_jobs(),
            "AccessDeniedException",
            400,
            "sagemaker:ListTrainingJobs",
            "*",
        ),
        # SES (query): 403 AccessDenied
        (
            lambda: as_function(iam_gateway, "ForecastApiFunction", "ses").send_raw_email(
                Source="cost-watch@example.com",
                Destinations=["ops@example.com"],
                RawMessage={"Data": b"x"},
            ),
            "AccessDenied",
            403,
            "ses:SendRawEmail",
            "identity/cost-watch@example.com",
        ),
        # CloudWatch (Smithy RPC v2 CBOR, query compatible): 403 AccessDenied
        (
            lambda: as_function(iam_gateway, "ForecastApiFunction", "cloudwatch").list_metrics(),
            "AccessDenied",
            403,
            "cloudwatch:ListMetrics",
            "*",
        ),
    ]
    for call, code, status, action, resource in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="fleetcast.embedded.iam"):
            # When the role makes a call it is not allowed
            found_code, found_status, message = refusal(call)
        # Then it fails with AWS's code, status and wording
        assert (found_code, found_status) == (code, status), action
        assert f"is not authorized to perform: {action} on resource: " in message
        assert f"assumed-role/{role}/ForecastApiFunction" in message
        # And the log names the action, the resource and the role
        (logged,) = [r.getMessage() for r in caplog.records if "AccessDenied" in r.getMessage()]
        assert action in logged and role in logged and resource in logged


def test_a_role_may_do_what_its_policies_allow(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate
) -> None:
    bucket = template.physical_name("ArtifactsBucket")
    s3 = as_function(iam_gateway, "RegisterModelsFunction", "s3")
    s3.put_object(Bucket=bucket, Key="runs/r1/registration.json", Body=b"{}")
    assert s3.list_objects_v2(Bucket=bucket, Prefix="models/r1/")["KeyCount"] == 0
    # A key that does not exist is NoSuchKey, not AccessDenied, to a role that may list.
    assert refusal(lambda: s3.get_object(Bucket=bucket, Key="models/r1/manifest-algo-1.json"))[
        :2
    ] == ("NoSuchKey", 404)
    # But the condition on the listing's prefix holds
    assert refusal(lambda: s3.list_objects_v2(Bucket=bucket, Prefix="history/"))[:2] == (
        "AccessDenied",
        403,
    )
    assert refusal(lambda: s3.list_objects_v2(Bucket=bucket))[:2] == ("AccessDenied", 403)


def test_an_access_key_the_stack_did_not_issue_is_refused(
    iam_gateway: tuple[Gateway, LocalIam],
) -> None:
    gateway, _ = iam_gateway
    stranger = boto3.session.Session(
        aws_access_key_id="AKIASTRANGER", aws_secret_access_key="x", region_name=REGION
    )
    assert refusal(lambda: stranger.client("s3", endpoint_url=gateway.url).list_buckets())[:2] == (
        "InvalidAccessKeyId",
        403,
    )
    assert refusal(lambda: stranger.client("sts", endpoint_url=gateway.url).get_caller_identity())[
        :2
    ] == ("InvalidClientTokenId", 403)


def test_without_enforcement_every_call_is_allowed(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate
) -> None:
    _, iam = iam_gateway
    s3 = as_function(iam_gateway, "ForecastApiFunction", "s3")
    bucket = template.physical_name("ArtifactsBucket")
    iam.enforce = False
    try:
        s3.put_object(Bucket=bucket, Key="anything", Body=b"x")
    finally:
        iam.enforce = True
    assert refusal(lambda: s3.put_object(Bucket=bucket, Key="anything", Body=b"x"))[:2] == (
        "AccessDenied",
        403,
    )


def test_a_job_s_in_process_copies_are_authorised_as_its_execution_role(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate, tmp_path: Path
) -> None:
    gateway, iam = iam_gateway
    bucket = template.physical_name("ArtifactsBucket")
    written: list[str] = []
    transfer = iam.job_transfer(
        template.arn("SageMakerExecutionRole"),
        gateway.url,
        put_object=lambda b, k, body: written.append(k),
        download_object=lambda b, k, target: None,
    )
    (tmp_path / "a").write_bytes(b"x")
    transfer.upload(tmp_path / "a", bucket, "models/r1/7.tar.gz")
    assert written == ["models/r1/7.tar.gz"]
    with pytest.raises(
        ClientError, match=r"s3:PutObject on resource: arn:aws:s3:::.*/exports-elsewhere/a"
    ):
        transfer.upload(tmp_path / "a", bucket, "exports-elsewhere/a")


def _admin(gateway: Gateway, service: str) -> Any:
    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    ).client(service, endpoint_url=gateway.url)


def _assumed(gateway: Gateway, role_arn: str, service: str) -> Any:
    """A client with credentials from ``aws sts assume-role`` of the role."""
    issued = _admin(gateway, "sts").assume_role(RoleArn=role_arn, RoleSessionName="checking")
    credentials = issued["Credentials"]
    return boto3.session.Session(
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
        region_name=REGION,
    ).client(service, endpoint_url=gateway.url)


@pytest.fixture(scope="module")
def reader_role(iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate) -> str:
    """A role made with ``aws iam create-role`` that may read models/ and not list."""
    gateway, _ = iam_gateway
    bucket = template.physical_name("ArtifactsBucket")
    iam = _admin(gateway, "iam")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    arn: str = iam.create_role(
        RoleName="models-reader", AssumeRolePolicyDocument=json.dumps(trust)
    )["Role"]["Arn"]
    read = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/models/*",
            }
        ],
    }
    iam.put_role_policy(
        RoleName="models-reader", PolicyName="read", PolicyDocument=json.dumps(read)
    )
    _admin(gateway, "s3").put_object(Bucket=bucket, Key="models/r41/7.tar.gz", Body=b"archive")
    return arn


def test_credentials_from_assume_role_get_what_the_role_may_do(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate, reader_role: str
) -> None:
    # Issue 41: the local stack refused credentials from `aws sts assume-role` as
    # InvalidAccessKeyId; on AWS they work, refused only what the role lacks.
    gateway, iam = iam_gateway
    bucket = template.physical_name("ArtifactsBucket")
    # Given a session of a role made in the stack
    s3 = _assumed(gateway, reader_role, "s3")
    # Then it reads what the role may read
    assert s3.get_object(Bucket=bucket, Key="models/r41/7.tar.gz")["Body"].read() == b"archive"
    # And is refused, as AccessDenied naming its session, what the role may not do
    code, status, message = refusal(
        lambda: s3.put_object(Bucket=bucket, Key="models/r41/8.tar.gz", Body=b"x")
    )
    assert (code, status) == ("AccessDenied", 403)
    assert "assumed-role/models-reader/checking" in message
    # And it is who STS says
    identity = _assumed(gateway, reader_role, "sts").get_caller_identity()
    assert identity["Arn"].endswith("assumed-role/models-reader/checking")
    # And a session of a template role has that role's policies, as SAM makes them
    chunk_role = iam.roles.of_function("RegisterChunkFunction").arn
    as_chunk = _assumed(gateway, chunk_role, "s3")
    assert as_chunk.get_object(Bucket=bucket, Key="models/r41/7.tar.gz")["Body"].read()
    assert refusal(lambda: as_chunk.put_object(Bucket=bucket, Key="models/x", Body=b"x"))[:2] == (
        "AccessDenied",
        403,
    )


def test_a_missing_key_is_access_denied_to_a_role_that_may_not_list_the_bucket(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate, reader_role: str
) -> None:
    # Issue 41: S3 answers a read of a missing key 404 only to a caller allowed
    # s3:ListBucket; the local stack answered 404 to everyone, which hid that
    # register-chunk could not tell a missing manifest page from a missing grant.
    gateway, iam = iam_gateway
    bucket = template.physical_name("ArtifactsBucket")
    # Given a role that may read models/ but not list the bucket
    reader = _assumed(gateway, reader_role, "s3")
    assert reader.get_object(Bucket=bucket, Key="models/r41/7.tar.gz")["Body"].read()
    # Then a missing key is 403 AccessDenied, to GetObject and to HeadObject alike
    missing = "models/r41/8.tar.gz"
    assert refusal(lambda: reader.get_object(Bucket=bucket, Key=missing))[:2] == (
        "AccessDenied",
        403,
    )
    assert refusal(lambda: reader.head_object(Bucket=bucket, Key=missing))[1] == 403
    # And the listing it lacked is what the log names
    assert iam.denials[-1].action == "s3:ListBucket"
    # But register-chunk, which may list models/, is told the page is not there (404)
    chunk = as_function(iam_gateway, "RegisterChunkFunction", "s3")
    assert refusal(lambda: chunk.get_object(Bucket=bucket, Key=missing))[:2] == (
        "NoSuchKey",
        404,
    )
    # And register-models, which may list models/ and runs/*/report/, is told processing
    # left no summary (it reads that as "no customers sent") rather than refused
    models = as_function(iam_gateway, "RegisterModelsFunction", "s3")
    summary = "runs/r41/report/summary.json"
    assert refusal(lambda: models.get_object(Bucket=bucket, Key=summary))[:2] == (
        "NoSuchKey",
        404,
    )


def test_register_chunk_reports_a_missing_manifest_page_as_missing(
    iam_gateway: tuple[Gateway, LocalIam], template: LocalTemplate
) -> None:
    # Given a manifest whose page is missing, read as register-chunk's role
    bucket = template.physical_name("ArtifactsBucket")
    chunk = as_function(iam_gateway, "RegisterChunkFunction", "s3")
    manifest = layout.checkpoint_prefix(RUN_41) + manifest_name("algo-1")
    job = f"fleetcast-t-{RUN_41}"
    slice_of_it = RegistrationChunk(
        run_id=RUN_41, training_job=job, chunk_id="0", manifest_key=manifest, stop=10, number=0
    )
    # Then registration says which file is missing, not AccessDenied (the chunk fails
    # before the registry is asked anything)
    with pytest.raises(ManifestPartError, match="is missing"):
        register_chunk(slice_of_it, bucket, chunk, registry=None)  # type: ignore[arg-type]
