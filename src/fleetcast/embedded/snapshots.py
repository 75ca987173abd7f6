"""Snapshots of a running stack's state, taken as it changes, without stopping it.

Every request that changes kept state (an S3 write, a DynamoDB write, a SageMaker call
that creates or stops something) and every job state change (the job runner publishes one
for each) marks the state changed; the snapshot follows within ``MIN_GAP_SECONDS``, and
never closer to the last one than ``GAP_FACTOR`` times as long as that one took, so that
at 100,000 customers snapshots take a bounded share of the machine.

A snapshot is written by a forked child: the fork copies the stack's memory as it is at
that instant (copy on write), and the child pickles that copy and writes it
(:func:`persistence.save`) while the stack goes on. The stack waits only for the fork
itself, with DynamoDB's writes held for that moment (moto changes an item in several steps;
see ``moto_patches.dynamodb.dynamodb_writes_one_at_a_time``). moto's S3 and SageMaker changes are single
assignments (an object put in its bucket's dict, a job's status set), so a fork sees each
whole or not at all. The child takes no lock and logs nothing (another thread may have held
either at the fork), runs no garbage collection (a finaliser might), and leaves by
``os._exit``.

S3 object files released since the last snapshot are removed once the next one is written
(the last one may name them): see ``moto_patches.s3.ObjectFiles.take_released``.

An upload is acknowledged only once it is kept: a request that creates an object in one of
the ``durable_buckets`` (the raw bucket: PutObject, CopyObject, CompleteMultipartUpload)
gets its answer after a snapshot taken after its write is written (:meth:`Snapshots.
kept_now`), at once rather than after the gap. Uploads at the same moment share one
snapshot. Without it a stack killed seconds after an upload lost the object, and the
uploader had been told it was stored. What such a snapshot cannot hold (the upload's event,
still being delivered) is sent again at the next start (:mod:`.recovery`).
"""

from __future__ import annotations

import gc
import logging
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from fleetcast.embedded import lease, persistence
from fleetcast.embedded.moto_patches.dynamodb import dynamodb_writes_held
from fleetcast.embedded.moto_patches.s3 import ObjectFiles

log = logging.getLogger("fleetcast.embedded.snapshots")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

MIN_GAP_SECONDS = 2.0
GAP_FACTOR = 10.0
# How long an upload's answer waits for its snapshot before it is given anyway (logged).
KEPT_WAIT_SECONDS = 60.0
KEPT_SERVICES = frozenset({"s3", "dynamodb", "sagemaker"})
READ_OPERATIONS = ("Describe", "List", "Get", "Query", "Scan", "BatchGet", "Search")
_CREDENTIAL = re.compile(r"Credential=[^/]*/\d{8}/[^/]*/([a-z0-9-]+)/aws4_request")


def changes_kept_state(environ: dict[str, Any]) -> bool:
    """Whether a request to the AWS APIs may change what a snapshot holds (when unsure,
    yes). The service is the one its signature names."""
    signed = environ.get("HTTP_AUTHORIZATION", "") + unquote(environ.get("QUERY_STRING", ""))
    found = _CREDENTIAL.search(signed)
    if found is None:
        return True
    service = found.group(1)
    operation = str(environ.get("HTTP_X_AMZ_TARGET", "")).rpartition(".")[2]
    if service == "events":
        # The job runner publishes each job's state change after making it in moto.
        return operation == "PutEvents"
    if service not in KEPT_SERVICES:
        return False
    if service == "s3":
        return environ.get("REQUEST_METHOD") not in ("GET", "HEAD")
    return not operation.startswith(READ_OPERATIONS)


def creates_object_in(environ: dict[str, Any], buckets: frozenset[str]) -> bool:
    """Whether the request creates an object in one of ``buckets`` (path-style, as
    clients address the stack's 127.0.0.1 endpoint): PutObject or CopyObject (a PUT that
    is not a part of a multipart upload), or CompleteMultipartUpload."""
    if not buckets:
        return False
    bucket, _, key = unquote(environ.get("PATH_INFO", "")).lstrip("/").partition("/")
    if bucket not in buckets or not key:
        return False
    query = environ.get("QUERY_STRING", "")
    method = environ.get("REQUEST_METHOD")
    if method == "PUT":
        return "partNumber=" not in query and "tagging" not in query and "acl" not in query
    return method == "POST" and "uploadId=" in query


@dataclass
class SnapshotTimes:
    """How the stack's snapshots went: what the README's figures come from."""

    count: int = 0
    failures: int = 0
    longest_pause: float = 0.0  # the stack waiting for a fork
    longest_write: float = 0.0  # fork to the child's exit
    last_write: float = 0.0
    pauses: list[float] = field(default_factory=list)


