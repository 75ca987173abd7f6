"""One multi-model endpoint instance: what SageMaker's hosting platform does in front of
the container (load on first use, unload on 507, load again after a restart)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from urllib.parse import quote

from fleetcast.embedded.endpoint.container import ContainerAnswer, InferenceContainer
from fleetcast.embedded.endpoint.exceptions import (
    ContainerUnavailableError,
    ModelError,
    ModelNotReadyException,
    ServiceUnavailable,
    ValidationError,
)
from fleetcast.embedded.endpoint.model_cache import ModelDiskCache
from fleetcast_contracts.inference import (
    INVOKE_SUFFIX,
    MODELS_PATH,
    TARGET_MODEL_HEADER,
)

log = logging.getLogger("fleetcast.embedded.endpoint")

# How often one invocation loads its model again after the container lost it (restart,
# or unloaded by a concurrent load) before answering ModelNotReadyException.
MAX_LOAD_ATTEMPTS = 4
# How long a load that needs room waits for busy models to become idle (and so
# unloadable) before answering ModelNotReadyException.
LOAD_WAIT_SECONDS = 5.0
MAX_TARGET_MODEL_LENGTH = 1024


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
