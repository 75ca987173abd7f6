"""The model registry in DynamoDB: the only module that touches its table.

Per customer (partition key ``customer_id``) the sort key ``record`` holds:

- ``LIVE``: the version the API serves;
- ``MODEL#{run_id}``: every model ever trained for the customer, live or not.

Versions are numbered per customer by the LIVE record's conditional update, which only
moves forward in run order (run ids sort in the order uploads reached the upload queue):
an older or repeated training event can never replace a newer model.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as EndpointUnreachableError
from pydantic import BaseModel

from fleetcast_common.contracts.errors import error_code
from fleetcast_common.model_archive import HoldoutMetrics

LIVE = "LIVE"
MODEL_PREFIX = "MODEL#"


class ModelStatus(StrEnum):
    LIVE = "live"  # promoted when registered (it may since have been replaced)
    REJECTED = "rejected"  # clearly worse than seasonal-naive on its holdout
    SUPERSEDED = "superseded"  # a newer run had already gone live


class _TrainedModel(BaseModel):
    """What the registry knows of any trained model."""

    customer_id: str
    run_id: str
    target_model: str
    model_s3_uri: str
    training_job: str
    trained_at: datetime
    data_start: date
    data_end: date
    rows: int
    metrics: HoldoutMetrics


class ModelRecord(_TrainedModel):
    """``MODEL#{run_id}``: one trained model and what became of it."""

    status: ModelStatus
    model_version: int | None = None


class LiveModel(_TrainedModel):
    """``LIVE``: the model the API serves for the customer."""

    model_version: int
    updated_at: datetime


def _to_item(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-able values to what DynamoDB stores (floats as Decimal)."""
    if isinstance(values, dict):
        return {k: _to_item(v) for k, v in values.items() if v is not None}
    if isinstance(values, list):
        return [_to_item(v) for v in values]
    if isinstance(values, float):
        return Decimal(repr(values))
    return values


def _from_item(item: dict[str, Any]) -> dict[str, Any]:
    if isinstance(item, dict):
        return {k: _from_item(v) for k, v in item.items()}
    if isinstance(item, list):
        return [_from_item(v) for v in item]
    if isinstance(item, Decimal):
        return int(item) if item == item.to_integral_value() else float(item)
    return item


class RegistryUnavailableError(Exception):
    """The registry cannot be read just now (throttled, failing or unreachable, after
    botocore's retries): worth asking again shortly."""

    retry_after_seconds = 2


# DynamoDB's answers that say "not now" rather than "never".
_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


class ModelRegistry:
    def __init__(self, table: Any) -> None:
        self._table = table

    def record(self, record: ModelRecord) -> None:
        """Write the MODEL record with its decision. Idempotent: a repeated event writes
        the same content."""
        item = {"record": MODEL_PREFIX + record.run_id, **record.model_dump(mode="json")}
        self._table.put_item(Item=_to_item(item))

    def promote(self, record: ModelRecord) -> int | None:
        """Make ``record`` the customer's live model if its run is newer than the live one.

        Returns its new version number, or None when the live model is from this run
        already (a repeated event) or from a newer one.
        """
        now = datetime.now(UTC).isoformat()
        fields = record.model_dump(mode="json", exclude={"status", "model_version", "customer_id"})
        fields["updated_at"] = now
        names = {f"#{k}": k for k in fields}
        values = _to_item({f":{k}": v for k, v in fields.items()})
        assignments = ", ".join(f"#{k} = :{k}" for k in fields)
        try:
            response = self._table.update_item(
                Key={"customer_id": record.customer_id, "record": LIVE},
                UpdateExpression=f"SET {assignments}, #v = if_not_exists(#v, :zero) + :one",
                ConditionExpression="attribute_not_exists(#run_id) OR #run_id < :run_id",
                ExpressionAttributeNames={**names, "#v": "model_version"},
                ExpressionAttributeValues={**values, ":zero": 0, ":one": 1},
                ReturnValues="UPDATED_NEW",
            )
        except Exception as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return None
            raise
        return int(response["Attributes"]["model_version"])

    def live(self, customer_id: str) -> LiveModel | None:
        try:
            found = self._table.get_item(Key={"customer_id": customer_id, "record": LIVE})
        except (EndpointUnreachableError, HTTPClientError) as error:
            raise RegistryUnavailableError("the model registry cannot be reached") from error
        except ClientError as error:
            if error_code(error) in _UNAVAILABLE_CODES:
                raise RegistryUnavailableError(
                    f"the model registry is busy or failing ({error_code(error)})"
                ) from error
            raise
        item = found.get("Item")
        return LiveModel.model_validate(_from_item(item)) if item else None

    def model(self, customer_id: str, run_id: str) -> ModelRecord | None:
        key = {"customer_id": customer_id, "record": MODEL_PREFIX + run_id}
        item = self._table.get_item(Key=key).get("Item")
        return ModelRecord.model_validate(_from_item(item)) if item else None

    def models(self, customer_id: str) -> list[ModelRecord]:
        """Every recorded model of a customer, oldest run first."""
        from boto3.dynamodb.conditions import Key

        records: list[ModelRecord] = []
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("customer_id").eq(customer_id)
            & Key("record").begins_with(MODEL_PREFIX)
        }
        while True:
            page = self._table.query(**query)
            records.extend(ModelRecord.model_validate(_from_item(i)) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return records
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
