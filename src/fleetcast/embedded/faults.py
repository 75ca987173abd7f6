"""Injected AWS errors: throttling and 5xx answers, in each service's own wire format, for
the next requests to a service, so that clients' retry handling is tested over real HTTP.

A :class:`FaultInjector` is a route of the :class:`~fleetcast.embedded.gateway.Gateway`:
while a service has faults queued, its requests get them, one per request, and do not
reach moto, as when AWS itself refuses a request (or, for an ``applied`` fault, reach it
and lose its answer); then requests flow again.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any
from xml.sax.saxutils import escape

from fleetcast.embedded.gateway import WsgiApp

# The service a SigV4-signed request is for: ".../<date>/<region>/<service>/aws4_request".
_SIGNED_SERVICE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_STATUS_TEXT = {400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}
# DynamoDB speaks JSON 1.0 and names its errors in full; the other JSON services, 1.1.
_DYNAMODB_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"


@dataclass(frozen=True)
class Fault:
    status: int
    code: str
    message: str
    # The service did the work but its answer was lost: the request reaches moto first.
    applied: bool = False


# The answers AWS gives when it throttles or fails, by service.
THROTTLED = {
    "s3": Fault(503, "SlowDown", "Please reduce your request rate."),
    "dynamodb": Fault(
        400,
        "ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded.",
    ),
    "sagemaker": Fault(400, "ThrottlingException", "Rate exceeded"),
}
SERVER_ERROR = {
    "s3": Fault(500, "InternalError", "We encountered an internal error. Please try again."),
    "dynamodb": Fault(500, "InternalServerError", "Internal server error"),
    "sagemaker": Fault(500, "InternalFailure", "An internal error occurred."),
}


def signed_service(environ: dict[str, Any]) -> str | None:
    match = _SIGNED_SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return match.group(1) if match else None


class FaultInjector:
    """Queued faults per service, answered in order; thread-safe. ``downstream`` is the
    application that serves requests (moto), for faults that are ``applied``."""

    def __init__(self, downstream: WsgiApp) -> None:
        self._downstream = downstream
        self._queued: dict[tuple[str, str | None], deque[Fault]] = {}
        self._lock = threading.Lock()
        self._taken = threading.local()
        self.answered: Counter[str] = Counter()

    def inject(
        self, service: str, fault: Fault, times: int = 1, operation: str | None = None
    ) -> None:
        """Answer the service's next ``times`` requests (only those of ``operation``, e.g.
        ``CreateProcessingJob``, for services that name it in X-Amz-Target) with ``fault``."""
        with self._lock:
            self._queued.setdefault((service, operation), deque()).extend([fault] * times)

    def pending(self, service: str) -> int:
        with self._lock:
            return sum(len(q) for (name, _), q in self._queued.items() if name == service)

    def matches(self, environ: dict[str, Any]) -> bool:
        """Take the service's next fault for this request, if one is queued. The gateway
        calls the route in the same thread right after, so the fault waits in a
        thread-local."""
        service = signed_service(environ) or ""
        operation = environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2] or None
        fault = None
        with self._lock:
            for key in ((service, operation), (service, None)):
                queued = self._queued.get(key)
                if queued:
                    fault = queued.popleft()
                    self.answered[service] += 1
                    break
        self._taken.fault = fault
        self._taken.service = service
        return fault is not None

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        fault: Fault = self._taken.fault
        if fault.applied:
            for _ in self._downstream(environ, lambda *_: None):
                pass
        body, content_type = _render(self._taken.service, fault)
        start_response(
            f"{fault.status} {_STATUS_TEXT.get(fault.status, 'Error')}",
            [("Content-Type", content_type), ("Content-Length", str(len(body)))],
        )
        return [body]


def _render(service: str, fault: Fault) -> tuple[bytes, str]:
    if service == "s3":
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{escape(fault.code)}</Code><Message>{escape(fault.message)}</Message>"
            "<RequestId>fleetcast-fault</RequestId></Error>"
        )
        return xml.encode(), "application/xml"
    if service == "dynamodb":
        body = {"__type": _DYNAMODB_ERROR_PREFIX + fault.code, "message": fault.message}
        return json.dumps(body).encode(), "application/x-amz-json-1.0"
    return (
        json.dumps({"__type": fault.code, "message": fault.message}).encode(),
        "application/x-amz-json-1.1",
    )


def applied(fault: Fault) -> Fault:
    """The same error, answered after the service did the work."""
    return replace(fault, applied=True)


def error_body(service: str, fault: Fault) -> tuple[bytes, str]:
    """The fault as the service writes its errors: body and content type."""
    return _render(service, fault)
