"""Each function's configuration: one typed object, read from the environment that
template.yaml (or the local stack) sets, validated when the handler starts."""

from __future__ import annotations

import os
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field


class _FromEnvironment(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Self:
        return cls.model_validate(dict(os.environ if environ is None else environ))


class PipelineSettings(_FromEnvironment):
    raw_bucket: str = Field(alias="RAW_BUCKET")
    artifacts_bucket: str = Field(alias="ARTIFACTS_BUCKET")
    registry_table: str = Field(alias="REGISTRY_TABLE")
    job_name_prefix: str = Field(alias="JOB_NAME_PREFIX", pattern=r"^[a-z][a-z0-9-]{1,20}$")
    sagemaker_role_arn: str = Field(alias="SAGEMAKER_ROLE_ARN")


class ProcessingSettings(PipelineSettings):
    image_uri: str = Field(alias="PROCESSING_IMAGE_URI")
    upload_queue_table: str = Field(alias="UPLOAD_QUEUE_TABLE")
    instance_type: str = Field(alias="PROCESSING_INSTANCE_TYPE", default="ml.m5.xlarge")
    volume_gb: int = Field(alias="PROCESSING_VOLUME_GB", default=30, ge=1)
    frequency: Literal["D", "H"] = Field(alias="MODEL_FREQUENCY", default="D")
    max_runtime_seconds: int = Field(alias="PROCESSING_MAX_RUNTIME_SECONDS", default=3600)


class TrainingSettings(PipelineSettings):
    image_uri: str = Field(alias="TRAINING_IMAGE_URI")
    instance_type: str = Field(alias="TRAINING_INSTANCE_TYPE", default="ml.c5.xlarge")
    instance_count: int = Field(alias="TRAINING_INSTANCE_COUNT", default=2, ge=1, le=100)
    volume_gb: int = Field(alias="TRAINING_VOLUME_GB", default=30, ge=1)
    use_spot: bool = Field(alias="TRAINING_USE_SPOT", default=True)
    max_runtime_seconds: int = Field(alias="TRAINING_MAX_RUNTIME_SECONDS", default=3600, ge=60)
    max_wait_seconds: int = Field(alias="TRAINING_MAX_WAIT_SECONDS", default=7200, ge=60)
    frequency: Literal["D", "H"] = Field(alias="MODEL_FREQUENCY", default="D")
    holdout_days: int = Field(alias="HOLDOUT_DAYS", default=7, ge=1, le=90)


class RegistrationSettings(PipelineSettings):
    # A model whose holdout sMAPE exceeds this multiple of seasonal-naive's is recorded
    # but does not go live.
    quality_gate_ratio: float = Field(alias="QUALITY_GATE_RATIO", default=1.5, gt=0)


class RegistrationCoordinatorSettings(PipelineSettings):
    """The register-models function: it plans a run's chunks and queues them."""

    chunk_queue_url: str = Field(alias="REGISTRATION_QUEUE_URL", min_length=1)
    # Customers per chunk: one chunk is one register-chunk invocation's work.
    chunk_size: int = Field(alias="REGISTRATION_CHUNK_SIZE", default=250, ge=1, le=2000)
