"""The models this container holds, within a memory budget, and the answers it caches.

Thread-safe: one lock guards the bookkeeping and is held only for dictionary updates;
reading and compiling an artifact, and computing a forecast, happen outside it. Each
model name loads once: a second load of a name already loading waits for the first and
then gets its outcome (409 once loaded, or the same error).

Memory accounting is measured (see :mod:`fleetcast_inference.memory`): each model counts
the bytes its compiled form retains plus a fixed entry overhead, each cached answer its
payload plus a fixed entry overhead. Cached answers live in one least-recently-used
cache capped at a fraction of the budget; a load that needs room drops the oldest
answers first (they can be recomputed, a model cannot), and answers 507 only when the
models alone would pass the budget.
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from fleetcast_forecasters.forecast import Forecaster
from fleetcast_inference.errors import (
    InferenceError,
    InsufficientMemoryError,
    ModelAlreadyLoadedError,
    ModelNotLoadedError,
)

# Calibrated with tracemalloc (tests/unit/test_inference_registry.py checks both):
# a registry entry (usage record, dictionary slots, cached-request set) and a cached
# answer's key and dictionary slot.
MODEL_ENTRY_OVERHEAD_BYTES = 1024
CACHE_ENTRY_OVERHEAD_BYTES = 256
DEFAULT_CACHE_FRACTION = 0.25


@dataclass(frozen=True, slots=True, eq=False)
class ServedModel:
    """A loaded model: its forecaster and what the container reports about it."""

    name: str
    url: str
    customer_id: str
    model_version: str
    model_kind: str
    frequency: str
    data_start: str
    data_end: str
    forecaster: Forecaster = field(repr=False)
    memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class LoadedModelStatus:
    """What GET /models/{name} reports of one loaded model."""

    model: ServedModel
    loaded_at: float
    last_used_at: float | None
    invocations: int
    cached_answers: int


@dataclass(slots=True, eq=False)
class _Entry:
    model: ServedModel
    loaded_at: float
    last_used_at: float | None = None
    invocations: int = 0
    cached_requests: set[Hashable] = field(default_factory=set)


@dataclass(eq=False)
class _PendingLoad:
    done: threading.Event = field(default_factory=threading.Event)
    error: InferenceError | None = None


@dataclass(frozen=True)
class MemoryUsage:
    budget_bytes: int
    model_bytes: int
    cache_bytes: int
    models: int
    cached_answers: int


class LoadedModels:
    """The models this container holds in memory, within its budget (not the model
    registry in DynamoDB, which says which model is live)."""

    def __init__(
        self,
        budget_bytes: int,
        cache_fraction: float = DEFAULT_CACHE_FRACTION,
        clock: Callable[[], float] = time.time,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self._budget = budget_bytes
        # Called with the name when a load starts waiting for the one in progress, and is
        # bound to get its outcome: the signal a caller waits on to know a load queued.
        self._on_wait = on_wait
        self._cache_limit = int(budget_bytes * cache_fraction)
        self._clock = clock
        self._lock = threading.Lock()
        self._models: dict[str, _Entry] = {}
        self._loading: dict[str, _PendingLoad] = {}
        self._answers: OrderedDict[tuple[str, Hashable], bytes] = OrderedDict()
        self._model_bytes = 0
        self._cache_bytes = 0

    def load(self, name: str, build: Callable[[], ServedModel]) -> ServedModel:
        """Build and hold the model called ``name``, once.

        ``build`` runs outside the lock and returns the model with ``memory_bytes`` set.
        """
        while True:
            with self._lock:
                if name in self._models:
                    raise ModelAlreadyLoadedError(f"model {name!r} is already loaded")
                pending = self._loading.get(name)
                if pending is None:
                    pending = self._loading[name] = _PendingLoad()
                    break
            if self._on_wait is not None:
                self._on_wait(name)
            pending.done.wait()
            if pending.error is not None:
                raise type(pending.error)(str(pending.error))
            # The other load succeeded; the next turn answers 409 unless it was
            # unloaded meanwhile, in which case this one loads it again.
        try:
            model = build()
            with self._lock:
                self._make_room(name, model.memory_bytes)
                self._models[name] = _Entry(model, loaded_at=self._clock())
                self._model_bytes += model.memory_bytes
            return model
        except InferenceError as error:
            pending.error = error
            raise
        except Exception as error:
            pending.error = InferenceError(f"loading model {name!r} failed: {error}")
            raise
        finally:
            with self._lock:
                del self._loading[name]
            pending.done.set()

    def unload(self, name: str) -> ServedModel:
        with self._lock:
            entry = self._models.pop(name, None)
            if entry is None:
                raise ModelNotLoadedError(f"model {name!r} is not loaded")
            self._model_bytes -= entry.model.memory_bytes
            for request in entry.cached_requests:
                self._forget((name, request))
        return entry.model

    def status(self, name: str) -> LoadedModelStatus:
        with self._lock:
            entry = self._models.get(name)
            if entry is None:
                raise ModelNotLoadedError(f"model {name!r} is not loaded")
            return LoadedModelStatus(
                entry.model,
                entry.loaded_at,
                entry.last_used_at,
                entry.invocations,
                len(entry.cached_requests),
            )

    def page(self, after: str | None, limit: int) -> tuple[list[ServedModel], str | None]:
        """Up to ``limit`` models by name, starting after ``after``; and the name to
        continue after, or None when this page is the last. Names, not positions, keep
        pages consistent while models load and unload between calls."""
        with self._lock:
            names = sorted(self._models)
            start = 0 if after is None else bisect.bisect_right(names, after)
            chosen = names[start : start + limit]
            models = [self._models[name].model for name in chosen]
        more = start + limit < len(names)
        return models, (chosen[-1] if more and chosen else None)

    def answer(
        self, name: str, request: Hashable, compute: Callable[[ServedModel], bytes]
    ) -> bytes:
        """The answer to ``request`` (what the invoke asked: its period, quantiles) from
        model ``name``: cached, else computed and cached.

        ``compute`` must be deterministic: concurrent first requests may both run it.
        """
        key = (name, request)
        with self._lock:
            entry = self._models.get(name)
            if entry is None:
                raise ModelNotLoadedError(f"model {name!r} is not loaded")
            entry.last_used_at = self._clock()
            entry.invocations += 1
            cached = self._answers.get(key)
            if cached is not None:
                self._answers.move_to_end(key)
                return cached
            model = entry.model
        payload = compute(model)
        with self._lock:
            entry = self._models.get(name)
            if entry is not None and entry.model is model and key not in self._answers:
                self._remember(entry, key, payload)
        return payload

    def usage(self) -> MemoryUsage:
        with self._lock:
            return MemoryUsage(
                self._budget,
                self._model_bytes,
                self._cache_bytes,
                len(self._models),
                len(self._answers),
            )

    def _make_room(self, name: str, needed: int) -> None:
        if self._model_bytes + needed > self._budget:
            raise InsufficientMemoryError(
                f"loading model {name!r} needs {needed} bytes but the loaded models hold "
                f"{self._model_bytes} of the {self._budget}-byte budget; unload one and retry"
            )
        while self._answers and self._model_bytes + self._cache_bytes + needed > self._budget:
            self._forget(next(iter(self._answers)))

    def _remember(self, entry: _Entry, key: tuple[str, Hashable], payload: bytes) -> None:
        size = _answer_bytes(payload)
        room = min(self._cache_limit, self._budget - self._model_bytes)
        if size > room:
            return
        while self._cache_bytes + size > room:
            self._forget(next(iter(self._answers)))
        self._answers[key] = payload
        self._cache_bytes += size
        entry.cached_requests.add(key[1])

    def _forget(self, key: tuple[str, Hashable]) -> None:
        payload = self._answers.pop(key)
        self._cache_bytes -= _answer_bytes(payload)
        entry = self._models.get(key[0])
        if entry is not None:
            entry.cached_requests.discard(key[1])


def _answer_bytes(payload: bytes) -> int:
    return sys.getsizeof(payload) + CACHE_ENTRY_OVERHEAD_BYTES
