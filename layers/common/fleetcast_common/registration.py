"""Registering a finished training job's models: what the register-models function does.

For each customer the training job trained: copy its archive to a path of its own under
the multi-model endpoint's prefix (never overwritten), record it, and promote it to live
unless it is clearly worse than seasonal-naive or a newer run is live already.

A job that failed (a crashed or killed instance, a spot interruption, a timeout) is
registered too: its finished instances' manifests say what they trained, and an archive
of an instance that left no manifest is used only once it has been re-read and checked
(it is this customer's and this run's). Every customer that was sent to the job and got
neither is *lost*, with the reason; the report, with the lost customers, is kept as the
run's registration record (:func:`registration_key`).
"""

from __future__ import annotations

import json
import posixpath
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field

from fleetcast_common import layout, storage
from fleetcast_common.contracts.errors import error_code
from fleetcast_common.contracts.training import is_manifest_name
from fleetcast_common.ids import validate_customer_id
from fleetcast_common.model_archive import HoldoutMetrics, read_archive
from fleetcast_common.registry import ModelRecord, ModelRegistry, ModelStatus
from fleetcast_common.training_manifest import CustomerOutcome, CustomerResult, TrainingManifest

# Registration is I/O bound: a copy and three small writes per customer.
PARALLEL_REQUESTS = 16
REGISTRATION_FILE = "registration.json"


def registration_key(run_id: str) -> str:
    """The run's registration record: the last :class:`RegistrationReport` written."""
    return layout.run_prefix(run_id) + REGISTRATION_FILE


class CustomerRegistration(BaseModel):
    customer_id: str
    status: ModelStatus | None
    model_version: int | None = None
    target_model: str | None = None
    repeated: bool = False
    recovered: bool = Field(
        default=False,
        description="from an archive no manifest listed, re-read and checked first",
    )
    note: str | None = None


class LostCustomer(BaseModel):
    """A customer sent to the training job that has no model from it and no manifest
    entry saying why: its instance failed, or its archive is unusable."""

    customer_id: str
    reason: str


class RegistrationReport(BaseModel):
    run_id: str
    training_job: str
    hosts_reporting: int
    registered: int = Field(description="customers whose new model went live")
    rejected: int
    superseded: int
    repeated: int = Field(description="already registered by an earlier delivery of this event")
    failed_training: int
    recovered: int = Field(
        default=0, description="models taken from archives no manifest listed (a failed job)"
    )
    job_failure: str | None = Field(
        default=None, description="why the training job failed or stopped, if it did"
    )
    failures: list[CustomerResult]
    lost: list[LostCustomer] = Field(default_factory=list)
    customers: list[CustomerRegistration]


def passes_quality_gate(metrics: HoldoutMetrics, ratio: float) -> bool:
    """Clearly worse than seasonal-naive = holdout sMAPE above ``ratio`` times naive's."""
    if metrics.naive_smape == 0:
        return metrics.smape == 0
    return metrics.smape <= ratio * metrics.naive_smape


def read_manifests(s3: Any, bucket: str, run_id: str) -> list[TrainingManifest]:
    return _read_manifests(
        s3, bucket, list(storage.keys_under(s3, bucket, layout.checkpoint_prefix(run_id)))
    )


def _read_manifests(s3: Any, bucket: str, keys: list[str]) -> list[TrainingManifest]:
    manifests = []
    for key in keys:
        name = posixpath.basename(key)
        if is_manifest_name(name):
            manifests.append(
                TrainingManifest.model_validate_json(storage.read_text(s3, bucket, key))
            )
    return manifests


def _customers_in(keys: list[str], suffix: str) -> dict[str, str]:
    """``{customer_id: key}`` of the objects named ``{customer_id}{suffix}``."""
    found = {}
    for key in keys:
        customer_id = layout.customer_id_from_file_name(posixpath.basename(key), suffix)
        if customer_id is not None:
            found[customer_id] = key
    return found


