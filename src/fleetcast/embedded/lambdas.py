"""Lambda functions without Docker: each function runs in worker processes of its own,
with the environment template.yaml gives it, as the Lambda service would.

A worker imports the handler module from the function's CodeUri (Lambda puts the code
directory on the import path; here each module gets a name of its own, so every
function's ``app.py`` can live in one process tree), and writes its logs to a file per
function, as CloudWatch Logs keeps a log group per function.
"""

from __future__ import annotations

import gc
import importlib.util
import multiprocessing
import os
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetcast.embedded.lambda_workers import (
    ASYNCHRONOUS,
    REQUEST_LIMITS,
    RESPONSE_LIMIT,
    SYNCHRONOUS,
    RequestTooLargeError,
    ResponseTooLargeError,
    WorkerPool,
    payload_size,
)
from fleetcast.embedded.template import ACCOUNT_ID, REGION

# What the handlers import (boto3, Powertools, pydantic: 1-2 s of CPU per process). Workers
# fork from one server process that imported them once, instead of each importing them
# afresh: a stack starts a dozen workers, which on two cores took 15 s.
PRELOADED_MODULES = (
    "boto3",
    "botocore.client",
    "pydantic",
    "pydantic_settings",
    "aws_lambda_powertools",
    "aws_lambda_powertools.metrics",
    "aws_lambda_powertools.event_handler",
    "aws_lambda_powertools.utilities.batch",
    "aws_lambda_powertools.utilities.data_classes",
    "aws_lambda_powertools.utilities.parser",
)


def worker_context() -> multiprocessing.context.BaseContext:
    """Each worker a fork of a clean server process (not of the stack's, which runs
    threads) that has :data:`PRELOADED_MODULES` imported; the handler's own code is still
    imported by the worker, with the function's environment.

    multiprocessing also runs the program's main module again in each worker. Run as
    ``python -m package.module`` (``make scale``, the benchmarks), that module is preloaded
    too, so each worker's run of it finds its imports done (milliseconds, not seconds);
    the ``fleetcast`` command's main module imports nothing (:mod:`fleetcast.__main__`).
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        ["fleetcast.embedded.worker_preload", *PRELOADED_MODULES, *_main_module_by_name()]
    )
    return context


def _main_module_by_name() -> list[str]:
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None)
    return [name] if name and not name.endswith("__main__") else []


def load_handler(code_dir: Path, handler: str, module_name: str) -> Any:
    """Import ``handler`` (``module.function``) from ``code_dir`` under ``module_name``."""
    module_file, _, function_name = handler.rpartition(".")
    path = code_dir / f"{module_file.replace('.', '/')}.py"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load handler {handler} from {code_dir}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return getattr(module, function_name)


@dataclass(frozen=True)
class LambdaContext:
    """The parts of the Lambda context object that Powertools and handlers read."""

    function_name: str
    memory_limit_in_mb: int
    aws_request_id: str
    invoked_function_arn: str
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"

    # time.monotonic() when the function's timeout runs out (a minute, unless told).
    deadline: float = field(default_factory=lambda: time.monotonic() + 60)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


_handler: Any = None
_function_name = ""
_memory = 512
_timeout = 60.0


def _start_worker(
    code_dir: str,
    handler: str,
    function_name: str,
    env: dict[str, str],
    log_path: str,
    memory: int,
    timeout: float,
) -> None:
    global _handler, _function_name, _memory, _timeout
    # What the worker inherits from the forkserver (its preloaded imports) is shared with
    # every other worker until written to, and the cyclic collector writes to each object
    # it examines (its header's reference count): after a few collections a worker held
    # its own copy of most of it. Frozen, those objects are never examined. At make
    # scale's start the seven workers and the forkserver held 420 MiB (PSS) without it,
    # 286 with it.
    gc.freeze()
    os.environ.update(env)
    log = Path(log_path).open("a", buffering=1)  # noqa: SIM115 - lives as long as the worker
    sys.stdout = log
    sys.stderr = log
    _function_name, _memory, _timeout = function_name, memory, timeout
    _handler = load_handler(
        Path(code_dir), handler, f"fleetcast_lambda_{function_name.replace('-', '_')}"
    )


def _invoke(event: dict[str, Any]) -> tuple[float, Any]:
    """The handler's answer, and how long it took (Lambda's billed Duration)."""
    started = time.monotonic()
    context = LambdaContext(
        function_name=_function_name,
        memory_limit_in_mb=_memory,
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn=f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{_function_name}",
        log_group_name=f"/aws/lambda/{_function_name}",
        deadline=started + _timeout,
    )
    answer = _handler(event, context)
    return time.monotonic() - started, answer


@dataclass
class Invocations:
    """How a function's invocations went: what Lambda's Duration metric would show;
    ``longest`` says how close the function came to its timeout (past it, the invocation
    is ended: :mod:`fleetcast.embedded.lambda_workers`)."""

    count: int = 0
    longest: float = 0.0
    total: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.longest = max(self.longest, seconds)
        self.total += seconds


class LocalFunction:
    """One function: its workers and how to invoke it."""

    def __init__(
        self,
        name: str,
        code_dir: Path,
        handler: str,
        environment: dict[str, str],
        log_path: Path,
        concurrency: int = 1,
        memory: int = 512,
        timeout: float = 3.0,
    ) -> None:
        self.name = name
        self.concurrency = concurrency
        self.timeout = timeout
        self.invocations = Invocations()
        self._lock = threading.Lock()
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._pool = WorkerPool(
            name,
            worker_context(),
            concurrency,
            _start_worker,
            (str(code_dir), handler, name, environment, str(log_path), memory, timeout),
            _invoke,
            timeout,
        )

    def warm_up(self) -> Future[int]:
        """Start the function's first worker, whose future this is. Others start when
        invocations find every worker busy, up to ``concurrency``
        (:class:`~fleetcast.embedded.lambda_workers.WorkerPool`): such a start takes a
        second or two of a core, as a cold start does on Lambda; make load's warm-up runs
        its clients' concurrency first, so its timed run finds them started."""
        return self._pool.warm_up()

    @property
    def environments(self) -> int:
        """The function's execution environments (workers) running or starting."""
        return self._pool.environments

    def invoke(self, event: dict[str, Any], invocation: str = SYNCHRONOUS) -> Any:
        """The handler's answer to ``event``; ``invocation`` is Invoke's InvocationType:
        ``Event`` for EventBridge's deliveries, whose answer Lambda throws away. Past the
        function's timeout, or its payload limits, it fails as Lambda fails it."""
        size = payload_size(event)
        if size > REQUEST_LIMITS[invocation]:
            raise RequestTooLargeError(self.name, size, invocation)
        seconds, answer = self._pool.run(event)
        with self._lock:
            self.invocations.add(seconds)
        if invocation == SYNCHRONOUS and (size := payload_size(answer)) > RESPONSE_LIMIT:
            raise ResponseTooLargeError(self.name, size)
        return None if invocation == ASYNCHRONOUS else answer

    def close(self) -> None:
        self._pool.close()
