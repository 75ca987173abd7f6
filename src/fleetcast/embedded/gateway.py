"""One HTTP endpoint for every AWS API of the local stack.

moto's own WSGI application answers the AWS APIs. Requests that moto cannot serve the
way AWS does (a multi-model endpoint's invocations, for one) are routed to handlers the
local stack registers, by a WSGI middleware in front of moto. What the stack changes in
moto itself is in :mod:`fleetcast.embedded.moto_patches`.
"""

from __future__ import annotations

import errno
import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from moto.moto_server.werkzeug_app import MotoRequestHandler
from moto.s3.models import s3_backends
from werkzeug.serving import BaseWSGIServer, make_server

from fleetcast.embedded import moto_patches
from fleetcast.embedded.moto_patches.s3 import copy_value
from fleetcast.embedded.moto_patches.server import MotoDispatcher

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# Told of each S3 write made in process: method, bucket, key.
S3WriteObserver = Callable[[str, str, str], None]
# A route decides from the WSGI environ whether it takes the request.
Route = tuple[Callable[[dict[str, Any]], bool], WsgiApp]

log = logging.getLogger("fleetcast.embedded.gateway")

Server = TypeVar("Server")


class PortTakenError(OSError):
    """A port asked for by number is in use (by another program, or another stack)."""


def bind_preferred(
    port: int | None, default: int, bind: Callable[[int], Server], what: str
) -> tuple[Server, str | None]:
    """Bind ``port``; when None, ``default`` or else any free port if ``default`` is taken.
    Returns the server and, when the default was taken, a notice that says so."""
    try:
        return bind(default if port is None else port), None
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        if port is not None:
            raise PortTakenError(
                errno.EADDRINUSE,
                f"port {port} for {what} is taken (another `fleetcast up`?): "
                "give another port, or 0 for any free one",
            ) from error
    return bind(0), f"port {default} was taken: {what} on a free port instead"


class _QuietHandler(MotoRequestHandler):
    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass


# How often a server's loop looks for shutdown() (socketserver's default, 0.5 s, is what
# each server's stop waited).
SHUTDOWN_POLL_SECONDS = 0.05


class ServingThread:
    """A socketserver served on a daemon thread of its own (the gateway, a local API)."""

    def __init__(self, server: socketserver.BaseServer, name: str) -> None:
        self.server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            daemon=True,
            name=name,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


class Gateway:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        moto_patches.install()
        self._moto: WsgiApp = MotoDispatcher()
        self._routes: list[Route] = []
        self._s3_observers: list[S3WriteObserver] = []
        # What every request passes first, routes included (the local IAM's check).
        self._front: WsgiApp = self._app
        # Bound here, not by werkzeug, which exits the process when the port is taken.
        with socket.create_server((host, port)) as listener:
            self._server: BaseWSGIServer = make_server(
                host,
                port,
                lambda environ, start_response: self._front(environ, start_response),
                threaded=True,
                request_handler=_QuietHandler,
                fd=listener.fileno(),
            )
        self._serving = ServingThread(self._server, "aws-gateway")

    @property
    def url(self) -> str:
        return f"http://{self._server.host}:{self._server.port}"

    @property
    def aws_app(self) -> WsgiApp:
        """moto's application, which answers every AWS API request no route takes."""
        return self._moto

    def wrap_aws_app(self, wrap: Callable[[WsgiApp], WsgiApp]) -> None:
        """Put ``wrap(moto)`` where moto was: it sees every request no route takes."""
        self._moto = wrap(self._moto)

    def guard(self, wrap: Callable[[WsgiApp], WsgiApp]) -> None:
        """Put ``wrap(everything)`` in front: it sees every request, routes' too."""
        self._front = wrap(self._front)

    def add_route(self, matches: Callable[[dict[str, Any]], bool], app: WsgiApp) -> None:
        self._routes.append((matches, app))

    def put_object(self, account_id: str, bucket: str, key: str, body: bytes) -> None:
        """What a PutObject request of ``body`` does in moto (notifications included),
        without the request: for the emulated services' own writes, which on AWS are not
        a client's requests either (SageMaker copying a job's checkpoints and outputs).
        Through HTTP a small object cost the stack about 12 ms of CPU: signing, a new
        connection and thread (werkzeug closes each), moto parsing the request. Observers
        (``observe_s3_writes``) are told of each, as a request counter would be."""
        for observe in self._s3_observers:
            observe("PUT", bucket, key)
        s3_backends[account_id]["aws"].put_object(bucket, key, body)

    def download_object(self, account_id: str, bucket: str, key: str, target: Path) -> None:
        """Write the object to ``target`` as a whole-object GetObject would, without the
        request: for SageMaker's own copies of a job's inputs. moto answers each ranged GET
        by reading the whole object, so a managed download of a 557 MB upload in 8 MB
        ranges read it 70 times, ten at a time (5 GB of the stack's memory at once).
        Observers are told of it as a GET."""
        for observe in self._s3_observers:
            observe("GET", bucket, key)
        found = s3_backends[account_id]["aws"].get_object(bucket, key)
        if found is None:
            raise FileNotFoundError(f"s3://{bucket}/{key} does not exist")
        copy_value(found, target)

    def observe_s3_writes(self, observer: S3WriteObserver) -> None:
        self._s3_observers.append(observer)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        for matches, app in self._routes:
            if matches(environ):
                return app(environ, start_response)
        return self._moto(environ, start_response)

    def start(self) -> None:
        self._serving.start()

    def stop(self) -> None:
        self._serving.stop()
