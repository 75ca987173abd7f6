"""AWS's request limits on the local stack's AWS APIs (issue 27, "What to build" 2): each
refused as the service refuses it, whether the gateway keeps it (aws_limits.py: S3 keys
and metadata, DynamoDB transactions' 4 MB, PutEvents' 256 KB) or moto does (DynamoDB's
400 KB item and 100-action transaction, SQS's batch of 10 and 1 MiB)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from fleetcast.embedded.aws_limits import AwsLimits
from fleetcast.embedded.gateway import Gateway

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    local = Gateway()
    local.wrap_aws_app(AwsLimits)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def client(gateway: Gateway, aws_env: str) -> Any:
    def make(service: str) -> Any:
        return boto3.client(service, endpoint_url=gateway.url)

    return make


def _refused(error: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = error.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


def test_s3_keys_up_to_1024_bytes_of_utf8(client: Any) -> None:
    s3 = client("s3")
    bucket = f"limits-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    longest = "k/" + "é" * 511  # 2 + 1022 bytes: exactly the limit
    s3.put_object(Bucket=bucket, Key=longest, Body=b"x")
    assert s3.get_object(Bucket=bucket, Key=longest)["Body"].read() == b"x"
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key=longest + "a", Body=b"x")
    assert _refused(refused) == ("KeyTooLongError", 400)
    # A multipart upload of such a key is refused at its start
    with pytest.raises(ClientError) as refused:
        s3.create_multipart_upload(Bucket=bucket, Key="a" * 1025)
    assert _refused(refused) == ("KeyTooLongError", 400)


def test_s3_user_metadata_up_to_2_kb(client: Any) -> None:
    s3 = client("s3")
    bucket = f"limits-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="a", Body=b"x", Metadata={"note": "v" * 2044})
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key="b", Body=b"x", Metadata={"note": "v" * 2045})
    assert _refused(refused) == ("MetadataTooLarge", 400)


@pytest.fixture
def table(client: Any) -> Any:
    dynamodb = client("dynamodb")
    name = f"limits-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb, name


def test_dynamodb_items_up_to_400_kb(table: tuple[Any, str]) -> None:
    dynamodb, name = table
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "a"}, "v": {"S": "x" * 400_000}})
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName=name, Item={"pk": {"S": "b"}, "v": {"S": "x" * 410_000}})
    assert _refused(refused)[0] == "ValidationException"
    assert "Item size has exceeded the maximum allowed size" in str(refused.value)


def test_dynamodb_transactions_up_to_100_actions_and_4_mb(table: tuple[Any, str]) -> None:
    dynamodb, name = table

    def puts(count: int, size: int) -> list[dict[str, Any]]:
        return [
            {"Put": {"TableName": name, "Item": {"pk": {"S": f"i{n}"}, "v": {"S": "x" * size}}}}
            for n in range(count)
        ]

    dynamodb.transact_write_items(TransactItems=puts(100, 10))
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=puts(101, 10))
    assert _refused(refused)[0] == "ValidationException"
    # Eleven items of 390 KB: each within its limit, 4.3 MB together
    with pytest.raises(ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=puts(11, 390_000))
    assert _refused(refused)[0] == "ValidationException"
    assert "Transaction request cannot be larger than 4 MB" in str(refused.value)
    assert (
        "Item"
        not in dynamodb.get_item(TableName=name, Key={"pk": {"S": "i10"}})["Item"]["v"]["S"][:1]
    )


def test_put_events_up_to_256_kb_as_eventbridge_counts_it(client: Any) -> None:
    events = client("events")
    entry = {"Source": "fleetcast.test", "DetailType": "limits"}
    room = 256 * 1024 - len("fleetcast.test") - len("limits") - len('{"p":""}')
    fits = {**entry, "Detail": json.dumps({"p": "x" * room}, separators=(",", ":"))}
    assert events.put_events(Entries=[fits])["FailedEntryCount"] == 0
    with pytest.raises(ClientError) as refused:
        events.put_events(
            Entries=[
                {**entry, "Detail": json.dumps({"p": "x" * (room + 1)}, separators=(",", ":"))}
            ]
        )
    assert _refused(refused)[0] == "ValidationException"
    # Entries that fit one by one, too large together
    half = {**entry, "Detail": json.dumps({"p": "x" * (room // 2 + 10)})}
    with pytest.raises(ClientError) as refused:
        events.put_events(Entries=[half, half])
    assert "Total size of the entries in the request is over the limit" in str(refused.value)


def test_sqs_batches_of_10_messages_and_1_mib(client: Any) -> None:
    sqs = client("sqs")
    queue = sqs.create_queue(QueueName=f"limits-{uuid.uuid4().hex[:8]}")["QueueUrl"]

    def batch(count: int, size: int) -> list[dict[str, str]]:
        return [{"Id": str(n), "MessageBody": "x" * size} for n in range(count)]

    sqs.send_message_batch(QueueUrl=queue, Entries=batch(10, 104_857))
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(QueueUrl=queue, Entries=batch(11, 10))
    assert "TooManyEntriesInBatchRequest" in _refused(refused)[0]
    with pytest.raises(ClientError) as refused:
        sqs.send_message_batch(QueueUrl=queue, Entries=batch(10, 104_858))
    assert "BatchRequestTooLong" in _refused(refused)[0]
