"""The model registry against DynamoDB (moto server), with the table built from template.yaml."""

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from model_helpers import chosen
from registry_tables import create_registry_table

from fleetcast.embedded.gateway import Gateway
from fleetcast_common.registry import (
    RUN_PARTITION_PREFIX,
    RUN_RECORD,
    ChunkCounts,
    ModelRecord,
    ModelRegistry,
    ModelStatus,
)
from fleetcast_contracts.model_archive import HoldoutMetrics

ROOT = Path(__file__).resolve().parents[2]
METRICS = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.05, mae=10.0, naive_smape=0.08, naive_mae=15.0
)


@pytest.fixture
def registry(registry_table: Any) -> ModelRegistry:
    # Given the registry table exactly as template.yaml declares it
    return ModelRegistry(registry_table)


def record(run_id: str, customer_id: str = "42", **changes: Any) -> ModelRecord:
    values: dict[str, Any] = {
        "customer_id": customer_id,
        "run_id": run_id,
        "status": ModelStatus.LIVE,
        "target_model": f"{customer_id}/{run_id}.tar.gz",
        "model_s3_uri": f"s3://artifacts/models/{customer_id}/{run_id}.tar.gz",
        "training_job": f"fleetcast-t-{run_id}",
        "trained_at": datetime(2026, 11, 29, tzinfo=UTC),
        "data_start": date(2022, 1, 1),
        "data_end": date(2023, 12, 31),
        "rows": 730,
        "metrics": METRICS,
        **chosen(),
    }
    values.update(changes)
    return ModelRecord(**values)


OLD, NEW = "q0000000907-20261129t100000", "q0000000908-20261129t110000"


def test_versions_go_up_in_run_order(registry: ModelRegistry) -> None:
    assert registry.promote(record(OLD)) == 1
    assert registry.promote(record(NEW)) == 2
    live = registry.live("42")
    assert live is not None and live.run_id == NEW and live.model_version == 2
    assert live.metrics == METRICS


def test_a_cold_start_without_metrics_is_live_and_read_back(registry: ModelRegistry) -> None:
    # Given a cold start: no backtest, so no metrics (the table stores no empty attribute)
    assert registry.promote(record(OLD, rows=3, metrics=None, model_kind="cold_start")) == 1
    # When the API reads the customer's live model; then it is the cold start, unjudged
    live = registry.live("42")
    assert live is not None and live.model_kind == "cold_start" and live.metrics is None


def test_an_older_run_finishing_late_never_replaces_a_newer_model(registry: ModelRegistry) -> None:
    # Given the newer run registered first
    assert registry.promote(record(NEW)) == 1
    # When the older run's training finishes afterwards
    assert registry.promote(record(OLD)) is None
    # Then the newer model stays live
    live = registry.live("42")
    assert live is not None and live.run_id == NEW and live.model_version == 1


def test_a_repeated_event_registers_once(registry: ModelRegistry) -> None:
    assert registry.promote(record(OLD)) == 1
    assert registry.promote(record(OLD)) is None
    live = registry.live("42")
    assert live is not None and live.model_version == 1


def test_a_held_back_model_is_noted_on_the_live_record_only_while_it_is_newer(
    registry: ModelRegistry,
) -> None:
    # Given no live model, a rejected model has nothing to be noted on
    rejected = record(NEW, status=ModelStatus.REJECTED, data_end=date(2024, 1, 31))
    assert not registry.hold_back(rejected, "worse")
    assert registry.live("42") is None
    # When the older run is live and the newer one is held back
    assert registry.promote(record(OLD)) == 1
    assert registry.hold_back(rejected, "worse")
    # Then the live record says so, once
    live = registry.live("42")
    assert live is not None and live.held_back is not None
    assert (live.held_back.run_id, live.held_back.data_end) == (NEW, date(2024, 1, 31))
    assert not registry.hold_back(rejected, "worse")
    # And a model of the live run itself is never noted as held back
    assert not registry.hold_back(record(OLD, status=ModelStatus.REJECTED), "worse")
    # When a newer model goes live, the note goes
    assert registry.promote(record("q0000000910-20261129t120000")) == 2
    live = registry.live("42")
    assert live is not None and live.held_back is None


