"""The local API Gateway's HTTP side: requests read under API Gateway's limits, and every
refusal answered as API Gateway answers, in JSON.

Python's ``http.server`` has limits of its own and answers them in HTML: more than 100
header lines gave an HTML 431 page, while a single 60 KB header went through. API
Gateway's limits are on bytes, not on the number of headers. Its quota tables
(https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html and,
for REST APIs, .../api-gateway-execution-service-limits-table.html, read 2026-12-03) give
"Total combined size of request line and header values: 10240 bytes", "Length, in
characters, of the URL for a regional API: 10240" and "Payload size: 10 MB". A request
over them gets the gateway response REQUEST_TOO_LARGE (status 413, "Request Too Long":
.../supported-gateway-response-types.html), whose body API Gateway does not let an API
customise; here it is the same ``{"message": ...}`` JSON as every other gateway answer.
"""

from __future__ import annotations

import email.parser
import io
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("fleetcast.embedded.api")

MAX_BODY_BYTES = 10 * 1024 * 1024  # "Payload size: 10 MB"
# "Total combined size of request line and header values: 10240 bytes". Counted here as
# the bytes of the request line and of every header line (names, separators and line
# ends too): a little stricter than values alone, never looser.
MAX_HEAD_BYTES = 10240
REQUEST_TOO_LONG = "Request Too Long"


@dataclass
class GatewayAnswer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def gateway_error(status: int, message: str, error_type: str, request_id: str) -> GatewayAnswer:
    """An answer of API Gateway's own (not the function's): ``{"message": ...}`` JSON."""
    return GatewayAnswer(
        status,
        [
            ("Content-Type", "application/json"),
            ("x-amzn-ErrorType", error_type),
            ("x-amzn-RequestId", request_id),
        ],
        json.dumps({"message": message}).encode(),
    )


def too_long(request_id: str = "-") -> GatewayAnswer:
    return gateway_error(413, REQUEST_TOO_LONG, "RequestTooLongException", request_id)


# (method, request target, headers, body, client address) -> the answer
RequestHandler = Callable[[str, str, list[tuple[str, str]], bytes, str], GatewayAnswer]


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 makes a burst of new connections wait for SYN retries
    # (a second or more each): 50 clients connecting at once is an ordinary burst.
    request_queue_size = 1024


class _HeadTooLongError(Exception):
    pass


def handler_for(handle: RequestHandler) -> type[BaseHTTPRequestHandler]:
    """A handler class whose requests, once read within API Gateway's limits, go to
    ``handle``."""

    class Handler(GatewayRequestHandler):
        route = staticmethod(handle)

    return Handler


class GatewayRequestHandler(BaseHTTPRequestHandler):
    """Reads a request as API Gateway would and answers every refusal in its JSON; a
    request read whole goes to :attr:`route` (set by :func:`handler_for`)."""

    protocol_version = "HTTP/1.1"
    server_version = "fleetcast-local-apigateway"
    # A response is a header write and a body write; with Nagle on, the body waits for the
    # client's delayed ACK (40 ms) on a kept-alive connection.
    disable_nagle_algorithm = True
    route: RequestHandler

    def version_string(self) -> str:
        return self.server_version

    def parse_request(self) -> bool:
        """The standard parse of the request line; the headers read here instead, by API
        Gateway's byte limit rather than http.client's 100 lines."""
        if not self._parse_request_line():
            return False
        if self.request_version == "HTTP/0.9":  # 0.9 has no headers
            return True
        return self._parse_head()

    def _parse_request_line(self) -> bool:
        if len(self.raw_requestline) > MAX_HEAD_BYTES:
            self.requestline, self.command, self.request_version = "", "", "HTTP/1.1"
            self._refuse(too_long())
            return False
        stream, self.rfile = self.rfile, io.BytesIO(b"\r\n")
        try:
            return super().parse_request()  # the request line, before an empty head
        finally:
            self.rfile = stream

    def _parse_head(self) -> bool:
        try:
            head = _read_head(self.rfile, MAX_HEAD_BYTES - len(self.raw_requestline))
        except _HeadTooLongError:
            self._refuse(too_long())
            return False
        self.headers = email.parser.Parser(_class=self.MessageClass).parsestr(
            head.decode("iso-8859-1")
        )
        connection = self.headers.get("Connection", "").lower()
        self.close_connection = connection == "close" or (
            self.request_version < "HTTP/1.1" and connection != "keep-alive"
        )
        if self.headers.get("Expect", "").lower() == "100-continue":
            return self.handle_expect_100()
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, an unknown HTTP version, a
        line over 64 KB), in JSON, as API Gateway's would be."""
        if code == HTTPStatus.REQUEST_URI_TOO_LONG:  # a line over 64 KB
            # API Gateway has the one answer for a request over its size limits.
            self._refuse(too_long())
            return
        status = HTTPStatus(code)
        error_type = "".join(word.capitalize() for word in status.name.split("_"))
        self._refuse(gateway_error(code, message or status.phrase, f"{error_type}Exception", "-"))

    def _refuse(self, answer: GatewayAnswer) -> None:
        # What follows a refused head or body cannot be told apart from the next request:
        # the connection ends with the answer.
        self.close_connection = True
        if self.request_version not in ("HTTP/1.0", "HTTP/1.1"):
            self.request_version = "HTTP/1.1"  # else http.server writes no status line
        self._answer(answer, closing=True)

    def _serve(self) -> None:
        declared = self.headers.get("Content-Length") or "0"
        if not declared.isdigit():
            self.send_error(400, "Bad Request")
            return
        length = int(declared)
        if length > MAX_BODY_BYTES:
            self._refuse(too_long())
            return
        body = self.rfile.read(length) if length else b""
        self._answer(
            self.route(
                self.command, self.path, list(self.headers.items()), body, self.client_address[0]
            )
        )

    def _answer(self, answer: GatewayAnswer, closing: bool = False) -> None:
        self.send_response(answer.status)
        for name, value in answer.headers:
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        if closing:
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def __getattr__(self, name: str) -> Any:
        # Any method token reaches the routes, which answer API Gateway's 403 when none is
        # declared for it (http.server answers an HTML 501 for methods it lacks).
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def _read_head(stream: Any, limit: int) -> bytes:
    """The header lines up to and including the blank line that ends them (not counted: it
    holds no header); over ``limit`` bytes, :class:`_HeadTooLongError`, having read at
    most a line's worth past the limit."""
    lines = []
    size = 0
    while True:
        line = stream.readline(max(limit - size, 2) + 1)
        lines.append(line)
        if line in (b"\r\n", b"\n", b""):
            return b"".join(lines)
        size += len(line)
        if size > limit:
            raise _HeadTooLongError
