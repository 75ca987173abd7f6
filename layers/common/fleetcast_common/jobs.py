"""The SageMaker job requests fleetcast makes, as pure functions of settings and a run.

Container paths, channel and metric definitions come from the containers' contracts
(``fleetcast_contracts``), which the images ship too.
"""

from __future__ import annotations

import posixpath
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_contracts import layout, processing, training
from fleetcast_contracts.images import checked_image_uri
from fleetcast_contracts.stages import PROCESSING, TRAINING


class Upload(BaseModel):
    """One object dropped under ``incoming/`` in the raw bucket."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    key: str
    revision: str  # version id when versioned, else ETag
    size: int
    uploaded_at: datetime
    version_id: str | None = None
    # The ETag the event named: on an unversioned bucket, the copy the job reads is made
    # only if the object still has it.
    etag: str | None = None
    # S3's order of the events of this one key (fleetcast_contracts.ids.sequencer_order).
    sequencer: str | None = None


class UploadRecord(BaseModel):
    """``runs/<run>/upload.json`` (layout.upload_record_key): the upload a run read, as its
    event named it, and the copy the processing job was given."""

    run_id: str
    upload: Upload
    staged_key: str


def _tags(run_id: str) -> list[dict[str, str]]:
    return [{"Key": "fleetcast:run-id", "Value": run_id}]


def processing_job_request(
    settings: ProcessingSettings,
    run_id: str,
    upload: Upload,
    staged_key: str,
    with_history: bool,
    with_metadata: bool = False,
) -> dict[str, Any]:
    """The job reads the run's copy of the upload, ``staged_key``
    (:func:`layout.staged_upload_key`), never the raw key: SageMaker downloads an input to
    a file named after its key (a name of at most 255 bytes, in a path the key's '/', '.'
    and '..' would shape), takes an S3Uri of at most 1024 characters and a container
    argument of at most 256, and would read the key's latest version. ``with_metadata``:
    the metadata store exists (an input prefix must hold an object)."""
    is_metadata = layout.is_metadata_upload(upload.key)
    return {
        PROCESSING.name_field: PROCESSING.job_name(settings.job_name_prefix, run_id),
        "ProcessingResources": {
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": settings.instance_type,
                "VolumeSizeInGB": settings.volume_gb,
            }
        },
        "AppSpecification": {
            "ImageUri": checked_image_uri(settings.image_uri, "ProcessingImageUri"),
            "ContainerEntrypoint": processing.ENTRYPOINT,
            "ContainerArguments": processing.container_arguments(
                settings.frequency,
                settings.training_instance_count,
                processing.METADATA if is_metadata else processing.READINGS,
                posixpath.basename(staged_key),
            ),
        },
        "ProcessingInputs": _processing_inputs(settings, staged_key, with_history, with_metadata),
        "ProcessingOutputConfig": {"Outputs": _processing_outputs(settings, run_id, is_metadata)},
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.max_runtime_seconds},
        # The container reads and writes local folders only; SageMaker moves the data.
        "NetworkConfig": {"EnableNetworkIsolation": True},
        "Environment": {
            "FLEETCAST_RUN_ID": run_id,
            # The upload's real name, for its report (the file it reads is the copy's).
            **processing.source_key_environment(upload.key),
            processing.MAX_UPLOAD_BYTES_ENV: str(settings.max_upload_mb * 2**20),
        },
        "RoleArn": settings.sagemaker_role_arn,
        "Tags": _tags(run_id),
    }


def _processing_inputs(
    settings: ProcessingSettings, staged_key: str, with_history: bool, with_metadata: bool
) -> list[dict[str, Any]]:
    # The staged upload is the one object under its key: nothing is ever written beside it.
    # SageMaker fails a job whose input prefix holds no object, so the history and the
    # metadata inputs are only added once some exist.
    channels = [(processing.INPUT_RAW, staged_key, processing.RAW_INPUT)]
    if with_history:
        channels.append((processing.INPUT_HISTORY, layout.HISTORY_PREFIX, processing.HISTORY_INPUT))
    if with_metadata:
        channels.append(
            (processing.INPUT_METADATA, layout.METADATA_PREFIX, processing.METADATA_INPUT)
        )
    return [
        {
            "InputName": name,
            "S3Input": {
                "S3Uri": f"s3://{settings.artifacts_bucket}/{key}",
                "LocalPath": local,
                "S3DataType": "S3Prefix",
                "S3InputMode": "File",
                "S3DataDistributionType": "FullyReplicated",
            },
        }
        for name, key, local in channels
    ]


def _processing_outputs(
    settings: ProcessingSettings, run_id: str, is_metadata: bool
) -> list[dict[str, Any]]:
    channels = [
        (processing.OUTPUT_TRAIN, processing.TRAIN_OUTPUT, layout.train_prefix(run_id)),
        (processing.OUTPUT_HISTORY, processing.HISTORY_OUTPUT, layout.HISTORY_PREFIX),
        (processing.OUTPUT_REPORT, processing.REPORT_OUTPUT, layout.report_prefix(run_id)),
        (processing.OUTPUT_CALENDARS, processing.CALENDARS_OUTPUT, layout.calendars_prefix(run_id)),
        (processing.OUTPUT_FLEET, processing.FLEET_OUTPUT, layout.fleet_prefix(run_id)),
    ]
    if is_metadata:
        channels.append(
            (processing.OUTPUT_METADATA, processing.METADATA_OUTPUT, layout.METADATA_PREFIX)
        )
    return [
        {
            "OutputName": name,
            "S3Output": {
                "S3Uri": f"s3://{settings.artifacts_bucket}/{prefix}",
                "LocalPath": local,
                "S3UploadMode": "EndOfJob",
            },
        }
        for name, local, prefix in channels
    ]


def training_instance_count(configured: int, parts: int) -> int:
    """No more instances than training parts: with ShardedByS3Key an instance without an
    object would sit idle and still be billed."""
    return max(1, min(configured, parts))


def training_job_request(settings: TrainingSettings, run_id: str, parts: int) -> dict[str, Any]:
    """``parts``: the training input objects processing wrote (contracts.shards)."""
    artifacts = f"s3://{settings.artifacts_bucket}/"
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": settings.max_runtime_seconds}
    if settings.use_spot:
        stopping["MaxWaitTimeInSeconds"] = max(
            settings.max_wait_seconds, settings.max_runtime_seconds
        )
    return {
        TRAINING.name_field: TRAINING.job_name(settings.job_name_prefix, run_id),
        "AlgorithmSpecification": {
            "TrainingImage": checked_image_uri(settings.image_uri, "TrainingImageUri"),
            "TrainingInputMode": "File",
            "MetricDefinitions": training.METRIC_DEFINITIONS,
        },
        "RoleArn": settings.sagemaker_role_arn,
        "HyperParameters": {
            "run_id": run_id,
            "frequency": settings.frequency.value,
            "holdout_days": str(settings.holdout_days),
            "default_holiday_country": settings.default_holiday_country,
            "forecast_export_days": str(settings.forecast_export_days),
            "candidates": settings.model_candidates,
        },
        "InputDataConfig": _training_channels(artifacts, run_id),
        "OutputDataConfig": {"S3OutputPath": artifacts + layout.output_prefix(run_id)},
        "ResourceConfig": {
            "InstanceType": settings.instance_type,
            "InstanceCount": training_instance_count(settings.instance_count, parts),
            "VolumeSizeInGB": settings.volume_gb,
        },
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": settings.use_spot,
        # Each model is checkpointed as it is made, so a spot interruption loses none, and
        # is synced to its final key under models/ (layout.checkpoint_prefix): registration
        # copies nothing.
        "CheckpointConfig": {
            "S3Uri": artifacts + layout.checkpoint_prefix(run_id),
            "LocalPath": training.CHECKPOINT_LOCAL_PATH,
        },
        # Data arrives through channels and leaves through checkpoints: no network needed.
        "EnableNetworkIsolation": True,
        "Tags": _tags(run_id),
    }


def _training_channels(artifacts: str, run_id: str) -> list[dict[str, Any]]:
    """The training job's channels: the run's parts, sharded by customer; each customer's
    holidays and the fleet family's stored teachers, the same for every instance."""
    return [
        {
            "ChannelName": training.TRAIN_CHANNEL,
            "ContentType": "application/x-parquet",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": artifacts + layout.train_prefix(run_id),
                    # A few parts of many customers per instance (contracts.shards):
                    # each instance trains the customers of its parts.
                    "S3DataDistributionType": "ShardedByS3Key",
                }
            },
        },
        {
            # Each customer's holidays: one small file, the same for every instance.
            "ChannelName": training.CALENDARS_CHANNEL,
            "ContentType": "text/csv",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": artifacts + layout.calendars_prefix(run_id),
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
        },
        {
            # The fleet family's teachers beyond the run's customers: one file, the
            # same for every instance (contracts.training.FLEET_CHANNEL).
            "ChannelName": training.FLEET_CHANNEL,
            "ContentType": "application/x-parquet",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": artifacts + layout.fleet_prefix(run_id),
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
        },
    ]
