"""AWS's request limits that moto 5.2 does not keep, kept in front of it: a request past
one is refused as the service refuses it (its error code, status and wording), and moto
never sees it.

- S3: an object key is at most 1,024 bytes of UTF-8 ("The name for a key is a sequence
  of Unicode characters whose UTF-8 encoding is at most 1,024 bytes long", S3 user
  guide, Naming objects): ``KeyTooLongError``, 400. User-defined metadata is at most
  2 KB, "measured by taking the sum of the number of bytes in the UTF-8 encoding of each
  key and value" (Working with object metadata): ``MetadataTooLarge``, 400.
- DynamoDB: "The aggregate size of the items in the transaction cannot exceed 4 MB"
  (TransactWriteItems): ``ValidationException``. (An item's 400 KB, and a
  transaction's 100 actions, moto refuses itself: tests/integration/test_aws_limits.py.)
- EventBridge: "The maximum size for a PutEvents event entry is 256 KB", counted as
  "Calculating PutEvents event entry size" says (Time 14 bytes; Source, DetailType,
  Detail and each of Resources in UTF-8), the request's entries together too:
  ``ValidationException``.
- SQS: moto refuses a SendMessageBatch over 10 entries or 1 MiB in all itself.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

from fleetcast.embedded.faults import Fault, error_body, signed_service
from fleetcast.embedded.gateway import WsgiApp

S3_KEY_BYTES = 1024
S3_METADATA_BYTES = 2 * 1024
DYNAMODB_TRANSACTION_BYTES = 4 * 1024 * 1024
EVENTBRIDGE_ENTRY_BYTES = 256 * 1024
_META_PREFIX = "HTTP_X_AMZ_META_"
_STATUS = {400: "Bad Request", 413: "Request Entity Too Large"}


class AwsLimits:
    """WSGI middleware in front of moto (the gateway's ``wrap_aws_app``)."""

    def __init__(self, downstream: WsgiApp) -> None:
        self._downstream = downstream

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        service = signed_service(environ)
        fault: Fault | None = None
        if service == "s3":
            fault = _s3_fault(environ)
        elif service in ("dynamodb", "events"):
            body = _read_body(environ)
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            if service == "dynamodb" and target.endswith(".TransactWriteItems"):
                fault = _transaction_fault(body)
            elif service == "events" and target.endswith(".PutEvents"):
                fault = _put_events_fault(body)
        if fault is None:
            return self._downstream(environ, start_response)
        payload, content_type = error_body(service or "", fault)
        start_response(
            f"{fault.status} {_STATUS.get(fault.status, 'Error')}",
            [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
        )
        return [payload]


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request's body, put back for moto to read."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _s3_fault(environ: dict[str, Any]) -> Fault | None:
    if environ.get("REQUEST_METHOD") not in ("PUT", "POST"):
        return None
    # Path-style, as clients address the local stack: /<bucket>/<key>. The raw request
    # line's bytes: WSGI's PATH_INFO holds them decoded as Latin-1 (PEP 3333).
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    path = (
        urllib.parse.unquote_to_bytes(raw.partition("?")[0])
        if raw
        else str(environ.get("PATH_INFO", "")).encode("latin-1")
    )
    _, _, key = path.lstrip(b"/").partition(b"/")
    if len(key) > S3_KEY_BYTES:
        return Fault(400, "KeyTooLongError", "Your key is too long")
    metadata = sum(
        len(name[len(_META_PREFIX) :].encode()) + len(str(value).encode())
        for name, value in environ.items()
        if name.startswith(_META_PREFIX)
    )
    if metadata > S3_METADATA_BYTES:
        return Fault(
            400,
            "MetadataTooLarge",
            "Your metadata headers exceed the maximum allowed metadata size.",
        )
    return None


def _transaction_fault(body: bytes) -> Fault | None:
    """The items a transaction writes, in DynamoDB's item-size accounting (attribute
    names and values in UTF-8; numbers, binaries and the rest approximately)."""
    try:
        actions = json.loads(body).get("TransactItems", [])
    except ValueError:
        return None
    total = sum(
        _item_bytes(operation.get("Item") or operation.get("Key") or {})
        + _item_bytes(operation.get("ExpressionAttributeValues") or {})
        for action in actions
        for operation in action.values()
        if isinstance(operation, dict)
    )
    if total > DYNAMODB_TRANSACTION_BYTES:
        return Fault(400, "ValidationException", "Transaction request cannot be larger than 4 MB")
    return None


def _item_bytes(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _value_bytes(value: Any) -> int:
    """An attribute value's size as DynamoDB counts it ("Item sizes and formats"): a
    string's UTF-8 bytes, a number's digits (about), a binary's bytes, 1 for a boolean
    or null, and a list's or map's members plus 3 bytes."""
    if not isinstance(value, dict) or not value:
        return 1
    kind, content = next(iter(value.items()))
    if kind in ("S", "N", "B"):
        return len(str(content).encode())
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(member).encode()) for member in content)
    if kind == "L":
        return 3 + sum(1 + _value_bytes(member) for member in content)
    if kind == "M":
        return 3 + sum(len(str(k).encode()) + 1 + _value_bytes(v) for k, v in content.items())
    return 1


def _put_events_fault(body: bytes) -> Fault | None:
    try:
        entries = json.loads(body).get("Entries", [])
    except ValueError:
        return None
    total = sum(_entry_bytes(entry) for entry in entries)
    if total > EVENTBRIDGE_ENTRY_BYTES:
        return Fault(
            400,
            "ValidationException",
            "Total size of the entries in the request is over the limit.",
        )
    return None


def _entry_bytes(entry: dict[str, Any]) -> int:
    """EventBridge's own accounting of a PutEventsRequestEntry."""
    size = 14 if entry.get("Time") is not None else 0
    for field in ("Source", "DetailType", "Detail"):
        if entry.get(field) is not None:
            size += len(str(entry[field]).encode())
    return size + sum(len(str(resource).encode()) for resource in entry.get("Resources") or [])
