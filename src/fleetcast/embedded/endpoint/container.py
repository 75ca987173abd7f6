"""The inference container as a process under the multi-model container contract."""

from __future__ import annotations

import http.client
import json
import logging
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetcast.embedded.endpoint.exceptions import ContainerUnavailableError
from fleetcast_contracts.inference import (
    BIND_HOST_ENV,
    LOG_LEVEL_ENV,
    MEMORY_BUDGET_ENV,
    MODELS_DIR,
    MULTI_MODEL_ENV,
    PING_PATH,
    PORT_ENV,
)
from fleetcast_contracts.opt_ml import OPT_ML_ENV, resolve

log = logging.getLogger("fleetcast.embedded.endpoint")

HOST = "127.0.0.1"
CONTAINER_TIMEOUT_SECONDS = 60
_IDLE_CONNECTIONS = 32


@dataclass(frozen=True)
class ContainerAnswer:
    status: int
    body: bytes
    content_type: str = "application/json"

    def error_code(self) -> str | None:
        """The ``error`` field of the container's JSON error body."""
        try:
            document = json.loads(self.body)
        except (ValueError, UnicodeDecodeError):
            return None
        code = document.get("error") if isinstance(document, dict) else None
        return str(code) if code is not None else None


def free_port(host: str = HOST) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class InferenceContainer:
    """The inference image's entrypoint as a subprocess, under the multi-model container
    contract (``fleetcast_contracts.inference``): its ``/opt/ml`` is ``opt_ml``, it listens
    on 127.0.0.1, and a watcher starts it again ``restart_delay`` seconds after it dies."""

    def __init__(
        self,
        command: list[str],
        opt_ml: Path,
        log_path: Path,
        memory_budget_mb: float,
        restart_delay: float = 1.0,
        start_timeout: float = 60.0,
        on_restart: Callable[[], None] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        self.command = command
        # The image's ENV (sagemaker_jobs.containers.image_environment): one BLAS thread
        # per process, say, as requests run on many threads.
        self.environment = dict(environment or {})
        self.opt_ml = opt_ml
        self.log_path = log_path
        self.memory_budget_mb = memory_budget_mb
        self.restart_delay = restart_delay
        self.start_timeout = start_timeout
        self.port = 0
        self.restarts = 0
        # Called after the container came back (empty) from a restart.
        self.on_restart = on_restart
        self._process: subprocess.Popen[bytes] | None = None
        self._replaced: set[int] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue()

    @property
    def models_root(self) -> Path:
        """Where the container reads ``/opt/ml/models`` from."""
        return resolve(MODELS_DIR, self.opt_ml)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> None:
        self.models_root.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with self._lock:
            self._process = self._spawn()
        self._wait_ready(self._process)
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="mme-watcher")
        self._watcher.start()

    def restart(self, memory_budget_mb: float | None = None) -> None:
        """Stop the container and start it again (with another memory budget): it comes
        back with no model loaded, as a replaced instance does."""
        with self._lock:
            if memory_budget_mb is not None:
                self.memory_budget_mb = memory_budget_mb
            old = self._process
            if old is not None:
                self._replaced.add(old.pid)
                _terminate(old)
            self._drop_connections()
            self._process = self._spawn()
            process = self._process
        self._wait_ready(process)
        if self.on_restart:
            self.on_restart()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._process is not None:
                _terminate(self._process)
        self._drop_connections()
        if self._watcher is not None:
            self._watcher.join(timeout=10)

    def rss_bytes(self) -> tuple[int, int]:
        """(resident, peak resident) bytes of the container process, from /proc."""
        pid = self.pid
        if pid is None:
            raise ContainerUnavailableError("the inference container is not running")
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        return (_kib(fields["VmRSS"]), _kib(fields["VmHWM"]))

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> ContainerAnswer:
        """One HTTP exchange with the container over a pooled keep-alive connection."""
        for attempt in (1, 2):
            connection = self._connection()
            try:
                connection.request(method, path, body=body, headers=headers or {})
                response = connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                # A pooled connection may have outlived the process it was opened to.
                if attempt == 2:
                    raise ContainerUnavailableError(
                        f"the inference container on port {self.port} does not answer: {error}"
                    ) from error
                continue
            if response.will_close:
                connection.close()
            else:
                self._release(connection)
            return ContainerAnswer(
                response.status, payload, response.getheader("Content-Type") or "application/json"
            )
        raise AssertionError("unreachable")

    # -- internals ---------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes]:
        environment = {
            **os.environ,
            **self.environment,
            OPT_ML_ENV: str(self.opt_ml),
            BIND_HOST_ENV: HOST,
            PORT_ENV: str(self.port),
            MEMORY_BUDGET_ENV: f"{self.memory_budget_mb:g}",
            MULTI_MODEL_ENV: "true",
            LOG_LEVEL_ENV: os.environ.get(LOG_LEVEL_ENV, "INFO"),
        }
        with self.log_path.open("ab") as log_file:
            process = subprocess.Popen(
                self.command,
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        log.info("inference container pid %d on port %d: %s", process.pid, self.port, self.command)
        return process

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the inference container exited with {process.returncode} while starting; "
                    f"its log: {self.log_path}\n{_tail(self.log_path)}"
                )
            try:
                if self.request("GET", PING_PATH).status == 200:
                    return
            except ContainerUnavailableError:
                pass
            time.sleep(0.05)
        raise TimeoutError(
            f"the inference container did not answer {PING_PATH} within {self.start_timeout:.0f} s; "
            f"its log: {self.log_path}"
        )

    def _watch(self) -> None:
        while not self._stopping.is_set():
            process = self._process
            if process is None:
                return
            process.wait()
            with self._lock:
                if self._stopping.is_set():
                    return
                if process.pid in self._replaced:
                    self._replaced.discard(process.pid)
                    continue
            log.warning(
                "inference container pid %d exited with %s; starting another in %.1f s",
                process.pid,
                process.returncode,
                self.restart_delay,
            )
            if self._stopping.wait(self.restart_delay):
                return
            with self._lock:
                if self._process is not process:  # restarted meanwhile
                    continue
                self._drop_connections()
                self._process = self._spawn()
                replacement = self._process
            try:
                self._wait_ready(replacement)
            except (RuntimeError, TimeoutError) as error:
                log.error("the inference container did not come back: %s", error)
                continue
            self.restarts += 1
            if self.on_restart:
                self.on_restart()

    def _connection(self) -> http.client.HTTPConnection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return http.client.HTTPConnection(HOST, self.port, timeout=CONTAINER_TIMEOUT_SECONDS)

    def _release(self, connection: http.client.HTTPConnection) -> None:
        if self._idle.qsize() < _IDLE_CONNECTIONS:
            self._idle.put(connection)
        else:
            connection.close()

    def _drop_connections(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _kib(value: str) -> int:
    return int(value.strip().split()[0]) * 1024


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
