"""The parts of SageMaker's EventBridge job state changes fleetcast reads, typed.

Handlers take them through Powertools' parser, with its EventBridge envelope
(``@event_parser(model=..., envelope=envelopes.EventBridgeEnvelope)``) where a function
handles one kind of event, or as one of the whole events below where it handles several
(start-processing: an upload or the end of a processing job), so a malformed event fails
validation saying which field is wrong, instead of a ``KeyError`` deep in a handler.
Every other field of the detail (it mirrors DescribeProcessingJob / DescribeTrainingJob)
is ignored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from aws_lambda_powertools.utilities.parser.models import (
    EventBridgeModel,
    S3EventNotificationEventBridgeModel,
)
from pydantic import BaseModel, ConfigDict, Field


class _Detail(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class ProcessingJobStateChange(_Detail):
    """``detail`` of "SageMaker Processing Job State Change"."""

    job_name: str = Field(alias="ProcessingJobName", min_length=1)
    status: str = Field(alias="ProcessingJobStatus")
    failure_reason: str | None = Field(alias="FailureReason", default=None)


class TrainingResources(_Detail):
    instance_count: int = Field(alias="InstanceCount", ge=1)


class TrainingJobStateChange(_Detail):
    """``detail`` of "SageMaker Training Job State Change"."""

    job_name: str = Field(alias="TrainingJobName", min_length=1)
    status: str = Field(alias="TrainingJobStatus")
    failure_reason: str | None = Field(alias="FailureReason", default=None)
    resources: TrainingResources | None = Field(alias="ResourceConfig", default=None)


class ProcessingJobEnded(EventBridgeModel):
    """A whole "SageMaker Processing Job State Change" event (the rule sends only ours,
    only Completed, Failed and Stopped)."""

    detail_type: Literal["SageMaker Processing Job State Change"] = Field(alias="detail-type")
    detail: ProcessingJobStateChange


class ObjectCreated(S3EventNotificationEventBridgeModel):
    """A whole S3 "Object Created" event, as EventBridge delivers it (the key exactly as
    stored: the parser model keeps it raw, where the data class's ``key`` would
    ``unquote_plus`` it and turn ``a+b.csv`` into ``a b.csv``)."""

    detail_type: Literal["Object Created"] = Field(alias="detail-type")


# What start-processing is sent: told apart by detail-type, so a malformed event of either
# kind is refused naming its own fields.
StartProcessingEvent = Annotated[
    ObjectCreated | ProcessingJobEnded, Field(discriminator="detail_type")
]
