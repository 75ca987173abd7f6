"""The model registry against DynamoDB (moto server), with the table built from template.yaml."""

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from fleetcast_common.contracts.model_archive import HoldoutMetrics
from fleetcast_common.registration import passes_quality_gate
from fleetcast_common.registry import (
    RUN_PARTITION_PREFIX,
    RUN_RECORD,
    ModelRecord,
    ModelRegistry,
    ModelStatus,
)

ROOT = Path(__file__).resolve().parents[2]
METRICS = HoldoutMetrics(holdout_days=7, smape=0.05, mae=10.0, naive_smape=0.08, naive_mae=15.0)


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
    }
    values.update(changes)
    return ModelRecord(**values)


OLD, NEW = "20261129t100000-aaaaaaaaaa", "20261129t110000-bbbbbbbbbb"


def test_versions_go_up_in_run_order(registry: ModelRegistry) -> None:
    assert registry.promote(record(OLD)) == 1
    assert registry.promote(record(NEW)) == 2
    live = registry.live("42")
    assert live is not None and live.run_id == NEW and live.model_version == 2
    assert live.metrics == METRICS


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


def test_quality_gate_compares_with_seasonal_naive() -> None:
    assert passes_quality_gate(METRICS, ratio=1.5)
    worse = METRICS.model_copy(update={"smape": 0.2})
    assert not passes_quality_gate(worse, ratio=1.5)
    perfect_naive = METRICS.model_copy(update={"naive_smape": 0.0, "smape": 0.01})
    assert not passes_quality_gate(perfect_naive, ratio=1.5)


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
