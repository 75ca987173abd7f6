"""Starting the pipeline's SageMaker jobs: what the start-processing and start-training
functions do, given their clients (so tests pass moto's) and typed inputs."""

from __future__ import annotations

import posixpath
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from fleetcast_common import layout, storage
from fleetcast_common.aws import error_code
from fleetcast_common.ids import run_id_for_upload, run_id_from_job_name
from fleetcast_common.jobs import Upload, processing_job_request, training_job_request
from fleetcast_common.settings import ProcessingSettings, TrainingSettings


class Outcome(StrEnum):
    STARTED = "started"
    # The job exists already: this event is a repeat delivery, nothing more to do.
    ALREADY_STARTED = "already_started"
    IGNORED = "ignored"


class JobStart(BaseModel):
    outcome: Outcome
    run_id: str | None = None
    job_name: str | None = None
    reason: str | None = None


def _create_once(create: Any, request: dict[str, Any], name_field: str, run_id: str) -> JobStart:
    """Job names are derived from the upload, so SageMaker's own name uniqueness makes a
    repeated event harmless: ResourceInUse means the job was started before."""
    name = request[name_field]
    try:
        create(**request)
    except Exception as error:
        if error_code(error) == "ResourceInUse":
            return JobStart(outcome=Outcome.ALREADY_STARTED, run_id=run_id, job_name=name)
        raise
    return JobStart(outcome=Outcome.STARTED, run_id=run_id, job_name=name)


def start_processing(
    upload: Upload, settings: ProcessingSettings, sagemaker: Any, s3: Any
) -> JobStart:
    if upload.key.endswith("/") or not upload.key.startswith(layout.INCOMING_PREFIX):
        return JobStart(
            outcome=Outcome.IGNORED, reason=f"not an upload under {layout.INCOMING_PREFIX}"
        )
    run_id = run_id_for_upload(upload.bucket, upload.key, upload.revision, upload.uploaded_at)
    with_history = storage.any_object_under(s3, settings.artifacts_bucket, layout.HISTORY_PREFIX)
    request = processing_job_request(settings, run_id, upload, with_history)
    return _create_once(sagemaker.create_processing_job, request, "ProcessingJobName", run_id)


def start_training(
    processing_job_name: str, settings: TrainingSettings, sagemaker: Any, s3: Any
) -> JobStart:
    run_id = run_id_from_job_name(settings.job_name_prefix, processing_job_name)
    if run_id is None:
        return JobStart(
            outcome=Outcome.IGNORED, reason=f"{processing_job_name} is not a fleetcast job"
        )
    customers = sum(
        1
        for key in storage.keys_under(s3, settings.artifacts_bucket, layout.train_prefix(run_id))
        if layout.customer_id_from_file_name(posixpath.basename(key), layout.CUSTOMER_FILE_SUFFIX)
    )
    if customers == 0:
        return JobStart(
            outcome=Outcome.IGNORED, run_id=run_id, reason="processing wrote no customer files"
        )
    request = training_job_request(settings, run_id, customers)
    return _create_once(sagemaker.create_training_job, request, "TrainingJobName", run_id)
