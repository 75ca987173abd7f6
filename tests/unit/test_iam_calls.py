"""What the local stack's IAM makes of the requests boto3 really sends: the operation, and
the action, resource ARN and condition keys of each authorisation. Every derived action and
ARN is checked against AWS's own tables (policy-sentry's copy of the Service Authorization
Reference). No sockets: each request is caught before it is sent."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from policy_sentry.querying.actions import get_action_data

from fleetcast.embedded.iam.calls import Call, Resolver, describe, signature

REGION, ACCOUNT = "us-east-1", "123456789012"
RESOLVER = Resolver(
    region=REGION,
    account_id=ACCOUNT,
    hash_key=lambda table: {"registry": "customer_id"}.get(table),
    verified_identities=lambda: {"cost-watch@example.com", "example.org"},
)


class _Caught(Exception):
    pass


def call_of(service: str, operation: str, **parameters: Any) -> Call:
    """The Call the local stack sees when boto3 sends ``operation``."""
    client = boto3.session.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name=REGION
    ).client(service, endpoint_url="http://127.0.0.1:4599")
    sent: dict[str, Any] = {}

    def catch(request: Any, **_: Any) -> None:
        sent["request"] = request
        raise _Caught

    client.meta.events.register("before-send", catch)
    with pytest.raises(_Caught):
        getattr(client, operation)(**parameters)
    request = sent["request"]
    url = urlsplit(request.url)
    headers = {
        k.lower(): v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()
    }
    signed = signature(headers, url.query)
    assert signed is not None and signed.access_key == "AKIDEXAMPLE"
    body = request.body or b""
    body = (
        body if isinstance(body, bytes) else body.read() if hasattr(body, "read") else body.encode()
    )
    return describe(
        signed.service, request.method, url.path, url.query, headers, lambda: body, RESOLVER
    )


def authorisations(call: Call) -> list[tuple[str, str]]:
    return [(r.action, r.resource) for r in call.requests]


def _arn_pattern(arn_format: str) -> re.Pattern[str]:
    pieces = re.split(r"(\$\{[^}]+\})", arn_format)
    return re.compile("".join(".+" if p.startswith("${") else re.escape(p) for p in pieces))


def assert_in_aws_tables(call: Call) -> None:
    """Each action is one AWS has, its resource one of the action's resource types (or
    ``*`` for an action without any), its condition keys ones the action supports."""
    for request in call.requests:
        prefix, name = request.action.split(":")
        rows = get_action_data(prefix, name).get(prefix, [])
        assert rows, f"{request.action} is not an IAM action"
        formats = [row["resource_arn_format"] for row in rows]
        if request.resource == "*":
            assert "*" in formats, f"{request.action} takes resources {formats}, not *"
        else:
            assert any(f != "*" and _arn_pattern(f).fullmatch(request.resource) for f in formats), (
                f"{request.resource} is none of {request.action}'s resource types {formats}"
            )
        keys = {key.lower() for row in rows for key in row["condition_keys"]}
        for key in request.context:
            assert key.lower() in keys, f"{request.action} has no condition key {key}"


ARTIFACTS = "arn:aws:s3:::artifacts"


@pytest.mark.parametrize(
    ("operation", "parameters", "expected"),
    [
        (
            "get_object",
            {"Bucket": "artifacts", "Key": "models/r1/pages/algo-1-summary.json"},
            [("s3:GetObject", f"{ARTIFACTS}/models/r1/pages/algo-1-summary.json")],
        ),
        (
            "get_object",
            {"Bucket": "artifacts", "Key": "a b+c:d.csv", "VersionId": "v1"},
            [("s3:GetObjectVersion", f"{ARTIFACTS}/a b+c:d.csv")],
        ),
        ("head_object", {"Bucket": "artifacts", "Key": "k"}, [("s3:GetObject", f"{ARTIFACTS}/k")]),
        (
            "put_object",
            {"Bucket": "artifacts", "Key": "runs/r/registration.json", "Body": b"{}"},
            [("s3:PutObject", f"{ARTIFACTS}/runs/r/registration.json")],
        ),
        (
            "copy_object",
            {
                "Bucket": "artifacts",
                "Key": "runs/r/upload/upload.csv",
                "CopySource": {"Bucket": "raw", "Key": "incoming/x.csv", "VersionId": "v9"},
            },
            [
                ("s3:GetObjectVersion", "arn:aws:s3:::raw/incoming/x.csv"),
                ("s3:PutObject", f"{ARTIFACTS}/runs/r/upload/upload.csv"),
            ],
        ),
        (
            "upload_part_copy",
            {
                "Bucket": "artifacts",
                "Key": "t",
                "UploadId": "u",
                "PartNumber": 1,
                "CopySource": {"Bucket": "raw", "Key": "incoming/x.csv"},
            },
            [
                ("s3:GetObject", "arn:aws:s3:::raw/incoming/x.csv"),
                ("s3:PutObject", f"{ARTIFACTS}/t"),
            ],
        ),
        (
            "create_multipart_upload",
            {"Bucket": "artifacts", "Key": "t"},
            [("s3:PutObject", f"{ARTIFACTS}/t")],
        ),
        (
            "abort_multipart_upload",
            {"Bucket": "artifacts", "Key": "t", "UploadId": "u"},
            [("s3:AbortMultipartUpload", f"{ARTIFACTS}/t")],
        ),
        (
            "delete_objects",
            {
                "Bucket": "artifacts",
                "Delete": {"Objects": [{"Key": "a"}, {"Key": "b", "VersionId": "v"}]},
            },
            [("s3:DeleteObject", f"{ARTIFACTS}/a"), ("s3:DeleteObjectVersion", f"{ARTIFACTS}/b")],
        ),
        ("list_buckets", {}, [("s3:ListAllMyBuckets", "*")]),
        ("get_bucket_versioning", {"Bucket": "artifacts"}, [("s3:GetBucketVersioning", ARTIFACTS)]),
        # Written with tags: s3:PutObjectTagging too (S3 API Reference, PutObject)
        (
            "copy_object",
            {
                "Bucket": "artifacts",
                "Key": "runs/r/upload/u.csv",
                "CopySource": {"Bucket": "raw", "Key": "incoming/x.csv"},
                "Tagging": "fleetcast-retention=staged-upload",
                "TaggingDirective": "REPLACE",
            },
            [
                ("s3:GetObject", "arn:aws:s3:::raw/incoming/x.csv"),
                ("s3:PutObject", f"{ARTIFACTS}/runs/r/upload/u.csv"),
                ("s3:PutObjectTagging", f"{ARTIFACTS}/runs/r/upload/u.csv"),
            ],
        ),
        (
            "create_multipart_upload",
            {"Bucket": "artifacts", "Key": "t", "Tagging": "a=b"},
            [("s3:PutObject", f"{ARTIFACTS}/t"), ("s3:PutObjectTagging", f"{ARTIFACTS}/t")],
        ),
        (
            "put_object_tagging",
            {"Bucket": "artifacts", "Key": "models/r/a.tar.gz", "Tagging": {"TagSet": []}},
            [("s3:PutObjectTagging", f"{ARTIFACTS}/models/r/a.tar.gz")],
        ),
        (
            "put_object_tagging",
            {"Bucket": "artifacts", "Key": "t", "VersionId": "v", "Tagging": {"TagSet": []}},
            [("s3:PutObjectVersionTagging", f"{ARTIFACTS}/t")],
        ),
    ],
)
def test_s3_operations(
    operation: str, parameters: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    call = call_of("s3", operation, **parameters)
    assert authorisations(call) == expected
    assert_in_aws_tables(call)


def test_s3_listing_carries_its_prefix() -> None:
    call = call_of(
        "s3", "list_objects_v2", Bucket="artifacts", Prefix="models/r1/manifest", MaxKeys=5
    )
    assert authorisations(call) == [("s3:ListBucket", ARTIFACTS)]
    assert call.requests[0].context == {"s3:prefix": "models/r1/manifest", "s3:max-keys": "5"}
    # A listing without a prefix lists the whole bucket: a prefix condition must not pass it.
    assert call_of("s3", "list_objects_v2", Bucket="artifacts").requests[0].context == {
        "s3:prefix": ""
    }
    assert_in_aws_tables(call)


def test_dynamodb_item_operations_carry_the_partition_key() -> None:
    key = {"customer_id": {"S": "RUN#r1"}, "record": {"S": "RUN"}}
    for operation, parameters in (
        ("get_item", {"Key": key}),
        (
            "update_item",
            {
                "Key": key,
                "UpdateExpression": "SET a = :a",
                "ExpressionAttributeValues": {":a": {"N": "1"}},
            },
        ),
        ("put_item", {"Item": {**key, "x": {"S": "y"}}}),
        ("delete_item", {"Key": key}),
    ):
        call = call_of("dynamodb", operation, TableName="registry", **parameters)
        action = "dynamodb:" + "".join(part.title() for part in operation.split("_"))
        assert authorisations(call) == [
            (action, f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/registry")
        ]
        assert call.requests[0].context == {"dynamodb:LeadingKeys": ["RUN#r1"]}
        assert_in_aws_tables(call)


def test_dynamodb_query_reads_the_partition_key_from_its_expression() -> None:
    call = call_of(
        "dynamodb",
        "query",
        TableName="registry",
        KeyConditionExpression="#c = :c AND begins_with(#r, :p)",
        ExpressionAttributeNames={"#c": "customer_id", "#r": "record"},
        ExpressionAttributeValues={":c": {"S": "7"}, ":p": {"S": "MODEL#"}},
    )
    assert call.requests[0].context == {"dynamodb:LeadingKeys": ["7"]}
    assert_in_aws_tables(call)


def test_dynamodb_transactions_and_batches_are_authorised_item_by_item_or_table_by_table() -> None:
    table = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/registry"
    call = call_of(
        "dynamodb",
        "transact_write_items",
        TransactItems=[
            {
                "Put": {
                    "TableName": "registry",
                    "Item": {"customer_id": {"S": "7"}, "record": {"S": "LIVE"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": "registry",
                    "Key": {"customer_id": {"S": "7"}, "record": {"S": "M"}},
                    "ConditionExpression": "attribute_exists(customer_id)",
                }
            },
            {
                "Update": {
                    "TableName": "registry",
                    "Key": {"customer_id": {"S": "RUN#r"}, "record": {"S": "RUN"}},
                    "UpdateExpression": "SET a = :a",
                    "ExpressionAttributeValues": {":a": {"N": "1"}},
                }
            },
        ],
    )
    # TransactWriteItems is no IAM action: each item needs its own operation's.
    assert authorisations(call) == [
        ("dynamodb:PutItem", table),
        ("dynamodb:ConditionCheckItem", table),
        ("dynamodb:UpdateItem", table),
    ]
    assert [r.context["dynamodb:LeadingKeys"] for r in call.requests] == [["7"], ["7"], ["RUN#r"]]
    assert_in_aws_tables(call)
    batch = call_of(
        "dynamodb",
        "batch_get_item",
        RequestItems={
            "registry": {
                "Keys": [
                    {"customer_id": {"S": "1"}, "record": {"S": "LIVE"}},
                    {"customer_id": {"S": "2"}, "record": {"S": "LIVE"}},
                ]
            }
        },
    )
    assert authorisations(batch) == [("dynamodb:BatchGetItem", table)]
    assert batch.requests[0].context == {"dynamodb:LeadingKeys": ["1", "2"]}
    assert_in_aws_tables(batch)


def test_sqs_batches_are_authorised_as_single_messages() -> None:
    queue = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/chunks"
    call = call_of(
        "sqs", "send_message_batch", QueueUrl=queue, Entries=[{"Id": "1", "MessageBody": "x"}]
    )
    assert authorisations(call) == [("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:chunks")]
    assert_in_aws_tables(call)
    call = call_of(
        "sqs", "delete_message_batch", QueueUrl=queue, Entries=[{"Id": "1", "ReceiptHandle": "h"}]
    )
    assert authorisations(call) == [("sqs:DeleteMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:chunks")]


def test_sagemaker_jobs_need_pass_role_and_add_tags() -> None:
    role = f"arn:aws:iam::{ACCOUNT}:role/jobs"
    call = call_of(
        "sagemaker",
        "create_processing_job",
        ProcessingJobName="Fleetcast-p-q1",
        RoleArn=role,
        ProcessingResources={
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": "ml.m5.large",
                "VolumeSizeInGB": 1,
            }
        },
        AppSpecification={"ImageUri": "i"},
        Tags=[{"Key": "k", "Value": "v"}],
    )
    job = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:processing-job/fleetcast-p-q1"
    assert authorisations(call) == [
        ("sagemaker:CreateProcessingJob", job),
        ("iam:PassRole", role),
        ("sagemaker:AddTags", job),
    ]
    assert call.requests[1].context == {"iam:PassedToService": "sagemaker.amazonaws.com"}
    assert_in_aws_tables(call)
    described = call_of("sagemaker", "describe_training_job", TrainingJobName="fleetcast-t-q1")
    assert authorisations(described) == [
        (
            "sagemaker:DescribeTrainingJob",
            f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/fleetcast-t-q1",
        )
    ]
    assert authorisations(call_of("sagemaker", "list_training_jobs")) == [
        ("sagemaker:ListTrainingJobs", "*")
    ]


def test_invoke_endpoint() -> None:
    call = call_of(
        "sagemaker-runtime",
        "invoke_endpoint",
        EndpointName="fleetcast-forecast",
        TargetModel="7/r.tar.gz",
        Body=b"{}",
    )
    assert call.operation == "InvokeEndpoint"
    assert authorisations(call) == [
        (
            "sagemaker:InvokeEndpoint",
            f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:endpoint/fleetcast-forecast",
        )
    ]
    assert_in_aws_tables(call)


def test_ses_in_the_sandbox_authorises_the_sender_and_every_recipient() -> None:
    call = call_of(
        "ses",
        "send_raw_email",
        Source="Cost watch <cost-watch@example.com>",
        Destinations=["ops@example.com", "lead@example.org"],
        RawMessage={"Data": b"Subject: x\r\n\r\nbody"},
    )
    identity = f"arn:aws:ses:{REGION}:{ACCOUNT}:identity"
    # The sender's address identity; ops@ unverified (its own address); lead@ by its domain.
    assert authorisations(call) == [
        ("ses:SendRawEmail", f"{identity}/cost-watch@example.com"),
        ("ses:SendRawEmail", f"{identity}/ops@example.com"),
        ("ses:SendRawEmail", f"{identity}/example.org"),
    ]
    assert call.requests[0].context["ses:FromAddress"] == "cost-watch@example.com"
    assert call.requests[0].context["ses:Recipients"] == ["ops@example.com", "lead@example.org"]
    assert_in_aws_tables(call)


def test_ses_out_of_the_sandbox_authorises_the_sender_only() -> None:
    out_of_sandbox = Resolver(REGION, ACCOUNT, ses_sandbox=False)
    client_call = call_of(
        "ses",
        "send_raw_email",
        Source="cost-watch@example.com",
        Destinations=["ops@example.com"],
        RawMessage={"Data": b"x"},
    )
    assert len(client_call.requests) == 2
    # (the same request as the resolver out of the sandbox sees it)
    from fleetcast.embedded.iam import calls

    requests = calls._ses(
        "ses",
        "SendRawEmail",
        {"Source": "cost-watch@example.com", "Destinations.member.1": "ops@example.com"},
        out_of_sandbox,
    )
    assert [(r.action, r.resource) for r in requests] == [
        ("ses:SendRawEmail", f"arn:aws:ses:{REGION}:{ACCOUNT}:identity/cost-watch@example.com")
    ]


def test_cost_explorer_cloudwatch_and_events() -> None:
    for service, operation, parameters, expected in (
        (
            "ce",
            "get_cost_and_usage",
            {
                "TimePeriod": {"Start": "2024-01-01", "End": "2024-01-02"},
                "Granularity": "DAILY",
                "Metrics": ["UnblendedCost"],
            },
            [("ce:GetCostAndUsage", "*")],
        ),
        (
            "cloudwatch",
            "get_metric_data",
            {"MetricDataQueries": [], "StartTime": "2024-01-01", "EndTime": "2024-01-02"},
            [("cloudwatch:GetMetricData", "*")],
        ),
        (
            "events",
            "put_events",
            {"Entries": [{"Source": "s", "DetailType": "d", "Detail": "{}"}]},
            [("events:PutEvents", f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default")],
        ),
    ):
        call = call_of(service, operation, **parameters)
        assert authorisations(call) == expected
        assert_in_aws_tables(call)
    metrics = call_of(
        "cloudwatch",
        "put_metric_data",
        Namespace="Fleetcast",
        MetricData=[{"MetricName": "m", "Value": 1.0}],
    )
    assert metrics.requests[0].context == {"cloudwatch:namespace": "Fleetcast"}
    assert_in_aws_tables(metrics)


def test_get_caller_identity_needs_no_permission() -> None:
    assert call_of("sts", "get_caller_identity").requests == []
