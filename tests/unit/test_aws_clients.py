"""The functions' boto3 clients and tables (fleetcast_common.aws): created lazily, once,
with botocore's retries; the tables leave the validation of each request to DynamoDB."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ParamValidationError

from fleetcast_common import aws


@pytest.fixture
def functions_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The functions' region and credentials, and no client or table made before."""
    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(name, value)
    aws.client.cache_clear()
    aws.dynamodb_table.cache_clear()
    yield
    aws.client.cache_clear()
    aws.dynamodb_table.cache_clear()


class _Body:
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b"{}"


class _Answered:
    """Answers every request a client sends with an empty 200, and keeps it (no socket)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.sent.append(request)
        return AWSResponse(request.url, 200, {}, _Body())


# Expected.<name>.Exists is a boolean: botocore's own validation refuses a string.
_MALFORMED = {
    "TableName": "registry",
    "Item": {"pk": {"S": "1"}},
    "Expected": {"pk": {"Exists": "yes"}},
}


def test_a_table_leaves_request_validation_to_dynamodb(functions_env: None) -> None:
    # Given a function's table, and a validating client of the same service
    table_client = aws.dynamodb_table("registry").meta.client
    validating = aws.client("dynamodb")
    answered = _Answered()
    for client in (table_client, validating):
        client.meta.events.register("before-send.dynamodb.PutItem", answered)
    # When each is asked to send a request botocore would refuse
    table_client.put_item(**_MALFORMED)
    with pytest.raises(ParamValidationError):
        validating.put_item(**_MALFORMED)
    # Then the table's is sent, for DynamoDB to judge; the validating client's is not
    assert len(answered.sent) == 1
    # And the table keeps every client's throttling retries
    assert table_client.meta.config.retries == aws.RETRY_CONFIG.retries
