"""The registry: load-once, the memory budget, the answer cache and its accounting."""

from __future__ import annotations

import dataclasses
import functools
import gc
import logging
import threading
import tracemalloc
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from model_helpers import chosen
from prophet import Prophet
from prophet.serialize import model_to_json

from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_inference.app import build_served_model
from fleetcast_inference.errors import (
    InsufficientMemoryError,
    InvalidArtifactError,
    ModelAlreadyLoadedError,
    ModelNotLoadedError,
)
from fleetcast_inference.registry import LoadedModels, ServedModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*")


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One customer's model archive, as training writes it."""
    day = np.arange(120)
    history = pd.DataFrame(
        {
            "ds": pd.date_range("2022-03-01", periods=120, freq="D"),
            "y": 700
            + 90 * np.sin(2 * np.pi * day / 7)
            + np.random.default_rng(0).normal(0, 12, 120),
        }
    )
    logging.getLogger("cmdstanpy").disabled = True
    model = Prophet(yearly_seasonality=False).fit(history)
    metadata = ModelMetadata(
        **chosen(),
        customer_id="c-1",
        run_id="q0000000902-20240601t120000",
        trained_at=datetime(2024, 6, 1, 12, tzinfo=UTC),
        data_start=date(2022, 3, 1),
        data_end=date(2022, 6, 28),
        rows=120,
        metrics=HoldoutMetrics(
            windows=2, holdout_days=7, smape=0.1, mae=10, naive_smape=0.2, naive_mae=20
        ),
        library_versions={"prophet": "1.5.0"},
    )
    path = tmp_path_factory.mktemp("model") / "c-1.tar.gz"
    write_archive(path, model_to_json(model), metadata)
    return path


@pytest.fixture(scope="module")
def served(archive: Path) -> ServedModel:
    return build_served_model("c-1", "/opt/ml/models/c-1/model", archive)


def sized(model: ServedModel, name: str, memory_bytes: int) -> ServedModel:
    return dataclasses.replace(model, name=name, memory_bytes=memory_bytes)


def payload(size: int) -> bytes:
    return b"x" * size


def test_load_past_the_budget_is_refused_and_changes_nothing(served: ServedModel) -> None:
    # Given a budget that holds two models of 400 bytes
    registry = LoadedModels(budget_bytes=1000)
    registry.load("a", lambda: sized(served, "a", 400))
    registry.load("b", lambda: sized(served, "b", 400))

    # When a third is loaded, then it is refused with 507 and the two stay
    with pytest.raises(InsufficientMemoryError, match="unload one and retry"):
        registry.load("c", lambda: sized(served, "c", 400))
    assert registry.usage().model_bytes == 800
    assert [m.name for m in registry.page(None, 10)[0]] == ["a", "b"]

    # And once one is unloaded the third fits
    registry.unload("a")
    registry.load("c", lambda: sized(served, "c", 400))
    assert registry.usage().model_bytes == 800


def test_loading_a_loaded_name_is_409_and_unknown_names_are_404(served: ServedModel) -> None:
    registry = LoadedModels(budget_bytes=10**6)
    registry.load("a", lambda: sized(served, "a", 10))
    with pytest.raises(ModelAlreadyLoadedError):
        registry.load("a", lambda: sized(served, "a", 10))
    with pytest.raises(ModelNotLoadedError):
        registry.unload("b")
    with pytest.raises(ModelNotLoadedError):
        registry.status("b")
    with pytest.raises(ModelNotLoadedError):
        registry.answer("b", 7, lambda model: b"")


def test_answers_are_cached_per_model_and_period(served: ServedModel) -> None:
    # Given a loaded model and a computation that counts its calls
    registry = LoadedModels(budget_bytes=10**6)
    registry.load("a", lambda: sized(served, "a", 100))
    calls: list[int] = []

    def compute(model: ServedModel) -> bytes:
        calls.append(1)
        return b"answer"

    # When the same period is asked three times and another once
    answers = [registry.answer("a", 7, compute) for _ in range(3)] + [
        registry.answer("a", 8, compute)
    ]

    # Then each period is computed once and the usage counts every call
    assert answers == [b"answer"] * 4
    assert len(calls) == 2
    status = registry.status("a")
    assert (status.invocations, status.cached_answers) == (4, 2)
    assert status.last_used_at is not None


def test_cache_keeps_the_most_recently_used_answers_within_its_share(served: ServedModel) -> None:
    # Given a cache share of 4000 bytes and answers of ~1300 accounted bytes each
    registry = LoadedModels(budget_bytes=16_000, cache_fraction=0.25)
    registry.load("a", lambda: sized(served, "a", 100))
    for period in (1, 2, 3):
        registry.answer("a", period, lambda model: payload(1000))

    # When period 1 is used again and a fourth answer arrives
    registry.answer("a", 1, lambda model: pytest.fail("period 1 should be cached"))
    registry.answer("a", 4, lambda model: payload(1000))

    # Then the least recently used answer (period 2) made room
    usage = registry.usage()
    assert usage.cache_bytes <= 4000
    assert usage.cached_answers == 3
    for period in (1, 4):
        registry.answer("a", period, lambda model: pytest.fail("recent answers stay cached"))
    recomputed: list[int] = []

    def recompute(model: ServedModel) -> bytes:
        recomputed.append(2)
        return payload(1000)

    registry.answer("a", 2, recompute)
    assert recomputed == [2]


