"""AccessDenied as each AWS protocol answers it, so that botocore raises the ClientError
(error code, HTTP status) the code would get from AWS:

- S3 (rest-xml): 403, ``<Error><Code>AccessDenied</Code>...``, no body for a HEAD;
- query protocol (SES, IAM, STS): 403, ``<ErrorResponse><Error><Code>AccessDenied``;
- JSON protocols (DynamoDB, SageMaker, Cost Explorer, EventBridge...): 400,
  ``{"__type": "...#AccessDeniedException"}``; SQS, query-compatible, 403 and the
  ``x-amzn-query-error: AccessDenied;Sender`` header botocore reads its code from;
- REST JSON (the SageMaker runtime, Lambda): 403, ``x-amzn-ErrorType: AccessDeniedException``;
- Smithy RPC v2 CBOR (CloudWatch): 403, a CBOR body, query-compatible like SQS.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from xml.sax.saxutils import escape

StartResponse = Callable[..., Any]

# Services whose JSON errors keep their query protocol's codes (awsQueryCompatible).
_QUERY_COMPATIBLE = {"sqs", "cloudwatch"}


def denial_message(principal_arn: str, action: str, resource: str, explicit: bool) -> str:
    """IAM's wording, which the SDKs and the AWS console show as is."""
    because = (
        "with an explicit deny in an identity-based policy"
        if explicit
        else f"because no identity-based policy allows the {action} action"
    )
    return (
        f"User: {principal_arn} is not authorized to perform: {action} on resource: "
        f"{resource} {because}"
    )


def error_response(
    start_response: StartResponse,
    service: str,
    protocol: str,
    method: str,
    message: str,
    code: str = "AccessDenied",
) -> Iterable[bytes]:
    """Answer the request with the error ``code`` (AccessDenied, or an unknown key's)."""
    request_id = str(uuid.uuid4())
    if service == "s3":
        status = "403 Forbidden"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message>"
            f"<RequestId>{request_id}</RequestId><HostId>{request_id}</HostId></Error>"
        ).encode()
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id)]
        return _respond(start_response, status, headers, b"" if method == "HEAD" else body)
    if protocol == "query":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            "<ErrorResponse><Error><Type>Sender</Type>"
            f"<Code>{code}</Code><Message>{escape(message)}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        ).encode()
        return _respond(start_response, "403 Forbidden", [("Content-Type", "text/xml")], body)
    json_code = _json_code(code)
    headers = [("x-amzn-RequestId", request_id), ("x-amzn-ErrorType", json_code)]
    status = "403 Forbidden"
    if service in _QUERY_COMPATIBLE:
        headers.append(("x-amzn-query-error", f"{code};Sender"))
    elif protocol == "json":
        status = "400 Bad Request"
    document = {"__type": f"com.amazon.coral.service#{json_code}", "message": message}
    if protocol == "smithy-rpc-v2-cbor":
        headers += [("Content-Type", "application/cbor"), ("smithy-protocol", "rpc-v2-cbor")]
        return _respond(start_response, status, headers, _cbor_map(document))
    content_type = "application/x-amz-json-1.0" if protocol == "json" else "application/json"
    headers.append(("Content-Type", content_type))
    return _respond(start_response, status, headers, json.dumps(document).encode())


def _json_code(code: str) -> str:
    return {
        "AccessDenied": "AccessDeniedException",
        "InvalidClientTokenId": "UnrecognizedClientException",
    }.get(code, code)


def _respond(
    start_response: StartResponse, status: str, headers: list[tuple[str, str]], body: bytes
) -> Iterable[bytes]:
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


def _cbor_map(document: dict[str, str]) -> bytes:
    """A CBOR map of text strings (RFC 8949), all an error body holds."""

    def head(major: int, length: int) -> bytes:
        if length < 24:
            return bytes([major << 5 | length])
        for info, size in ((24, 1), (25, 2), (26, 4)):
            if length < 1 << (8 * size):
                return bytes([major << 5 | info]) + length.to_bytes(size, "big")
        raise ValueError("too long for an error body")

    def text(value: str) -> bytes:
        encoded = value.encode()
        return head(3, len(encoded)) + encoded

    return head(5, len(document)) + b"".join(text(k) + text(v) for k, v in document.items())
