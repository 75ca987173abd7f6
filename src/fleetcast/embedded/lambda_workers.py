"""A function's warm workers, each one execution environment, ended as Lambda ends one.

Lambda stops an invocation that runs past the function's Timeout: the execution
environment is shut down ("Task timed out after 3.00 seconds" in the log, error type
``Sandbox.Timedout``), the invocation fails, and its event source does what it does with
any failure (an asynchronous event is retried twice, then dead-lettered; an SQS batch
goes back to its queue). Other invocations of the function, in other environments, go
on. A process pool cannot end one of its workers, so each worker here is a process of
its own, spoken to over a pipe: one past its time is killed and replaced (a cold start,
as Lambda's next environment is), and only its invocation fails.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import pickle
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

log = logging.getLogger("fleetcast.embedded.lambdas")

# How long a worker may take to start (import its handler): Lambda's init phase has 10 s
# ("Lambda execution environment lifecycle"); on two shared cores a few more.
INIT_SECONDS = 60.0


class LambdaError(Exception):
    """An invocation that failed as Lambda fails it, with Lambda's error type."""

    error_type = "Unhandled"


class FunctionTimeoutError(LambdaError):
    error_type = "Sandbox.Timedout"

    def __init__(self, function: str, timeout: float) -> None:
        # Lambda's own words in the function's log and the invocation's error.
        super().__init__(f"{function}: Task timed out after {timeout:.2f} seconds")


class RuntimeExitError(LambdaError):
    error_type = "Runtime.ExitError"


# Invoke's limits ("For synchronous invocations, the maximum payload size is 6 MB. For
# asynchronous invocations, the maximum payload size is 1 MB.", Lambda API reference,
# Invoke), in the bytes Lambda counts: a synchronous request up to 6,291,456, its
# response up to 6,291,556 (the figure Lambda's ResponseSizeTooLarge names), an
# asynchronous event (EventBridge's deliveries) up to 1,048,576.
SYNCHRONOUS = "RequestResponse"
ASYNCHRONOUS = "Event"
REQUEST_LIMITS = {SYNCHRONOUS: 6_291_456, ASYNCHRONOUS: 1_048_576}
RESPONSE_LIMIT = 6_291_556


class RequestTooLargeError(LambdaError):
    error_type = "RequestEntityTooLargeException"

    def __init__(self, function: str, size: int, invocation: str) -> None:
        super().__init__(
            f"{function}: {size} byte payload is too large for the {invocation} invocation "
            f"type (limit {REQUEST_LIMITS[invocation]} bytes)"
        )


class ResponseTooLargeError(LambdaError):
    error_type = "Function.ResponseSizeTooLarge"

    def __init__(self, function: str, size: int) -> None:
        super().__init__(
            f"{function}: Response payload size ({size} bytes) exceeded maximum allowed "
            f"payload size ({RESPONSE_LIMIT} bytes)."
        )


def payload_size(payload: Any) -> int:
    """The bytes of ``payload`` as Lambda receives or returns it: its JSON."""
    return len(json.dumps(payload, separators=(",", ":"), default=str).encode())


@dataclass(eq=False)
class _Worker:
    process: Any
    connection: Connection


def _serve(
    connection: Connection,
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    invoke: Callable[[Any], Any],
) -> None:
    """A worker's life: start (import the handler), say so, then one event at a time."""
    try:
        initializer(*initargs)
    except BaseException as error:
        connection.send(("error", _picklable(error)))
        return
    connection.send(("ready", None))
    while True:
        try:
            event = connection.recv()
        except (EOFError, OSError):
            return
        if event is None:
            return
        try:
            connection.send(("answer", invoke(event)))
        except BaseException as error:
            connection.send(("error", _picklable(error)))


def _picklable(error: BaseException) -> BaseException:
    try:
        pickle.dumps(error)
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


