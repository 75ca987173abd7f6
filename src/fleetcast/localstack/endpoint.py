"""A SageMaker multi-model endpoint on the local stack: what SageMaker's hosting platform
does in front of a multi-model container, in front of the real inference container.

moto records CreateModel / CreateEndpointConfig / CreateEndpoint, but answers
InvokeEndpoint with canned bodies. Here the SageMaker runtime's InvokeEndpoint
(``POST /endpoints/{EndpointName}/invocations``) reaches a :class:`LocalEndpoint`, which,
as the platform does on an instance:

- on the first use of a TargetModel, downloads ``<ModelDataUrl><TargetModel>`` from S3
  and unpacks it into a bounded disk cache (the cold start), then asks the container to
  load it (``POST /models``);
- when the container answers 507, unloads the least recently used models and loads again;
- invokes ``POST /models/{name}/invoke``, and loads again when the container no longer
  holds the model (404: it was restarted, or the model unloaded meanwhile);
- answers with the errors a real endpoint gives: ``ValidationError`` for an unknown
  endpoint, a missing TargetModel header or a TargetModel not in S3, ``ModelError`` (424,
  with the container's status and message) for a container error, ``ServiceUnavailable``
  while the container is down. A container that dies is started again, as SageMaker
  replaces a failed instance.

Laid out like a moto service: errors, then models (container process, disk cache,
endpoint), then the WSGI side (:class:`EndpointRuntime`).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import queue
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from fleetcast_common.contracts.inference import (
    BIND_HOST_ENV,
    INVOKE_SUFFIX,
    LOG_LEVEL_ENV,
    MEMORY_BUDGET_ENV,
    MODELS_DIR,
    MODELS_PATH,
    MULTI_MODEL_ENV,
    PING_PATH,
    PORT_ENV,
    TARGET_MODEL_HEADER,
)
from fleetcast_common.contracts.opt_ml import OPT_ML_ENV, resolve

log = logging.getLogger("fleetcast.localstack.endpoint")

HOST = "127.0.0.1"
INVOCATIONS = re.compile(r"^/endpoints/(?P<name>[^/]+)/invocations$")
# How often one invocation loads its model again after the container lost it (restart,
# or unloaded by a concurrent load) before answering ModelNotReadyException.
MAX_LOAD_ATTEMPTS = 4
# How long a load that needs room waits for busy models to become idle (and so
# unloadable) before answering ModelNotReadyException.
LOAD_WAIT_SECONDS = 5.0
CONTAINER_TIMEOUT_SECONDS = 60
MAX_TARGET_MODEL_LENGTH = 1024
_IDLE_CONNECTIONS = 32
DOWNLOAD_CHUNK_BYTES = 1024 * 1024


# ---------------------------------------------------------------- errors (as AWS names them)


class RuntimeServiceError(Exception):
    """An InvokeEndpoint error: the AWS error code, HTTP status and modeled fields."""

    code = "InternalFailure"
    status = 500

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class ValidationError(RuntimeServiceError):
    code = "ValidationError"
    status = 400


class ModelError(RuntimeServiceError):
    """The container answered 4xx or 5xx; ``OriginalStatusCode``/``OriginalMessage`` say how."""

    code = "ModelError"
    status = 424


class ModelNotReadyException(RuntimeServiceError):
    code = "ModelNotReadyException"
    status = 429


class ServiceUnavailable(RuntimeServiceError):
    code = "ServiceUnavailable"
    status = 503


# ---------------------------------------------------------------- the container process


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


class ContainerUnavailableError(Exception):
    """The container does not answer: not started yet, restarting, or dead."""


def free_port(host: str = HOST) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class InferenceContainer:
    """The inference image's entrypoint as a subprocess, under the multi-model container
    contract (``fleetcast_inference.contract``): its ``/opt/ml`` is ``opt_ml``, it listens
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
    ) -> None:
        self.command = command
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
            OPT_ML_ENV: str(self.opt_ml),
            BIND_HOST_ENV: HOST,
            PORT_ENV: str(self.port),
            MEMORY_BUDGET_ENV: f"{self.memory_budget_mb:g}",
            MULTI_MODEL_ENV: "true",
            LOG_LEVEL_ENV: os.environ.get(LOG_LEVEL_ENV, "INFO"),
            # One BLAS thread per process, as the image sets: requests run on many threads.
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
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


# ---------------------------------------------------------------- the instance's disk


@dataclass
class _CachedModel:
    size: int
    users: int = 0


