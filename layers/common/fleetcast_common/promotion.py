"""Each trained customer's decision in a registration chunk: made live, rejected by the
quality gate, superseded by a newer live run, or already decided by an earlier delivery.

Promotion is a conditional write of the customer's LIVE record (``ModelRegistry.
promote_many``): a promotion decided on a read that another run or delivery changed
meanwhile is refused, read again and decided again.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from fleetcast_common.registry import (
    CustomerState,
    LiveModel,
    ModelRecord,
    ModelRegistry,
    ModelStatus,
)
from fleetcast_contracts import layout
from fleetcast_contracts.ids import validate_customer_id
from fleetcast_contracts.quality_gate import passes_quality_gate, rejection_reason
from fleetcast_contracts.training_manifest import CustomerResult

# A decision lost to a concurrent one is read again and retried this often.
PROMOTION_ATTEMPTS = 4


class CustomerRegistration(BaseModel):
    customer_id: str
    status: ModelStatus | None
    model_version: int | None = None
    target_model: str | None = None
    repeated: bool = False
    # For a repeated one: what the earlier delivery decided.
    earlier_status: ModelStatus | None = None
    recovered: bool = Field(
        default=False,
        description="from an archive no manifest listed, re-read and checked first",
    )
    note: str | None = None


def model_record(
    result: CustomerResult, run_id: str, training_job: str, bucket: str
) -> ModelRecord:
    customer_id = validate_customer_id(result.customer_id)
    metadata = result.metadata
    assert metadata is not None
    return ModelRecord(
        customer_id=customer_id,
        run_id=run_id,
        status=ModelStatus.LIVE,
        target_model=layout.target_model(customer_id, run_id),
        model_s3_uri=f"s3://{bucket}/{layout.model_key(customer_id, run_id)}",
        training_job=training_job,
        trained_at=metadata.trained_at,
        data_start=metadata.data_start,
        data_end=metadata.data_end,
        rows=metadata.rows,
        metrics=metadata.metrics,
        model_kind=metadata.model_kind,
        backtest=metadata.backtest,
        frequency=metadata.frequency,
    )


class _Promotion(BaseModel):
    """A customer whose model goes live unless its LIVE record changed since it was read."""

    record: ModelRecord
    live: LiveModel | None


_Decision = tuple[CustomerRegistration, ModelRecord | None]


def _decide(record: ModelRecord, state: CustomerState) -> _Decision | _Promotion:
    """The customer's registration and the MODEL record to write (batched by the caller),
    or the promotion to try. None as the registration's status means it was decided by an
    earlier delivery."""
    customer_id, run_id, target = record.customer_id, record.run_id, record.target_model
    metrics = record.metrics
    if state.decided is not None:
        return CustomerRegistration(
            customer_id=customer_id,
            status=None,
            model_version=state.decided.model_version,
            target_model=target,
            repeated=True,
            earlier_status=state.decided.status,
            note=f"already registered by an earlier delivery ({state.decided.status})",
        ), None
    live = state.live
    if live is not None and live.run_id >= run_id:
        if live.run_id == run_id:
            # Promoted by an earlier delivery that stopped before its MODEL records.
            repaired = record.model_copy(update={"model_version": live.model_version})
            return CustomerRegistration(
                customer_id=customer_id,
                status=None,
                model_version=live.model_version,
                target_model=target,
                repeated=True,
                earlier_status=ModelStatus.LIVE,
                note="already registered by an earlier delivery",
            ), repaired
        return CustomerRegistration(
            customer_id=customer_id,
            status=ModelStatus.SUPERSEDED,
            target_model=target,
            note=f"run {live.run_id} is newer and live",
        ), record.model_copy(update={"status": ModelStatus.SUPERSEDED})
    if metrics is not None and not passes_quality_gate(metrics):
        # A first model follows the same rule: one worse than seasonal naive is not made
        # live (training always offers one that passes: naive is a candidate).
        return CustomerRegistration(
            customer_id=customer_id,
            status=ModelStatus.REJECTED,
            target_model=target,
            note=rejection_reason(metrics),
        ), record.model_copy(update={"status": ModelStatus.REJECTED})
    return _Promotion(record=record, live=live)


def decide_all(
    records: list[ModelRecord],
    states: dict[str, CustomerState],
    registry: ModelRegistry,
    run_id: str,
) -> list[_Decision]:
    """Every customer's decision, the promotions written by conditional Puts of their LIVE
    records, a hundred to a transaction; those whose LIVE record changed meanwhile (another
    run, or another delivery) are read again and decided again."""
    decided: dict[str, _Decision] = {}
    pending = records
    for _ in range(PROMOTION_ATTEMPTS):
        promotions: list[_Promotion] = []
        for record in pending:
            outcome = _decide(record, states[record.customer_id])
            if isinstance(outcome, _Promotion):
                promotions.append(outcome)
            else:
                decided[record.customer_id] = outcome
        versions = registry.promote_many([(p.record, p.live) for p in promotions])
        pending = []
        for promotion, version in zip(promotions, versions, strict=True):
            record = promotion.record
            if version is None:
                pending.append(record)
                continue
            decided[record.customer_id] = (
                CustomerRegistration(
                    customer_id=record.customer_id,
                    status=ModelStatus.LIVE,
                    model_version=version,
                    target_model=record.target_model,
                ),
                record.model_copy(update={"model_version": version}),
            )
        if not pending:
            return [decided[record.customer_id] for record in records]
        states.update(registry.states([record.customer_id for record in pending], run_id))
    raise RuntimeError(
        f"customer {pending[0].customer_id} (and {len(pending) - 1} more): the live model "
        f"kept changing during {PROMOTION_ATTEMPTS} attempts to register run {run_id}"
    )