def test_a_load_drops_cached_answers_before_refusing(served: ServedModel) -> None:
    # Given a budget nearly full of one model and cached answers
    registry = LoadedModels(budget_bytes=12_000, cache_fraction=0.5)
    registry.load("a", lambda: sized(served, "a", 5000))
    for period in range(1, 6):
        registry.answer("a", period, lambda model: payload(800))
    assert registry.usage().cache_bytes > 2000

    # When a model that fits beside the models (not beside the answers) loads
    registry.load("b", lambda: sized(served, "b", 5000))

    # Then it is loaded, the oldest answers went, and the total stays in budget
    usage = registry.usage()
    assert usage.models == 2
    assert usage.model_bytes + usage.cache_bytes <= 12_000
    assert usage.cached_answers < 5
    registry.answer("a", 5, lambda model: pytest.fail("the newest answer should have stayed"))


def test_unload_drops_the_models_answers(served: ServedModel) -> None:
    registry = LoadedModels(budget_bytes=10**6)
    registry.load("a", lambda: sized(served, "a", 100))
    registry.answer("a", 7, lambda model: payload(10))
    registry.unload("a")
    usage = registry.usage()
    assert (usage.model_bytes, usage.cache_bytes, usage.cached_answers) == (0, 0, 0)


def test_an_answer_for_a_model_unloaded_meanwhile_is_not_cached(served: ServedModel) -> None:
    # Given a computation during which the model is unloaded
    registry = LoadedModels(budget_bytes=10**6)
    registry.load("a", lambda: sized(served, "a", 100))

    def compute(model: ServedModel) -> bytes:
        registry.unload("a")
        return b"late"

    # When it answers, then the caller gets the answer but nothing stays cached
    assert registry.answer("a", 7, compute) == b"late"
    assert registry.usage().cache_bytes == 0


def test_concurrent_loads_of_one_name_build_it_once(served: ServedModel) -> None:
    # Given eight threads loading the same name at once, whose build finishes only once
    # the seven others wait on it
    queued = threading.Semaphore(0)
    registry = LoadedModels(budget_bytes=10**6, on_wait=lambda name: queued.release())
    builds: list[int] = []
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def build() -> ServedModel:
        builds.append(1)
        for _ in range(7):
            assert queued.acquire(timeout=60), "the other loads never waited on this one"
        return sized(served, "a", 100)

    def load() -> None:
        start.wait()
        try:
            registry.load("a", build)
            outcomes.append("loaded")
        except ModelAlreadyLoadedError:
            outcomes.append("409")

    # When they run
    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then one built and loaded it, the others were told it is loaded
    assert len(builds) == 1
    assert sorted(outcomes) == ["409"] * 7 + ["loaded"]
    assert registry.usage().model_bytes == 100


def test_a_failed_load_reaches_its_waiters_and_can_be_retried(served: ServedModel) -> None:
    # Given a load that fails once a second load of the same name waits on it
    waiting = threading.Event()
    registry = LoadedModels(budget_bytes=10**6, on_wait=lambda name: waiting.set())
    building = threading.Event()

    def failing_build() -> ServedModel:
        building.set()
        assert waiting.wait(timeout=60), "the second load never waited on this one"
        raise InvalidArtifactError("model.json is not JSON")

    errors: list[Exception] = []

    def first() -> None:
        try:
            registry.load("a", failing_build)
        except InvalidArtifactError as error:
            errors.append(error)

    thread = threading.Thread(target=first)
    thread.start()
    building.wait()

    # When the waiter's turn comes, then it gets the same error
    with pytest.raises(InvalidArtifactError, match="not JSON"):
        registry.load("a", lambda: pytest.fail("the waiter must not build"))
    thread.join()
    assert len(errors) == 1

    # And a later load builds afresh
    registry.load("a", lambda: sized(served, "a", 100))
    assert registry.status("a").model.name == "a"


def test_pages_go_by_name_and_survive_changes_between_calls(served: ServedModel) -> None:
    # Given five models
    registry = LoadedModels(budget_bytes=10**6)
    for name in ("e", "c", "a", "d", "b"):
        registry.load(name, functools.partial(sized, served, name, 10))

    # When listed two at a time, with "c" unloaded after the first page
    first, after = registry.page(None, 2)
    registry.unload("c")
    second, after_second = registry.page(after, 2)

    # Then pages continue after the last name seen and the last page says so
    assert [m.name for m in first] == ["a", "b"]
    assert [m.name for m in second] == ["d", "e"]
    assert after == "b"
    assert after_second is None


def test_accounted_bytes_cover_what_loading_really_allocates(archive: Path) -> None:
    # Given a registry warmed up by a first load and answer (imports, caches)
    registry = LoadedModels(budget_bytes=2**30)
    url = "/opt/ml/models/{}/model"
    registry.load("warm", lambda: build_served_model("warm", url.format("warm"), archive))
    # (The key the container uses: the period and the quantiles asked for, here none.)
    registry.answer("warm", (7, ()), lambda model: payload(1100))
    names = [f"customer-{i:03d}" for i in range(60)]
    gc.collect()

    # When 60 models load and each caches an answer, under tracemalloc
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in names:
            registry.load(
                name, functools.partial(build_served_model, name, url.format(name), archive)
            )
        gc.collect()
        after_models = tracemalloc.get_traced_memory()[0]
        for name in names:
            registry.answer(name, (7, ()), lambda model: payload(1100))
        gc.collect()
        after_answers = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()

    # Then the accounting covers the real allocations, and overstates them by little
    usage = registry.usage()
    accounted_model = usage.model_bytes / (len(names) + 1)
    real_model = (after_models - before) / len(names)
    accounted_answer = usage.cache_bytes / usage.cached_answers
    real_answer = (after_answers - after_models) / len(names)
    # tracemalloc also counts what other threads of the test session allocate meanwhile
    # (a moto server, say), so "real" can read a little high: allow 5% below it.
    assert 0.95 * real_model <= accounted_model <= 1.15 * real_model
    assert 0.95 * real_answer <= accounted_answer <= 1.15 * real_answer
