"""IAM at the local stack's gateway, with template.yaml's roles as SAM makes them: a call a
role is not allowed fails as AWS fails it, in each protocol's shape, and is logged with
its action, resource and role; an unknown key is refused; ``enforce=False`` (what
``fleetcast up --no-iam`` sets) allows everything. The gateway serves moto in process."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.iam import LocalIam
from fleetcast.embedded.template import LocalTemplate

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"


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