def test_every_model_is_recorded_once_per_run(registry: ModelRegistry) -> None:
    registry.record(record(OLD, model_version=1))
    registry.record(record(OLD, model_version=1))
    registry.record(record(NEW, status=ModelStatus.REJECTED))
    stored = registry.model("42", OLD)
    assert stored is not None and stored.status is ModelStatus.LIVE and stored.model_version == 1
    assert [(m.run_id, m.status) for m in registry.models("42")] == [
        (OLD, ModelStatus.LIVE),
        (NEW, ModelStatus.REJECTED),
    ]


def test_a_run_record_without_its_fields_is_a_run_not_started(
    registry: ModelRegistry, registry_table: Any
) -> None:
    # Given a run record holding only its key (seen on the local stack before start_run)
    run_id = "q0000000009-20261201t000000"
    registry_table.put_item(
        Item={"customer_id": RUN_PARTITION_PREFIX + run_id, "record": RUN_RECORD}
    )
    # Then reading it says the run has not started registering, rather than failing
    assert registry.run(run_id) is None
    # And once started, it reads whole
    registry.start_run(run_id, "job", chunks_total=2, lost=0)
    started = registry.run(run_id)
    assert started is not None and started.chunks_total == 2 and not started.complete


@pytest.fixture
def stack_registry(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModelRegistry]:
    """The registry on the local stack's moto, whose writes are atomic as DynamoDB's are
    (fleetcast.embedded.moto_patches.dynamodb.dynamodb_writes_one_at_a_time); plain moto's are not."""
    gateway = Gateway()
    gateway.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", gateway.url)
    try:
        yield ModelRegistry(create_registry_table())
    finally:
        gateway.stop()


CHUNK = ChunkCounts(
    trained=10,
    registered=7,
    rejected=2,
    superseded=1,
    failed_training=1,
    lost=1,
    models_decided=10,
    models_live=7,
)


def test_chunks_finishing_together_add_up_on_the_run_record_once_each(
    stack_registry: ModelRegistry,
) -> None:
    registry = stack_registry
    # Given a run of 40 chunks, one customer lost before any chunk
    run_id = "q0000000010-20261201t000000"
    registry.start_run(run_id, "job", chunks_total=40, lost=1)
    # When eight threads finish them at once, every chunk delivered twice
    deliveries = [f"{number:05d}" for number in range(40) for _ in range(2)]
    with ThreadPoolExecutor(8) as pool:
        first = list(
            pool.map(lambda c: registry.finish_chunk(run_id, c, CHUNK, {}, int(c)), deliveries)
        )
    # Then each chunk counts once, in the run's totals read from its record alone
    assert sum(first) == 40
    run = registry.run(run_id)
    assert run is not None and run.chunks_done == 40
    assert (run.trained, run.registered, run.rejected, run.superseded) == (400, 280, 80, 40)
    assert (run.failed_training, run.lost, run.models_decided, run.models_live) == (
        40,
        41,
        400,
        280,
    )
    assert registry.mark_registered_if_complete(run_id)
    assert not registry.finish_chunk(run_id, "00000", CHUNK, {}, 0)
    # and a late redelivery changes nothing
    again = registry.run(run_id)
    assert again is not None and (again.chunks_done, again.trained) == (40, 400)


def test_promotions_share_transactions_and_a_stale_read_fails_alone(
    registry: ModelRegistry,
) -> None:
    # Given customer "a" live on the old run
    assert registry.promote(record(OLD, "a")) == 1

    # When 150 customers are promoted on the new run at once (two transactions), "a" on a
    # stale read (nothing live)
    others = [f"c{index:03d}" for index in range(149)]
    versions = registry.promote_many(
        [(record(NEW, "a"), None), *((record(NEW, customer), None) for customer in others)]
    )

    # Then "a" is refused (read again and decide again), every other one goes live
    assert versions == [None] + [1] * len(others)
    live = registry.live("a")
    assert live is not None and (live.run_id, live.model_version) == (OLD, 1)
    for customer in (others[0], others[99], others[-1]):
        live = registry.live(customer)
        assert live is not None and (live.run_id, live.model_version) == (NEW, 1)