class ModelDiskCache:
    """Unpacked model archives under the container's ``/opt/ml/models``, one folder per
    TargetModel, within ``capacity_bytes``: the least recently used folder not in use is
    deleted first, as SageMaker does when an instance's disk fills."""

    def __init__(self, root: Path, capacity_bytes: int, s3: Any, bucket: str, prefix: str) -> None:
        self.root = root
        self.capacity_bytes = capacity_bytes
        self.bucket = bucket
        self.prefix = prefix
        self._s3 = s3
        self._entries: OrderedDict[str, _CachedModel] = OrderedDict()
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.downloads = 0
        self.deletions = 0

    @staticmethod
    def folder_name(target_model: str) -> str:
        return hashlib.sha256(target_model.encode()).hexdigest()[:32]

    def container_url(self, target_model: str) -> str:
        """The load request's url: where the container finds the model."""
        return f"{MODELS_DIR}/{self.folder_name(target_model)}/model"

    def cached(self, target_model: str) -> bool:
        with self._lock:
            return target_model in self._entries

    @contextmanager
    def holding(self, target_model: str) -> Iterator[Path]:
        """The model's folder, downloaded first if needed and kept while the block runs.
        Callers serialise per TargetModel (one download each)."""
        with self._lock:
            entry = self._entries.get(target_model)
            if entry is not None:
                self._entries.move_to_end(target_model)
                entry.users += 1
        if entry is None:
            size = self._download(target_model)
            with self._lock:
                entry = _CachedModel(size=size, users=1)
                self._entries[target_model] = entry
                self.used_bytes += size
                self.downloads += 1
                doomed = self._over_capacity()
            self._delete(doomed)
        try:
            yield self.root / self.folder_name(target_model) / "model"
        finally:
            with self._lock:
                entry.users -= 1

    def _over_capacity(self) -> list[str]:
        doomed = []
        for target_model, entry in list(self._entries.items()):
            if self.used_bytes <= self.capacity_bytes:
                break
            if entry.users == 0:
                del self._entries[target_model]
                self.used_bytes -= entry.size
                doomed.append(target_model)
        return doomed

    def _delete(self, target_models: Iterable[str]) -> None:
        for target_model in target_models:
            shutil.rmtree(self.root / self.folder_name(target_model), ignore_errors=True)
            self.deletions += 1

    def _download(self, target_model: str) -> int:
        key = self.prefix + target_model
        folder = self.root / self.folder_name(target_model)
        staging = self.root / f".{folder.name}-{uuid.uuid4().hex[:8]}"
        archive = staging / "download"
        staging.mkdir(parents=True)
        try:
            try:
                # One GetObject, streamed: a model archive is tens of KB, and the managed
                # transfer (HeadObject, a thread pool per call) cost more than the object.
                body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"]
                with archive.open("wb") as file:
                    shutil.copyfileobj(body, file, DOWNLOAD_CHUNK_BYTES)
            except Exception as error:
                if _s3_missing(error):
                    raise ValidationError(
                        f"Failed to download model data(bucket: {self.bucket}, key: {key}). "
                        "Please ensure that there is an object located at the URL and that the "
                        "role passed to CreateModel has permissions to download the model."
                    ) from None
                raise
            model = staging / "model"
            model.mkdir()
            if tarfile.is_tarfile(archive):
                with tarfile.open(archive) as unpacking:
                    unpacking.extractall(model, filter="data")
                archive.unlink()
            else:
                # Not an archive: the container says what is wrong with it when it loads.
                archive.rename(model / Path(key).name)
            size = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)
            return size
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _s3_missing(error: Exception) -> bool:
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return False
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound", "403", "AccessDenied")


# ---------------------------------------------------------------- the endpoint


@dataclass
class EndpointStats:
    """What the platform did, for tests and for a look at cold versus warm traffic."""

    invocations: int = 0
    loads: int = 0
    unloads: int = 0
    reloads: int = 0
    errors: Counter[str] = field(default_factory=Counter)