class Snapshots:
    def __init__(
        self,
        path: Path,
        state_dir: Path,
        account_id: str,
        region: str,
        objects: ObjectFiles,
        durable_buckets: frozenset[str] = frozenset(),
    ) -> None:
        self.path = path
        self._durable_buckets = durable_buckets
        self._state_dir = state_dir
        self._account_id = account_id
        self._region = region
        self._objects = objects
        self._changed = threading.Event()
        # A request waits for a snapshot (kept_now): take one now, not after the gap.
        self._urgent = threading.Event()
        self._stopping = threading.Event()
        # kept_now's requests, numbered, and the last one a written snapshot covers.
        self._progress = threading.Condition()
        self._asked = 0
        self._kept = 0
        self._thread: threading.Thread | None = None
        # One snapshot at a time (the thread's, or a caller's such as a benchmark's).
        self._taking = threading.Lock()
        self.times = SnapshotTimes()
        self.last: persistence.KeptState | None = None

    # -- what marks the state changed ----------------------------------------------------

    def watch(self, aws_app: WsgiApp) -> WsgiApp:
        """``aws_app``, marking the state changed on each request that may change it."""

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            statuses: list[str] = []

            def noted(status: str, *args: Any) -> Any:
                statuses.append(status)
                return start_response(status, *args)

            try:
                answer = aws_app(environ, noted)
            finally:
                if changes_kept_state(environ):
                    self._changed.set()
            if not (
                statuses
                and statuses[-1].startswith("200")
                and creates_object_in(environ, self._durable_buckets)
            ):
                return answer
            # The server sends the answer's status and headers with its first bytes:
            # held here, the uploader hears nothing until the object is kept.
            body = list(answer)
            close = getattr(answer, "close", None)
            if close is not None:
                close()
            if not self.kept_now():
                log.error(
                    "an upload to %s is acknowledged before it is kept: no snapshot was "
                    "written within %.0f s (a crash now would lose it)",
                    environ.get("PATH_INFO"),
                    KEPT_WAIT_SECONDS,
                )
            return body

        return app

    def kept_now(self) -> bool:
        """Wait until a snapshot taken after this call is written: True; False when none
        is within :data:`KEPT_WAIT_SECONDS`, or the stack is stopping (its last snapshot
        is written at the stop)."""
        with self._progress:
            self._asked += 1
            wanted = self._asked
        self._urgent.set()
        self._changed.set()
        deadline = time.monotonic() + KEPT_WAIT_SECONDS
        with self._progress:
            while self._kept < wanted:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopping.is_set():
                    return False
                self._progress.wait(min(remaining, 0.5))
        return True

    def _covered(self, asked: int) -> None:
        with self._progress:
            self._kept = max(self._kept, asked)
            self._progress.notify_all()

    def s3_written(self, method: str, bucket: str, key: str) -> None:
        """An observer of the stack's in-process S3 writes (``Gateway.observe_s3_writes``)."""
        if method != "GET":
            self._changed.set()

    # -- taking them --------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="snapshots")
        self._thread.start()

    def stop(self) -> persistence.KeptState:
        """Stop taking snapshots and write the last one here (the stack has stopped)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        with self._taking:
            return self._last()

    def _last(self) -> persistence.KeptState:
        released = self._objects.take_released()
        asked = self._asked
        self.last = persistence.save(self.path, self._account_id, self._region, self._objects)
        self._covered(asked)
        _remove(released)
        return self.last

    def _run(self) -> None:
        allowed_at = 0.0
        while not self._stopping.is_set():
            lease.heartbeat(self._state_dir)
            self._changed.wait(lease.HEARTBEAT_SECONDS)
            now = time.monotonic()
            due = now >= allowed_at or self._urgent.is_set()
            if not self._changed.is_set() or not due or self._stopping.is_set():
                if not due:
                    self._urgent.wait(min(allowed_at - now, lease.HEARTBEAT_SECONDS))
                continue
            self._changed.clear()
            self._urgent.clear()
            took = self.take()
            allowed_at = time.monotonic() + max(MIN_GAP_SECONDS, GAP_FACTOR * took)

    def take(self) -> float:
        """Write a snapshot from a forked child; how long it took."""
        with self._taking:
            return self._take()

    def _take(self) -> float:
        released = self._objects.take_released()
        asked = self._asked  # read before the fork: every write it counts is in the copy
        started = time.monotonic()
        with dynamodb_writes_held():
            child = os.fork()
            if child == 0:  # pragma: no cover - the child; it never returns
                self._write_and_exit()
        paused = time.monotonic() - started
        _, status = os.waitpid(child, 0)
        took = time.monotonic() - started
        times = self.times
        times.pauses = [*times.pauses[-99:], paused]
        times.longest_pause = max(times.longest_pause, paused)
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            self._covered(asked)
            _remove(released)
            times.count += 1
            times.last_write = took
            times.longest_write = max(times.longest_write, took)
            log.info("snapshot %s: %.2f s (the stack paused %.3f s)", self.path, took, paused)
        else:
            self._objects.give_back(released)
            times.failures += 1
            log.error("snapshot %s failed (exit %s): see the stack's output", self.path, code)
        return took

    def _write_and_exit(self) -> None:
        code = 1
        try:
            gc.disable()
            persistence.save(self.path, self._account_id, self._region, self._objects)
            code = 0
        except BaseException:  # the child says why on stderr, then exits
            os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(code)


def _remove(released: list[Path]) -> None:
    for path in released:
        path.unlink(missing_ok=True)
