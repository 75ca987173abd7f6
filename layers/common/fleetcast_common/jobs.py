"""The SageMaker job requests fleetcast makes, as pure functions of settings and a run.

Container paths here are the contract of containers/processing and containers/training
(their ``contract.py``); they are repeated as literals because a Lambda function does not
ship the containers' code.
"""

from __future__ import annotations

import posixpath
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from fleetcast_common import layout
from fleetcast_common.ids import processing_job_name, training_job_name
from fleetcast_common.settings import ProcessingSettings, TrainingSettings

PROCESSING_ENTRYPOINT = ["python3", "-m", "fleetcast_processing"]
RAW_INPUT_PATH = "/opt/ml/processing/input/raw"
HISTORY_INPUT_PATH = "/opt/ml/processing/input/history"
TRAIN_OUTPUT_PATH = "/opt/ml/processing/output/train"
HISTORY_OUTPUT_PATH = "/opt/ml/processing/output/history"
REPORT_OUTPUT_PATH = "/opt/ml/processing/output/report"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
TRAIN_CHANNEL = "train"

# What the training container prints (see containers/training); SageMaker scrapes these
# into the job's metrics and CloudWatch.
TRAINING_METRIC_DEFINITIONS = [
    {"Name": "models_trained", "Regex": r"fleetcast_models_trained=([0-9]+);"},
    {"Name": "models_failed", "Regex": r"fleetcast_models_failed=([0-9]+);"},
    {"Name": "median_smape", "Regex": r"fleetcast_median_smape=([0-9.eE+-]+);"},
    {"Name": "median_naive_smape", "Regex": r"fleetcast_median_naive_smape=([0-9.eE+-]+);"},
]


class Upload(BaseModel):
    """One object dropped under ``incoming/`` in the raw bucket."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    key: str
    revision: str  # version id when versioned, else ETag
    size: int
    uploaded_at: datetime


def _tags(run_id: str) -> list[dict[str, str]]:
    return [{"Key": "fleetcast:run-id", "Value": run_id}]


def processing_job_request(
    settings: ProcessingSettings, run_id: str, upload: Upload, with_history: bool
) -> dict[str, Any]:
    artifacts = f"s3://{settings.artifacts_bucket}/"
    inputs: list[dict[str, Any]] = [
        {
            "InputName": "raw",
            "S3Input": {
                "S3Uri": f"s3://{upload.bucket}/{upload.key}",
                "LocalPath": RAW_INPUT_PATH,
                "S3DataType": "S3Prefix",
                "S3InputMode": "File",
                "S3DataDistributionType": "FullyReplicated",
            },
        }
    ]
    if with_history:
        # SageMaker fails a job whose input prefix holds no object, so the history input
        # is only added once some history exists.
        inputs.append(
            {
                "InputName": "history",
                "S3Input": {
                    "S3Uri": artifacts + layout.HISTORY_PREFIX,
                    "LocalPath": HISTORY_INPUT_PATH,
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                    "S3DataDistributionType": "FullyReplicated",
                },
            }
        )

    def output(name: str, local: str, prefix: str) -> dict[str, Any]:
        return {
            "OutputName": name,
            "S3Output": {
                "S3Uri": artifacts + prefix,
                "LocalPath": local,
                "S3UploadMode": "EndOfJob",
            },
        }

    return {
        "ProcessingJobName": processing_job_name(settings.job_name_prefix, run_id),
        "ProcessingResources": {
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": settings.instance_type,
                "VolumeSizeInGB": settings.volume_gb,
            }
        },
        "AppSpecification": {
            "ImageUri": settings.image_uri,
            "ContainerEntrypoint": PROCESSING_ENTRYPOINT,
            "ContainerArguments": [
                "--frequency",
                settings.frequency,
                # The raw input is an S3 prefix; naming the file keeps 'a.csv' from also
                # reading 'a.csv.gz'.
                "--source-name",
                posixpath.basename(upload.key),
            ],
        },
        "ProcessingInputs": inputs,
        "ProcessingOutputConfig": {
            "Outputs": [
                output("train", TRAIN_OUTPUT_PATH, layout.train_prefix(run_id)),
                output("history", HISTORY_OUTPUT_PATH, layout.HISTORY_PREFIX),
                output("report", REPORT_OUTPUT_PATH, layout.report_prefix(run_id)),
            ]
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": settings.max_runtime_seconds},
        # The container reads and writes local folders only; SageMaker moves the data.
        "NetworkConfig": {"EnableNetworkIsolation": True},
        "Environment": {"FLEETCAST_RUN_ID": run_id, "FLEETCAST_SOURCE_KEY": upload.key[:256]},
        "RoleArn": settings.sagemaker_role_arn,
        "Tags": _tags(run_id),
    }


def training_instance_count(configured: int, customers: int) -> int:
    """No more instances than customer files: with ShardedByS3Key an instance without an
    object would sit idle and still be billed."""
    return max(1, min(configured, customers))


def training_job_request(settings: TrainingSettings, run_id: str, customers: int) -> dict[str, Any]:
    artifacts = f"s3://{settings.artifacts_bucket}/"
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": settings.max_runtime_seconds}
    if settings.use_spot:
        stopping["MaxWaitTimeInSeconds"] = max(
            settings.max_wait_seconds, settings.max_runtime_seconds
        )
    return {
        "TrainingJobName": training_job_name(settings.job_name_prefix, run_id),
        "AlgorithmSpecification": {
            "TrainingImage": settings.image_uri,
            "TrainingInputMode": "File",
            "MetricDefinitions": TRAINING_METRIC_DEFINITIONS,
        },
        "RoleArn": settings.sagemaker_role_arn,
        "HyperParameters": {
            "run_id": run_id,
            "frequency": settings.frequency,
            "holdout_days": str(settings.holdout_days),
        },
        "InputDataConfig": [
            {
                "ChannelName": TRAIN_CHANNEL,
                "ContentType": "text/csv",
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": artifacts + layout.train_prefix(run_id),
                        # One object per customer: each instance trains its share of them.
                        "S3DataDistributionType": "ShardedByS3Key",
                    }
                },
            }
        ],
        "OutputDataConfig": {"S3OutputPath": artifacts + layout.output_prefix(run_id)},
        "ResourceConfig": {
            "InstanceType": settings.instance_type,
            "InstanceCount": training_instance_count(settings.instance_count, customers),
            "VolumeSizeInGB": settings.volume_gb,
        },
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": settings.use_spot,
        # Each model is checkpointed as it is made, so a spot interruption loses none, and
        # is synced to its final key under models/ (layout.checkpoint_prefix): registration
        # copies nothing.
        "CheckpointConfig": {
            "S3Uri": artifacts + layout.checkpoint_prefix(run_id),
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        },
        # Data arrives through channels and leaves through checkpoints: no network needed.
        "EnableNetworkIsolation": True,
        "Tags": _tags(run_id),
    }