class WorkerPool:
    """Up to ``size`` workers of one function; :meth:`run` gives an event to an idle one and
    waits at most ``timeout`` seconds for its answer.

    One worker starts with the pool; another starts when an invocation finds every worker
    busy, up to ``size``, as Lambda starts an execution environment when a request comes
    in while the others are busy: a function never invoked two at a time keeps one
    process. (All of them started at once, ten warm workers took about a gigabyte of the
    machine whatever they were asked; at 100,000 customers that was a quarter of the
    stack's peak, and the forecast API's four workers answered make scale's twenty
    requests one at a time.)"""

    def __init__(
        self,
        name: str,
        context: multiprocessing.context.BaseContext,
        size: int,
        initializer: Callable[..., None],
        initargs: tuple[Any, ...],
        invoke: Callable[[Any], Any],
        timeout: float,
    ) -> None:
        self._name = name
        self._context = context
        self._size = size
        self._initializer = initializer
        self._initargs = initargs
        self._invoke = invoke
        self._timeout = timeout
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        # Workers being started (at warm-up, or in place of one that was ended).
        self._starting = 0
        self.timeouts = 0

    @property
    def environments(self) -> int:
        """The workers running or starting."""
        with self._lock:
            return len(self._all) + self._starting

    def warm_up(self) -> Future[int]:
        """Start the first worker; the future is done when it is ready (raises if its
        handler could not be imported)."""
        first: Future[int] = Future()
        with self._lock:
            self._starting += 1
        threading.Thread(
            target=self._add_worker, args=(first,), daemon=True, name=f"start {self._name}"
        ).start()
        return first

    def run(self, event: Any) -> Any:
        """The worker's answer; :class:`FunctionTimeoutError` past the timeout (the worker
        is killed and replaced), the handler's own exception when it raised."""
        worker = self._take()
        try:
            worker.connection.send(event)
            if not worker.connection.poll(self._timeout):
                self.timeouts += 1
                log.error("%s: task timed out after %.2f seconds", self._name, self._timeout)
                self._replace(worker)
                raise FunctionTimeoutError(self._name, self._timeout)
            kind, value = worker.connection.recv()
        except (EOFError, OSError, BrokenPipeError) as error:
            self._replace(worker)
            raise RuntimeExitError(f"{self._name}: the runtime exited ({error!r})") from None
        self._idle.put(worker)
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers = list(self._all)
        for worker in workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.connection.send(None)
        deadline = time.monotonic() + 10
        for worker in workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()

    # -- workers ----------------------------------------------------------------------

    def _take(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            self._scale_out()
        while True:
            try:
                return self._idle.get(timeout=INIT_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._closed:
                        raise RuntimeExitError(f"{self._name}: the function is closed") from None
                    if not self._all and not self._starting:
                        raise RuntimeExitError(f"{self._name}: no worker started") from None

    def _scale_out(self) -> None:
        """Every worker is busy: start another, unless there are ``size`` already (the
        invocation takes whichever is idle first)."""
        with self._lock:
            if self._closed or len(self._all) + self._starting >= self._size:
                return
            self._starting += 1
        threading.Thread(
            target=self._add_worker, daemon=True, name=f"scale out {self._name}"
        ).start()

    def _add_worker(self, ready: Future[int] | None = None) -> None:
        try:
            self._start_worker(ready)
        except Exception as error:
            log.exception("%s: a worker could not start", self._name)
            if ready is not None and not ready.done():
                ready.set_exception(error)
        finally:
            with self._lock:
                self._starting -= 1

    def _start_worker(self, ready: Future[int] | None) -> None:
        parent, child = self._context.Pipe()
        process = self._context.Process(  # type: ignore[attr-defined]
            target=_serve,
            args=(child, self._initializer, self._initargs, self._invoke),
            daemon=True,
            name=f"lambda {self._name}",
        )
        process.start()
        child.close()
        worker = _Worker(process, parent)
        try:
            started = parent.poll(INIT_SECONDS)
            kind, value = parent.recv() if started else ("error", TimeoutError("init timed out"))
        except (EOFError, OSError) as error:
            kind, value = "error", RuntimeExitError(f"{self._name}: init failed ({error!r})")
        if kind != "ready":
            process.kill()
            process.join()
            parent.close()
            log.error("%s: a worker could not start: %s", self._name, value)
            if ready is not None and not ready.done():
                ready.set_exception(value)
            return
        with self._lock:
            if self._closed:
                parent.send(None)
                return
            self._all.add(worker)
        self._idle.put(worker)
        if ready is not None and not ready.done():
            ready.set_result(process.pid)

    def _replace(self, worker: _Worker) -> None:
        """End the worker (an execution environment past its time, or one whose runtime
        exited) and start another in its place, in the background."""
        worker.process.kill()
        worker.process.join()
        worker.connection.close()
        with self._lock:
            self._all.discard(worker)
            if self._closed:
                return
            self._starting += 1
        threading.Thread(target=self._add_worker, daemon=True, name=f"restart {self._name}").start()
