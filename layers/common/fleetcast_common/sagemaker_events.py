"""The parts of SageMaker's EventBridge job state changes fleetcast reads, typed.

Handlers take them through Powertools' parser with its EventBridge envelope
(``@event_parser(model=..., envelope=envelopes.EventBridgeEnvelope)``), so a malformed
event fails validation saying which field is wrong, instead of a ``KeyError`` deep in a
handler. Every other field of the detail (it mirrors DescribeProcessingJob /
DescribeTrainingJob) is ignored.
"""

from __future__ import annotations

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