class LocalEndpoint:
    """One multi-model endpoint instance: the platform logic in front of the container."""

    def __init__(
        self,
        name: str,
        container: InferenceContainer,
        cache: ModelDiskCache,
        variant_name: str = "AllTraffic",
        account_id: str = "123456789012",
        region: str = "us-east-1",
    ) -> None:
        self.name = name
        self.container = container
        self.cache = cache
        self.variant_name = variant_name
        self.account_id = account_id
        self.region = region
        self.stats = EndpointStats()
        # What the container holds, least recently used first; and invocations under way.
        self._loaded: OrderedDict[str, None] = OrderedDict()
        self._in_use: Counter[str] = Counter()
        self._loads_in_flight: Counter[str] = Counter()
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        # Notified when a model stops being in use, so a waiting load can unload it.
        self._idle = threading.Condition(self._lock)

    @property
    def log_group(self) -> str:
        return f"/aws/sagemaker/Endpoints/{self.name}"

    def loaded_models(self) -> list[str]:
        with self._lock:
            return list(self._loaded)

    def forget_loaded(self) -> None:
        """The container came back empty (restarted)."""
        with self._lock:
            self._loaded.clear()

    def invoke(
        self, target_model: str, body: bytes, content_type: str | None, accept: str | None
    ) -> ContainerAnswer:
        _check_target_model(target_model)
        headers = {TARGET_MODEL_HEADER: target_model}
        if content_type:
            headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
        path = f"{MODELS_PATH}/{quote(target_model, safe='')}{INVOKE_SUFFIX}"
        with self._lock:
            self.stats.invocations += 1
        for attempt in range(MAX_LOAD_ATTEMPTS):
            self._ensure_loaded(target_model)
            try:
                answer = self._container_call("POST", path, body, headers)
            finally:
                self._release(self._in_use, target_model)
            if 200 <= answer.status < 300:
                return answer
            if answer.status == 404 and answer.error_code() == "ModelNotFound":
                # Unloaded by a concurrent load, or the container restarted: load again.
                with self._lock:
                    self._loaded.pop(target_model, None)
                    self.stats.reloads += 1
                log.info("%s: %s was not loaded (attempt %d)", self.name, target_model, attempt + 1)
                continue
            raise self._model_error(answer)
        raise ModelNotReadyException(
            f"Model {target_model} is not ready: it was unloaded {MAX_LOAD_ATTEMPTS} times "
            "while this request waited. Retry the request."
        )

    # -- loading -----------------------------------------------------------------------

    def _ensure_loaded(self, target_model: str) -> None:
        """Return with the model loaded and counted in use (so no load unloads it)."""
        with self._lock:
            if target_model in self._loaded:
                self._loaded.move_to_end(target_model)
                self._in_use[target_model] += 1
                return
            gate = self._loading.setdefault(target_model, threading.Lock())
        with gate:
            with self._lock:
                if target_model in self._loaded:
                    self._loaded.move_to_end(target_model)
                    self._in_use[target_model] += 1
                    return
            with self._lock:
                self._loads_in_flight[target_model] += 1
            try:
                with self.cache.holding(target_model):
                    self._load(target_model)
                with self._lock:
                    self._loaded[target_model] = None
                    self._in_use[target_model] += 1
            finally:
                self._release(self._loads_in_flight, target_model)

    def _load(self, target_model: str) -> None:
        request = json.dumps(
            {"model_name": target_model, "url": self.cache.container_url(target_model)}
        ).encode()
        deadline = time.monotonic() + LOAD_WAIT_SECONDS
        while True:
            answer = self._container_call(
                "POST", MODELS_PATH, request, {"Content-Type": "application/json"}
            )
            if answer.status in (200, 409):  # 409: loaded already (e.g. by a retried request)
                with self._lock:
                    self.stats.loads += answer.status == 200
                return
            if answer.status != 507:
                raise self._model_error(answer)
            if self._unload_least_recently_used(target_model):
                continue
            # No room and nothing idle to unload: wait for a busy model to finish.
            with self._lock:
                # Memory may also be held by models other requests are loading right now.
                others = any(m != target_model for m in self._loaded) or any(
                    m != target_model for m in self._loads_in_flight
                )
                remaining = deadline - time.monotonic()
                if others and remaining > 0:
                    self._idle.wait(timeout=min(remaining, 0.05))
                    continue
            if not others:  # the model alone does not fit the container's memory
                raise self._model_error(answer)
            raise ModelNotReadyException(
                f"Model {target_model} is not ready: the instance's memory is held by "
                "models in use. Retry the request."
            )

    def _release(self, counter: Counter[str], target_model: str) -> None:
        """One use (an invocation, or a load) of ``target_model`` is over: a load waiting
        for memory may now unload it, or stop waiting for it."""
        with self._lock:
            counter[target_model] -= 1
            if counter[target_model] <= 0:
                del counter[target_model]
            self._idle.notify_all()

    def _unload_least_recently_used(self, keep: str) -> bool:
        """Unload the least recently used model no request is using; False if none is."""
        with self._lock:
            victim = next((m for m in self._loaded if m != keep and self._in_use[m] == 0), None)
            if victim is None:
                return False
            del self._loaded[victim]
            self.stats.unloads += 1
        answer = self._container_call("DELETE", f"{MODELS_PATH}/{quote(victim, safe='')}")
        if answer.status not in (200, 404):
            log.warning("%s: unloading %s answered %d", self.name, victim, answer.status)
        return True

    def _container_call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> ContainerAnswer:
        try:
            return self.container.request(method, path, body, headers)
        except ContainerUnavailableError as error:
            raise ServiceUnavailable(
                f"The endpoint {self.name} is unavailable: its instance is not answering. "
                "Try your call again."
            ) from error

    def _model_error(self, answer: ContainerAnswer) -> ModelError:
        kind = "client" if answer.status < 500 else "server"
        original = answer.body.decode(errors="replace")
        console = (
            f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
            f"#logEventViewer:group={self.log_group}"
        )
        return ModelError(
            f'Received {kind} error ({answer.status}) from model with message "{original}". '
            f"See {console} in account {self.account_id} for more information.",
            OriginalStatusCode=answer.status,
            OriginalMessage=original,
            LogStreamArn=(
                f"arn:aws:logs:{self.region}:{self.account_id}:log-group:{self.log_group}"
            ),
        )


