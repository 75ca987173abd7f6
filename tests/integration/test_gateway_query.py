"""The local stack's moto answers a table Query from the named partition alone, with what
DynamoDB would answer (fleetcast.embedded.gateway.query_partitions_only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Attr, Key
from moto.dynamodb.models.table import Table

from fleetcast.embedded.gateway import Gateway, _query_one_partition


@pytest.fixture
def table(aws_env: str) -> Iterator[Any]:
    gateway = Gateway()
    gateway.start()
    try:
        dynamodb = boto3.resource("dynamodb", endpoint_url=gateway.url)
        created = dynamodb.create_table(
            TableName=f"query-{uuid.uuid4().hex[:8]}",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        with created.batch_writer() as batch:
            for pk in ("RUN#a", "RUN#b", "c1", "c2"):
                for sk in ("CHUNK#3", "CHUNK#1", "CHUNK#2", "REGISTRATION"):
                    batch.put_item(Item={"pk": pk, "sk": sk, "n": len(pk)})
        yield created
    finally:
        gateway.stop()


def _keys(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(item["pk"], item["sk"]) for item in items]


def test_a_query_reads_its_partition_in_order_with_conditions_pages_and_counts(
    table: Any,
) -> None:
    assert Table.query is _query_one_partition
    chunks = Key("pk").eq("RUN#b") & Key("sk").begins_with("CHUNK#")
    expected = [("RUN#b", f"CHUNK#{n}") for n in (1, 2, 3)]
    assert _keys(table.query(KeyConditionExpression=chunks)["Items"]) == expected
    backwards = table.query(KeyConditionExpression=chunks, ScanIndexForward=False)
    assert _keys(backwards["Items"]) == expected[::-1]
    # Pages of one item, each continuing after the last
    pages, start = [], {}
    while True:
        page = table.query(KeyConditionExpression=chunks, Limit=1, **start)
        pages += _keys(page["Items"])
        if "LastEvaluatedKey" not in page:
            break
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}
    assert pages == expected
    counted = table.query(KeyConditionExpression=Key("pk").eq("c2"), Select="COUNT")
    assert counted["Count"] == 4
    filtered = table.query(
        KeyConditionExpression=Key("pk").eq("c1"), FilterExpression=Attr("sk").eq("CHUNK#2")
    )
    assert _keys(filtered["Items"]) == [("c1", "CHUNK#2")]
    assert table.query(KeyConditionExpression=Key("pk").eq("nobody"))["Items"] == []
    # And the table itself is as it was: a scan still sees every partition
    assert len(table.scan()["Items"]) == 16
