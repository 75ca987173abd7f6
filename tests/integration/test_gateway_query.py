"""The local stack's moto answers a table Query from the named partition alone, and backs
up only the partitions a transaction writes, with what DynamoDB would answer
(fleetcast.embedded.moto_patches.dynamodb: query_partitions_only,
transactions_back_up_partitions), sizes a new item once, and parses a condition
expression once for its names and values."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Attr, Key
from botocore.exceptions import ClientError
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models import table as moto_dynamodb_table
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.moto_patches import dynamodb as dynamodb_patches
from fleetcast.embedded.moto_patches.dynamodb import (
    _condition_parsed_once,
    _item_sized_once,
    _parser_parsed_once,
    _query_one_partition,
    _transact_backing_up_partitions,
)


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


def test_a_cancelled_transaction_leaves_every_partition_as_it_was(table: Any) -> None:
    # Given moto's transactions backing up the partitions they write
    assert inspect.unwrap(DynamoDBBackend.transact_write_items) is _transact_backing_up_partitions
    client = table.meta.client

    def put(pk: str, sk: str, n: int, condition: str | None = None) -> dict[str, Any]:
        action: dict[str, Any] = {"TableName": table.name, "Item": {"pk": pk, "sk": sk, "n": n}}
        if condition:
            action["ConditionExpression"] = condition
        return {"Put": action}

    # When a transaction's last action fails its condition, after a change, an update
    # and a new partition
    with pytest.raises(ClientError) as cancelled:
        client.transact_write_items(
            TransactItems=[
                put("c1", "CHUNK#1", 100),
                {
                    "Update": {
                        "TableName": table.name,
                        "Key": {"pk": "c2", "sk": "REGISTRATION"},
                        "UpdateExpression": "SET n = :n",
                        "ExpressionAttributeValues": {":n": 200},
                    }
                },
                put("new", "X", 1),
                put("RUN#a", "CHUNK#1", 300, "attribute_not_exists(pk)"),
            ]
        )

    # Then nothing was written, and the reasons name the action that failed
    reasons = [reason["Code"] for reason in cancelled.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "None", "ConditionalCheckFailed"]
    items = {(item["pk"], item["sk"]): item["n"] for item in table.scan()["Items"]}
    assert len(items) == 16 and set(items.values()) == {2, 5}
    # And a transaction whose conditions hold writes every action
    client.transact_write_items(
        TransactItems=[put("c1", "CHUNK#1", 100), put("new", "X", 1, "attribute_not_exists(pk)")]
    )
    assert table.get_item(Key={"pk": "c1", "sk": "CHUNK#1"})["Item"]["n"] == 100
    assert table.get_item(Key={"pk": "new", "sk": "X"})["Item"]["n"] == 1


def test_an_item_is_sized_once_and_still_held_to_the_size_limit(table: Any) -> None:
    # Given the stack's moto, whose new items are sized once (items_sized_once)
    assert Item.__init__ is _item_sized_once
    nested = {
        "chosen": "combination",
        "candidates": [
            {"model_kind": f"kind{n}", "wape": Decimal("0.25"), "windows": [Decimal(1)] * 3}
            for n in range(6)
        ],
    }
    # When an item of many attributes and nested maps is written, by Put and in a batch
    item = {"pk": "c9", "sk": "MODEL#1", **{f"a{n}": n for n in range(20)}, "backtest": nested}
    table.put_item(Item=item)
    with table.batch_writer() as batch:
        batch.put_item(Item={**item, "sk": "MODEL#2"})
    # Then it reads back as written
    for sk in ("MODEL#1", "MODEL#2"):
        assert table.get_item(Key={"pk": "c9", "sk": sk})["Item"] == {**item, "sk": sk}
    # And an item over DynamoDB's 400 KB is refused, as moto refuses it, whole or by an
    # update that grows it past the limit
    with pytest.raises(ClientError, match="maximum allowed size"):
        table.put_item(Item={"pk": "c9", "sk": "BIG", "blob": "x" * 300_000, "more": "y" * 110_000})
    table.put_item(Item={"pk": "c9", "sk": "GROWS", "blob": "x" * 300_000})
    with pytest.raises(ClientError, match="maximum allowed size"):
        table.update_item(
            Key={"pk": "c9", "sk": "GROWS"},
            UpdateExpression="SET more = :more",
            ExpressionAttributeValues={":more": "y" * 110_000},
        )
    assert "BIG" not in {
        i["sk"] for i in table.query(KeyConditionExpression=Key("pk").eq("c9"))["Items"]
    }


def test_items_share_their_attribute_names() -> None:
    # Given two requests' items, each parsed with its own string for each attribute name
    first, second = (json.loads('{"pk": {"S": "c1"}, "model_kind": {"S": "ets"}}') for _ in "ab")
    name = "model_kind"
    assert next(k for k in first if k == name) is not next(k for k in second if k == name)
    # When the stack's moto makes them items
    items = []
    for attributes in (first, second):
        item = Item.__new__(Item)
        _item_sized_once(item, DynamoType(attributes["pk"]), None, attributes)
        items.append(item)
    # Then the two items hold one string for the name, and the same values as before
    shared = [next(k for k in item.attrs if k == name) for item in items]
    assert shared[0] is shared[1]
    assert [item.attrs[name].value for item in items] == ["ets", "ets"]


def test_a_condition_is_parsed_once_and_decides_each_write_on_its_own_item(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the stack's moto, counting its parses of condition expressions
    assert moto_dynamodb_table.get_filter_expression is _condition_parsed_once
    parses: list[str] = []
    moto_parser = dynamodb_patches._moto_parser

    def counted(expression: Any, names: Any, values: Any) -> Any:
        parses.append(expression)
        return moto_parser(expression, names, values)

    monkeypatch.setattr(dynamodb_patches, "_moto_parser", counted)
    dynamodb_patches._parsed_condition.cache_clear()
    client = table.meta.client

    def put_live(pk: str, run: str) -> bool:
        """Registration's conditional Put of a LIVE record, in a transaction: True if
        written."""
        try:
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table.name,
                            "Item": {"pk": pk, "sk": "LIVE", "run": run},
                            "ConditionExpression": "attribute_not_exists(#run) OR #run < :run",
                            "ExpressionAttributeNames": {"#run": "run"},
                            "ExpressionAttributeValues": {":run": run},
                        }
                    }
                ]
            )
        except ClientError as error:
            assert error.response["Error"]["Code"] == "TransactionCanceledException"
            return False
        return True

    # When three customers' LIVE records are written by one run, then again by it, by a
    # newer run, and by an older one
    written = [put_live(f"c{n}", "run-2") for n in range(3)]
    repeated = put_live("c0", "run-2")
    newer = put_live("c1", "run-3")
    older = put_live("c2", "run-1")
    # Then each write is decided on its own item, as an unpatched moto decides it
    assert (written, repeated, newer, older) == ([True] * 3, False, True, False)
    assert table.get_item(Key={"pk": "c1", "sk": "LIVE"})["Item"]["run"] == "run-3"
    assert table.get_item(Key={"pk": "c2", "sk": "LIVE"})["Item"]["run"] == "run-2"
    # And the expression was parsed once for each run's value, not twice per write
    assert parses.count("attribute_not_exists(#run) OR #run < :run") == 3
    # And an expression moto cannot parse fails on every write, as moto's own parse fails
    parses.clear()
    for _ in range(2):
        with pytest.raises(ValueError, match="Bad function expression"):
            _parser_parsed_once("attribute_not_exists(#run", {"#run": "run"}, {})
    assert len(parses) == 2


def test_a_long_text_value_is_held_once_by_the_items_written_with_it() -> None:
    # Given a customer's LIVE and MODEL records, each parsed from its own request, with
    # the same backtest text, and another customer's record with another backtest
    backtest = json.dumps({"chosen": "ets", "candidates": [{"wape": 0.1 * n} for n in range(8)]})
    requests = [
        {"pk": {"S": "c1"}, "backtest": {"S": backtest}, "kind": {"S": "ets"}},
        {"pk": {"S": "c1"}, "backtest": {"S": backtest}, "kind": {"S": "ets"}},
        {"pk": {"S": "c2"}, "backtest": {"S": backtest.replace("ets", "theta")}},
    ]
    parsed = [json.loads(json.dumps(request)) for request in requests]
    assert parsed[0]["backtest"]["S"] is not parsed[1]["backtest"]["S"]
    # When the stack's moto makes them items
    items = []
    for attributes in parsed:
        item = Item.__new__(Item)
        _item_sized_once(item, DynamoType(attributes["pk"]), None, attributes)  # type: ignore[arg-type]
        items.append(item)
    live, model, other = (item.attrs["backtest"].value for item in items)  # type: ignore[attr-defined]
    # Then the two records of one customer hold one string, each reads as written, and
    # the other customer's own text is its own
    assert live is model
    assert (live, other) == (backtest, backtest.replace("ets", "theta"))
    # And short values are left as they are (not worth a look-up)
    assert items[0].attrs["kind"].value is parsed[0]["kind"]["S"]  # type: ignore[attr-defined]
