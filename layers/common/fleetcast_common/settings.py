"""Each function's configuration: one typed object (pydantic-settings), read from the
environment that template.yaml (or the local stack) sets.

Handlers read theirs when first needed (a cached ``settings()`` function), never at
import: importing a handler (``make openapi``, tests) needs no environment.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Self, TypeVar

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleetcast_contracts.families import DEFAULT_CANDIDATES
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.horizons import MAX_EXPORT_DAYS
from fleetcast_contracts.training import CANDIDATES_PATTERN


class _FromEnvironment(BaseSettings):
    # Each field's alias is its variable's exact name; values reach the validators as
    # the strings the template sets (no JSON decoding of list or dict fields).
    model_config = SettingsConfigDict(
        frozen=True,
        populate_by_name=True,
        extra="ignore",
        case_sensitive=True,
        enable_decoding=False,
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Read from the process environment, or from ``environ`` alone."""
        return cls() if environ is None else cls.model_validate(dict(environ))


_Settings = TypeVar("_Settings", bound=_FromEnvironment)


def read_on_first_use(model: type[_Settings]) -> Callable[[], _Settings]:
    """A handler's ``settings()``: reads ``model`` from the environment the first time it
    is called and returns the same object after (``settings.cache_clear()`` forgets it)."""
    return functools.cache(model.from_env)


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
    frequency: Frequency = Field(alias="MODEL_FREQUENCY", default=Frequency.DAILY)
    # The API's bounds for a processing job's MaxRuntimeInSeconds (botocore: 1 to 777600).
    max_runtime_seconds: int = Field(
        alias="PROCESSING_MAX_RUNTIME_SECONDS", default=3600, ge=1, le=777600
    )
    # Largest upload a processing job accepts, decompressed (its FLEETCAST_MAX_UPLOAD_BYTES).
    max_upload_mb: int = Field(alias="PROCESSING_MAX_UPLOAD_MB", default=10240, ge=1)
    # The training job's instances: processing writes its input in a multiple of them.
    training_instance_count: int = Field(alias="TRAINING_INSTANCE_COUNT", default=2, ge=1, le=100)


class TrainingSettings(PipelineSettings):
    image_uri: str = Field(alias="TRAINING_IMAGE_URI")
    instance_type: str = Field(alias="TRAINING_INSTANCE_TYPE", default="ml.c5.xlarge")
    instance_count: int = Field(alias="TRAINING_INSTANCE_COUNT", default=2, ge=1, le=100)
    volume_gb: int = Field(alias="TRAINING_VOLUME_GB", default=30, ge=1)
    use_spot: bool = Field(alias="TRAINING_USE_SPOT", default=True)
    max_runtime_seconds: int = Field(alias="TRAINING_MAX_RUNTIME_SECONDS", default=3600, ge=60)
    max_wait_seconds: int = Field(alias="TRAINING_MAX_WAIT_SECONDS", default=7200, ge=60)
    frequency: Frequency = Field(alias="MODEL_FREQUENCY", default=Frequency.DAILY)
    holdout_days: int = Field(alias="HOLDOUT_DAYS", default=7, ge=1, le=90)
    # Holidays of customers without metadata (docs/holidays.md); "" for none.
    default_holiday_country: str = Field(
        alias="DEFAULT_HOLIDAY_COUNTRY", default="", pattern=r"^([A-Z]{2,3})?$"
    )
    forecast_export_days: int = Field(
        alias="FORECAST_EXPORT_DAYS", default=30, ge=0, le=MAX_EXPORT_DAYS
    )
    # The model families each customer may be served (docs/model-families.md): the job's
    # ``candidates``. Seasonal naive is scored whether listed or not.
    model_candidates: str = Field(
        alias="MODEL_CANDIDATES", default=DEFAULT_CANDIDATES, pattern=CANDIDATES_PATTERN
    )


class RegistrationSettings(PipelineSettings):
    """The register-chunk function: what every pipeline function reads (the quality gate
    has no setting: fleetcast_contracts.quality_gate)."""


class RegistrationCoordinatorSettings(PipelineSettings):
    """The register-models function: it plans a run's chunks and queues them."""

    chunk_queue_url: str = Field(alias="REGISTRATION_QUEUE_URL", min_length=1)
    # Customers per chunk: one chunk is one register-chunk invocation's work.
    chunk_size: int = Field(alias="REGISTRATION_CHUNK_SIZE", default=250, ge=1, le=2000)
