"""The local stack's moto keeps no list of the S3 keys and DynamoDB items it made
(fleetcast.embedded.moto_patches.core), and still lists SES's sent messages, which the
stack reads from moto's dashboard."""

from __future__ import annotations

import json
import urllib.request
import uuid

import boto3
from moto.dynamodb.models.dynamo_type import Item
from moto.s3.models import FakeKey

from fleetcast.embedded.gateway import Gateway


def test_replaced_objects_and_items_are_not_kept_and_sent_mail_is_listed(gateway: Gateway) -> None:
    s3 = boto3.client("s3", endpoint_url=gateway.url)
    dynamodb = boto3.client("dynamodb", endpoint_url=gateway.url)
    ses = boto3.client("ses", endpoint_url=gateway.url)
    bucket, table = f"tracking-{uuid.uuid4().hex[:8]}", f"tracking-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    keys_before, items_before = len(FakeKey.instances_tracked), len(Item.instances_tracked)

    # When one object is written 50 times over and one item put 50 times over
    for n in range(50):
        s3.put_object(Bucket=bucket, Key="progress.json", Body=json.dumps({"done": n}).encode())
        dynamodb.put_item(TableName=table, Item={"pk": {"S": "LIVE"}, "n": {"N": str(n)}})

    # Then moto keeps no list of them (it held every one of the 100 before)
    assert len(FakeKey.instances_tracked) == keys_before
    assert len(Item.instances_tracked) == items_before
    # And what is there now reads back
    body = s3.get_object(Bucket=bucket, Key="progress.json")["Body"].read()
    assert json.loads(body) == {"done": 49}
    item = dynamodb.get_item(TableName=table, Key={"pk": {"S": "LIVE"}})["Item"]
    assert item["n"] == {"N": "49"}

    # And a message SES sent is still on moto's dashboard, where the stack reads it
    ses.verify_email_identity(EmailAddress="fleetcast@example.com")
    marker = uuid.uuid4().hex
    ses.send_raw_email(
        Source="fleetcast@example.com",
        Destinations=["ops@example.com"],
        RawMessage={"Data": f"Subject: {marker}\n\nbody".encode()},
    )
    with urllib.request.urlopen(f"{gateway.url}/moto-api/data.json", timeout=30) as response:
        data = json.loads(response.read())
    assert any(marker in raw["raw_data"] for raw in data["ses"]["RawMessage"])
