"""The HTTP side: the standard library's threading server in front of :class:`InferenceApp`.

One thread per connection, HTTP/1.1 keep-alive, Nagle off (a response is a header write
and a body write; with Nagle on, the second waits for the client's delayed ACK).
"""

from __future__ import annotations

import json
import logging
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from fleetcast_inference.app import InferenceApp, Request, Response
from fleetcast_inference.errors import BadRequestError, InferenceError, PayloadTooLargeError
from fleetcast_inference.protocol import render_error
from fleetcast_inference.settings import InferenceSettings

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("fleetcast_inference.access")

MAX_BODY_BYTES = 1024 * 1024
# An idle keep-alive connection holds a thread; drop it after this long.
IDLE_CONNECTION_SECONDS = 120


class InferenceServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 makes concurrent connects wait for SYN retries (1 s+).
    request_queue_size = 1024

    def __init__(self, settings: InferenceSettings, app: InferenceApp | None = None) -> None:
        self.app = app or InferenceApp(settings)
        super().__init__((settings.host, settings.port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: InferenceServer
    protocol_version = "HTTP/1.1"
    server_version = "fleetcast-inference"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = IDLE_CONNECTION_SECONDS

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def _handle(self) -> None:
        started = time.perf_counter()
        target = urlsplit(self.path)
        try:
            body = self._read_body()
        except InferenceError as error:
            # The rest of the body is still on the wire: answer, then close.
            self.close_connection = True
            response = Response(error.status, render_error(error))
        else:
            request = Request(
                method=self.command,
                path=target.path,
                query=target.query,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=body,
            )
            response = self.server.app.dispatch(request)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        self.wfile.write(response.body)
        if access_logger.isEnabledFor(logging.DEBUG):
            access_logger.debug(
                "%s %s -> %d in %.2f ms",
                self.command,
                self.path,
                response.status,
                (time.perf_counter() - started) * 1000,
            )

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise BadRequestError("chunked bodies are not supported; send Content-Length")
        declared = self.headers.get("Content-Length")
        if not declared:
            return b""
        if not declared.isdigit():
            raise BadRequestError(f"Content-Length {declared!r} is not a number")
        length = int(declared)
        if length > MAX_BODY_BYTES:
            raise PayloadTooLargeError(
                f"the body has {length} bytes; the limit is {MAX_BODY_BYTES}"
            )
        return self.rfile.read(length)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors ``http.server`` answers itself (malformed request line, unsupported
        method, oversized headers) get the same JSON body as the application's."""
        status = HTTPStatus(code)
        body = json.dumps(
            {
                "error": status.phrase.replace(" ", ""),
                "message": message or explain or status.phrase,
            }
        ).encode()
        self.close_connection = True
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and code >= 200 and code not in (204, 304):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        logger.debug(format, *args)