def _check_target_model(target_model: str) -> None:
    parts = target_model.split("/")
    if (
        not target_model
        or len(target_model) > MAX_TARGET_MODEL_LENGTH
        or not target_model.isprintable()
        or target_model.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
    ):
        shown = target_model[:100]
        raise ValidationError(
            f"TargetModel {shown!r} is not a relative path under the model's S3 prefix "
            f"(1 to {MAX_TARGET_MODEL_LENGTH} printable characters, no '..' segments)."
        )


# ---------------------------------------------------------------- the runtime API (WSGI)


StartResponse = Callable[..., Any]


class EndpointRuntime:
    """``POST /endpoints/{EndpointName}/invocations`` for the local stack's gateway."""

    def __init__(
        self,
        sagemaker: Any,
        account_id: str,
        region: str,
        existence_ttl: float = 2.0,
    ) -> None:
        self._sagemaker = sagemaker
        self.account_id = account_id
        self.region = region
        self.endpoints: dict[str, LocalEndpoint] = {}
        self._existence_ttl = existence_ttl
        self._seen: dict[str, float] = {}

    def add(self, endpoint: LocalEndpoint) -> None:
        self.endpoints[endpoint.name] = endpoint

    @staticmethod
    def matches(environ: dict[str, Any]) -> bool:
        return environ.get("REQUEST_METHOD") == "POST" and bool(
            INVOCATIONS.match(environ.get("PATH_INFO", ""))
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request_id = str(uuid.uuid4())
        try:
            match = INVOCATIONS.match(environ.get("PATH_INFO", ""))
            assert match is not None
            endpoint = self._endpoint(unquote(match["name"]))
            target_model = environ.get("HTTP_X_AMZN_SAGEMAKER_TARGET_MODEL")
            if not target_model:
                raise ValidationError(
                    f"Request {request_id} is missing a target model header: {endpoint.name} is "
                    "a multi-model endpoint; pass TargetModel."
                )
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            answer = endpoint.invoke(
                target_model, body, environ.get("CONTENT_TYPE"), environ.get("HTTP_ACCEPT")
            )
        except RuntimeServiceError as error:
            log.info("InvokeEndpoint %s: %s", error.code, error.message)
            payload = json.dumps({"message": error.message, **error.fields}).encode()
            start_response(
                f"{error.status} {http.client.responses.get(error.status, 'Error')}",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(payload))),
                    ("x-amzn-ErrorType", error.code),
                    ("x-amzn-RequestId", request_id),
                ],
            )
            return [payload]
        start_response(
            "200 OK",
            [
                ("Content-Type", answer.content_type),
                ("Content-Length", str(len(answer.body))),
                ("x-Amzn-Invoked-Production-Variant", endpoint.variant_name),
                ("x-amzn-RequestId", request_id),
            ],
        )
        return [answer.body]

    def _endpoint(self, name: str) -> LocalEndpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None or not self._exists(name):
            raise ValidationError(f"Endpoint {name} of account {self.account_id} not found.")
        return endpoint

    def _exists(self, name: str) -> bool:
        """Whether the control plane (moto) still has the endpoint: a deleted one is gone."""
        seen = self._seen.get(name)
        if seen is not None and time.monotonic() - seen < self._existence_ttl:
            return True
        try:
            self._sagemaker.describe_endpoint(EndpointName=name)
        except Exception as error:
            if getattr(error, "response", {}).get("Error", {}).get("Code") == "ValidationException":
                self._seen.pop(name, None)
                return False
            raise
        self._seen[name] = time.monotonic()
        return True