def _checked_archive(
    s3: Any, bucket: str, key: str, customer_id: str, run_id: str
) -> CustomerResult | LostCustomer:
    """An archive no manifest lists, as a trained result once it reads back whole and is
    this customer's model from this run; else why it cannot be used."""
    try:
        model_json, metadata = read_archive(storage.read_bytes(s3, bucket, key))
        if not isinstance(json.loads(model_json), dict):
            raise ValueError("its model is not a JSON object")
    except ValueError as error:
        return LostCustomer(
            customer_id=customer_id, reason=f"its checkpointed archive is unusable: {error}"
        )
    if (metadata.customer_id, metadata.run_id) != (customer_id, run_id):
        return LostCustomer(
            customer_id=customer_id,
            reason=(
                f"its checkpointed archive is customer {metadata.customer_id!r}'s model "
                f"from run {metadata.run_id}"
            ),
        )
    return CustomerResult(
        customer_id=customer_id,
        outcome=CustomerOutcome.TRAINED,
        rows=metadata.rows,
        metrics=metadata.metrics,
        metadata=metadata,
    )


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
    job_failure: str | None = None,
) -> RegistrationReport:
    """Register what the job trained; ``job_failure`` is why it failed or stopped (None
    when it completed) and becomes the reason of the customers it lost."""
    checkpoint_keys = list(storage.keys_under(s3, bucket, layout.checkpoint_prefix(run_id)))
    manifests = _read_manifests(s3, bucket, checkpoint_keys)
    results = [r for m in manifests for r in m.customers]
    reported = {r.customer_id for r in results}
    unlisted = {
        customer_id: key
        for customer_id, key in _customers_in(checkpoint_keys, layout.MODEL_ARCHIVE_SUFFIX).items()
        if customer_id not in reported
    }
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        checked = list(
            pool.map(
                lambda item: _checked_archive(s3, bucket, item[1], item[0], run_id),
                sorted(unlisted.items()),
            )
        )
    recovered = [c for c in checked if isinstance(c, CustomerResult)]
    lost = [c for c in checked if isinstance(c, LostCustomer)]
    sent = _customers_in(
        list(storage.keys_under(s3, bucket, layout.train_prefix(run_id))),
        layout.CUSTOMER_FILE_SUFFIX,
    )
    why = (
        f"the training job failed before its model was written: {job_failure}"
        if job_failure
        else "its training instance left no manifest"
    )
    lost += [
        LostCustomer(customer_id=customer_id, reason=why)
        for customer_id in sorted(sent.keys() - reported - unlisted.keys())
    ]

    trained = [
        r for r in results if r.outcome in (CustomerOutcome.TRAINED, CustomerOutcome.RESUMED)
    ]
    failures = [r for r in results if r.outcome is CustomerOutcome.FAILED]
    recovered_ids = {r.customer_id for r in recovered}
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        outcomes = [
            o.model_copy(update={"recovered": o.customer_id in recovered_ids})
            for o in pool.map(
                lambda r: _register_one(
                    r, run_id, training_job, bucket, quality_gate_ratio, s3, registry
                ),
                trained + recovered,
            )
        ]

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
        recovered=len(recovered),
        job_failure=job_failure,
        failures=failures,
        lost=sorted(lost, key=lambda c: c.customer_id),
        customers=outcomes,
    )


def write_registration_record(s3: Any, bucket: str, report: RegistrationReport) -> None:
    """Kept for ``fleetcast status``: a repeated event rewrites it with the same decisions."""
    storage.write_text(
        s3, bucket, registration_key(report.run_id), report.model_dump_json(indent=1)
    )


def read_registration_record(s3: Any, bucket: str, run_id: str) -> RegistrationReport | None:
    try:
        text = storage.read_text(s3, bucket, registration_key(run_id))
    except Exception as error:
        if error_code(error) in ("NoSuchKey", "404"):
            return None
        raise
    return RegistrationReport.model_validate_json(text)
