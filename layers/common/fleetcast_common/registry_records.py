"""The model registry's records, as the table stores them and as code reads them (the
table itself is :mod:`fleetcast_common.registry`'s): a customer's ``MODEL#{run_id}``
records and its ``LIVE`` record, and how their values become DynamoDB's and back."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, field_validator

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import Backtest, HoldoutMetrics

# The fields a record keeps as their JSON text (:func:`stored`), not as DynamoDB maps,
# and the models they are read back as.
STORED_AS_TEXT: dict[str, type[BaseModel]] = {"metrics": HoldoutMetrics, "backtest": Backtest}


class ModelStatus(StrEnum):
    LIVE = "live"  # promoted when registered (it may since have been replaced)
    REJECTED = "rejected"  # clearly worse than seasonal-naive on its holdout
    SUPERSEDED = "superseded"  # a newer run had already gone live


class TrainedModel(BaseModel):
    """What the registry knows of any trained model."""

    customer_id: str
    run_id: str
    target_model: str
    model_s3_uri: str
    training_job: str
    trained_at: datetime
    data_start: date
    data_end: date
    rows: int
    # None for a cold start: too short a history to backtest (the gate cannot judge it).
    # (The table leaves a None out of the record: read back, it is absent.)
    metrics: HoldoutMetrics | None = None
    # The family that made the model and how it was chosen.
    model_kind: str
    backtest: Backtest
    # The model's frequency: its periods are days or hours. A record written before it was
    # kept (2026-12-06) reads as daily, which is wrong only for a ModelFrequency=H stack's.
    frequency: Annotated[Frequency, BeforeValidator(Frequency.parse)] = Frequency.DAILY

    @field_validator(*STORED_AS_TEXT, mode="before")
    @classmethod
    def _from_stored_text(cls, value: Any, info: ValidationInfo) -> Any:
        """The table keeps the metrics and the backtest as their JSON text (:func:`stored`),
        and every record is written so; code that builds a record gives them as models."""
        if not isinstance(value, str):
            return value
        return STORED_AS_TEXT[str(info.field_name)].model_validate_json(value)


class ModelRecord(TrainedModel):
    """``MODEL#{run_id}``: one trained model and what became of it."""

    status: ModelStatus
    model_version: int | None = None


class HeldBackModel(BaseModel):
    """On the LIVE record: the customer's newest model, from a run newer than the live
    model's, that was not made live, and why. Kept there so that the one read which finds
    the live model also finds that it predates the customer's latest data; a promotion
    writes the whole LIVE record anew, which drops it."""

    run_id: str
    status: ModelStatus
    trained_at: datetime
    data_end: date
    reason: str = Field(description="why it was not made live")


class LiveModel(TrainedModel):
    """``LIVE``: the model the API serves for the customer."""

    model_version: int
    updated_at: datetime
    held_back: HeldBackModel | None = None
    # The archive of the model this one replaced: what the customer can be rolled back to,
    # so kept (its own predecessor's archive is retired when this one went live).
    previous_model_s3_uri: str | None = None


def stored(model: TrainedModel, **dump: Any) -> dict[str, Any]:
    """``model`` as the table stores it: its JSON-able fields, the metrics and the backtest
    as their JSON text. Both are read whole and never queried in (what a user queries is the
    accuracy export: docs/export.md), and as nested maps they were most of a record's cost:
    about a hundred attributes for boto3 and DynamoDB to serialize and parse on every write
    and read (register-chunk's CPU) and, on the local stack, moto's memory: a record took
    13 KB of it with both as maps, 9.0 KB with the metrics alone (twelve numbers, each an
    attribute of its own) and 6.4 KB with neither."""
    values = model.model_dump(mode="json", **dump)
    for name in STORED_AS_TEXT:
        if values.get(name) is not None:
            values[name] = getattr(model, name).model_dump_json()
    return values


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    """JSON-able values to what DynamoDB stores (floats as Decimal)."""
    if isinstance(values, dict):
        return {k: to_item(v) for k, v in values.items() if v is not None}
    if isinstance(values, list):
        return [to_item(v) for v in values]
    if isinstance(values, float):
        return Decimal(repr(values))
    return values


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    if isinstance(item, dict):
        return {k: from_item(v) for k, v in item.items()}
    if isinstance(item, list):
        return [from_item(v) for v in item]
    if isinstance(item, Decimal):
        return int(item) if item == item.to_integral_value() else float(item)
    return item
