"""Registering a finished training job's models: what the register-models function does.

For each customer the training job trained: copy its archive to a path of its own under
the multi-model endpoint's prefix (never overwritten), record it, and promote it to live
unless it is clearly worse than seasonal-naive or a newer run is live already.
"""

from __future__ import annotations

import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field

from fleetcast_common import layout, storage
from fleetcast_common.contracts.training import is_manifest_name
from fleetcast_common.ids import validate_customer_id
from fleetcast_common.model_archive import HoldoutMetrics
from fleetcast_common.registry import ModelRecord, ModelRegistry, ModelStatus
from fleetcast_common.training_manifest import CustomerOutcome, CustomerResult, TrainingManifest

# Registration is I/O bound: a copy and three small writes per customer.
PARALLEL_REQUESTS = 16


class CustomerRegistration(BaseModel):
    customer_id: str
    status: ModelStatus | None
    model_version: int | None = None
    target_model: str | None = None
    repeated: bool = False
    note: str | None = None


class RegistrationReport(BaseModel):
    run_id: str
    training_job: str
    hosts_reporting: int
    registered: int = Field(description="customers whose new model went live")
    rejected: int
    superseded: int
    repeated: int = Field(description="already registered by an earlier delivery of this event")
    failed_training: int
    failures: list[CustomerResult]
    customers: list[CustomerRegistration]


def passes_quality_gate(metrics: HoldoutMetrics, ratio: float) -> bool:
    """Clearly worse than seasonal-naive = holdout sMAPE above ``ratio`` times naive's."""
    if metrics.naive_smape == 0:
        return metrics.smape == 0
    return metrics.smape <= ratio * metrics.naive_smape


def read_manifests(s3: Any, bucket: str, run_id: str) -> list[TrainingManifest]:
    prefix = layout.checkpoint_prefix(run_id)
    manifests = []
    for key in storage.keys_under(s3, bucket, prefix):
        name = posixpath.basename(key)
        if is_manifest_name(name):
            manifests.append(
                TrainingManifest.model_validate_json(storage.read_text(s3, bucket, key))
            )
    return manifests


def _register_one(
    result: CustomerResult,
    run_id: str,
    training_job: str,
    bucket: str,
    ratio: float,
    s3: Any,
    registry: ModelRegistry,
) -> CustomerRegistration:
    customer_id = validate_customer_id(result.customer_id)
    metadata = result.metadata
    if metadata is None:
        return CustomerRegistration(
            customer_id=customer_id, status=None, note="manifest has no metadata"
        )
    target = layout.target_model(customer_id, run_id)
    model_key = layout.model_key(customer_id, run_id)
    storage.copy(
        s3,
        bucket,
        layout.checkpoint_prefix(run_id) + f"{customer_id}{layout.MODEL_ARCHIVE_SUFFIX}",
        model_key,
    )
    record = ModelRecord(
        customer_id=customer_id,
        run_id=run_id,
        status=ModelStatus.LIVE,
        target_model=target,
        model_s3_uri=f"s3://{bucket}/{model_key}",
        training_job=training_job,
        trained_at=metadata.trained_at,
        data_start=metadata.data_start,
        data_end=metadata.data_end,
        rows=metadata.rows,
        metrics=metadata.metrics,
    )
    gate_note = None
    if not passes_quality_gate(metadata.metrics, ratio):
        gate_note = (
            f"holdout sMAPE {metadata.metrics.smape:.4f} is over {ratio} x seasonal-naive's "
            f"{metadata.metrics.naive_smape:.4f}"
        )
        # The gate keeps a worse model from replacing a live one; a customer without a
        # live model is better served by this one than by none.
        if registry.live(customer_id) is not None:
            if repeated := _decided_before(registry, customer_id, run_id, target):
                return repeated
            registry.record(record.model_copy(update={"status": ModelStatus.REJECTED}))
            return CustomerRegistration(
                customer_id=customer_id,
                status=ModelStatus.REJECTED,
                target_model=target,
                note=gate_note,
            )
    version = registry.promote(record)
    if version is not None:
        registry.record(record.model_copy(update={"model_version": version}))
        return CustomerRegistration(
            customer_id=customer_id,
            status=ModelStatus.LIVE,
            model_version=version,
            target_model=target,
            note=gate_note and f"first model, live despite the gate: {gate_note}",
        )
    live = registry.live(customer_id)
    if live is not None and live.run_id == run_id:
        # A repeated event: this run went live before. Write its record again in case the
        # earlier delivery stopped between the two writes.
        registry.record(record.model_copy(update={"model_version": live.model_version}))
        return CustomerRegistration(
            customer_id=customer_id,
            status=None,
            model_version=live.model_version,
            target_model=target,
            repeated=True,
            note="already registered by an earlier delivery",
        )
    if repeated := _decided_before(registry, customer_id, run_id, target):
        return repeated
    registry.record(record.model_copy(update={"status": ModelStatus.SUPERSEDED}))
    return CustomerRegistration(
        customer_id=customer_id,
        status=ModelStatus.SUPERSEDED,
        target_model=target,
        note=f"run {live.run_id if live else '?'} is newer and live",
    )


def _decided_before(
    registry: ModelRegistry, customer_id: str, run_id: str, target: str
) -> CustomerRegistration | None:
    """A repeated event, once a newer run went live: the run's record (written last, so
    present only once its decision was made) stands as it was decided the first time."""
    earlier = registry.model(customer_id, run_id)
    if earlier is None:
        return None
    return CustomerRegistration(
        customer_id=customer_id,
        status=None,
        model_version=earlier.model_version,
        target_model=target,
        repeated=True,
        note=f"already registered by an earlier delivery ({earlier.status})",
    )


def register_models(
    run_id: str,
    training_job: str,
    bucket: str,
    quality_gate_ratio: float,
    s3: Any,
    registry: ModelRegistry,
) -> RegistrationReport:
    manifests = read_manifests(s3, bucket, run_id)
    results = [r for m in manifests for r in m.customers]
    trained = [
        r for r in results if r.outcome in (CustomerOutcome.TRAINED, CustomerOutcome.RESUMED)
    ]
    failures = [r for r in results if r.outcome is CustomerOutcome.FAILED]
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        outcomes = list(
            pool.map(
                lambda r: _register_one(
                    r, run_id, training_job, bucket, quality_gate_ratio, s3, registry
                ),
                trained,
            )
        )

    def count(status: ModelStatus) -> int:
        return sum(1 for o in outcomes if o.status is status)

    return RegistrationReport(
        run_id=run_id,
        training_job=training_job,
        hosts_reporting=len(manifests),
        registered=count(ModelStatus.LIVE),
        rejected=count(ModelStatus.REJECTED),
        superseded=count(ModelStatus.SUPERSEDED),
        repeated=sum(1 for o in outcomes if o.repeated),
        failed_training=len(failures),
        failures=failures,
        customers=outcomes,
    )
