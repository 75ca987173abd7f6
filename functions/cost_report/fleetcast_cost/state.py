"""Which anomalies were already e-mailed: the CostReportStateTable in DynamoDB.

One item per (usage type, day), holding the impact last reported. A run *claims* an
anomaly with a conditional write that succeeds only when the anomaly is new or its
impact grew by more than :data:`GROWTH_TO_REPORT_AGAIN`; the condition is the decision,
so two runs at once cannot both report it. When the e-mail then fails, the claims are
released (the old item put back) so the next run reports them again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleetcast_contracts.errors import error_code
from fleetcast_cost.models import Anomaly

GROWTH_TO_REPORT_AGAIN = 0.10
# Items outlive the longest lookback, then DynamoDB's TTL removes them.
RETENTION_DAYS = 400


class StateUnavailable(Exception):
    """The table could not be read or written: the report cannot tell old from new."""


@dataclass(frozen=True)
class Claim:
    anomaly: Anomaly
    previous: dict[str, Any] | None


class ReportedAnomalies:
    def __init__(self, dynamodb: Any, table_name: str) -> None:
        self._dynamodb = dynamodb
        self._table = table_name

    def claim(self, anomalies: Iterable[Anomaly], run_id: str, now: dt.datetime) -> list[Claim]:
        """The anomalies this run should report, each now recorded as reported by it."""
        claims = []
        for anomaly in anomalies:
            try:
                response = self._dynamodb.put_item(
                    TableName=self._table,
                    Item=_item(anomaly, run_id, now),
                    ConditionExpression="attribute_not_exists(usage_type) OR impact_usd < :floor",
                    ExpressionAttributeValues={
                        ":floor": {"N": _number(anomaly.impact / (1 + GROWTH_TO_REPORT_AGAIN))}
                    },
                    ReturnValues="ALL_OLD",
                )
            except ClientError as error:
                if error_code(error) == "ConditionalCheckFailedException":
                    continue
                raise StateUnavailable(_advice(self._table, error)) from error
            except BotoCoreError as error:
                raise StateUnavailable(_advice(self._table, error)) from error
            claims.append(Claim(anomaly, response.get("Attributes") or None))
        return claims

    def release(self, claims: Iterable[Claim], run_id: str) -> None:
        """Undo this run's claims (only items it still owns)."""
        owned = {
            "ConditionExpression": "run_id = :run",
            "ExpressionAttributeValues": {":run": {"S": run_id}},
        }
        for claim in claims:
            try:
                if claim.previous:
                    self._dynamodb.put_item(TableName=self._table, Item=claim.previous, **owned)
                else:
                    self._dynamodb.delete_item(
                        TableName=self._table, Key=_key(claim.anomaly), **owned
                    )
            except ClientError as error:
                if error_code(error) != "ConditionalCheckFailedException":
                    raise StateUnavailable(_advice(self._table, error)) from error


def _key(anomaly: Anomaly) -> dict[str, Any]:
    return {"usage_type": {"S": anomaly.usage_type}, "date": {"S": anomaly.date.isoformat()}}


def _item(anomaly: Anomaly, run_id: str, now: dt.datetime) -> dict[str, Any]:
    return {
        **_key(anomaly),
        "impact_usd": {"N": _number(anomaly.impact)},
        "actual_usd": {"N": _number(anomaly.actual)},
        "expected_usd": {"N": _number(anomaly.expected)},
        "kind": {"S": anomaly.kind},
        "run_id": {"S": run_id},
        "reported_at": {"S": now.isoformat()},
        "expires_at": {"N": str(int(now.timestamp()) + RETENTION_DAYS * 86400)},
    }


def _number(value: float) -> str:
    return f"{value:.4f}"


def _advice(table: str, error: Exception) -> str:
    return (
        f"Could not read or write the remembered anomalies in DynamoDB table {table} "
        f"({error_code(error) or type(error).__name__}): check the table exists and the "
        "function's role allows dynamodb:PutItem and dynamodb:DeleteItem on it."
    )
