"""Starting the pipeline's SageMaker jobs: what the start-processing and start-training
functions do, given their clients (so tests pass moto's) and typed inputs."""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from fleetcast_common import storage
from fleetcast_common.contracts import layout
from fleetcast_common.contracts.errors import error_code
from fleetcast_common.contracts.ids import (
    processing_job_name,
    run_id_from_job_name,
    staged_file_name,
)
from fleetcast_common.contracts.images import checked_image_uri
from fleetcast_common.jobs import Upload, processing_job_request, training_job_request
from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_common.upload_queue import Lease, UploadQueue, WaitingUpload

_DISPATCH_PASSES = 4
# What DescribeProcessingJob answers for a job that does not exist.
_NO_SUCH_JOB = frozenset({"ValidationException", "ResourceNotFound"})


class Outcome(StrEnum):
    STARTED = "started"
    # The job exists already: this event is a repeat delivery, nothing more to do.
    ALREADY_STARTED = "already_started"
    IGNORED = "ignored"
    # Another upload's processing job is running: this one starts when it ends.
    QUEUED = "queued"
    # A newer upload of the same key reached the queue first: S3 replaced this one.
    SUPERSEDED = "superseded"


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
    upload: Upload,
    settings: ProcessingSettings,
    sagemaker: Any,
    s3: Any,
    queue: UploadQueue,
    now: datetime | None = None,
) -> JobStart:
    """Queue an upload and start the oldest waiting one if no processing job is running
    (see :mod:`fleetcast_common.upload_queue` for why only one runs at a time)."""
    if upload.key.endswith("/") or not upload.key.startswith(layout.INCOMING_PREFIX):
        return JobStart(
            outcome=Outcome.IGNORED, reason=f"not an upload under {layout.INCOMING_PREFIX}"
        )
    arrival = queue.arrive(upload, now or datetime.now(UTC))
    run_id = arrival.run_id
    job_name = processing_job_name(settings.job_name_prefix, run_id)
    if _processing_job_status(sagemaker, job_name) is not None:
        return JobStart(outcome=Outcome.ALREADY_STARTED, run_id=run_id, job_name=job_name)
    # (A repeated event of an upload that was queued before the newer one arrived finds
    # it waiting: it keeps its place, and the newer one follows it.)
    if arrival.superseded_by is not None and not queue.is_waiting(run_id):
        return JobStart(
            outcome=Outcome.SUPERSEDED,
            run_id=run_id,
            reason=(
                f"not processed: {upload.key!r} was uploaded again (S3 sequencer "
                f"{upload.sequencer} is older than run {arrival.superseded_by}'s), and the "
                "newer object replaced this one"
            ),
        )
    queue.add(WaitingUpload(run_id=run_id, upload=upload))
    started = dispatch_uploads(settings, sagemaker, s3, queue, now)
    if started is not None and started.run_id == run_id:
        return started
    lease = queue.lease()
    behind = f"; {lease.job_name} is running" if lease and lease.run_id != run_id else ""
    return JobStart(
        outcome=Outcome.QUEUED,
        run_id=run_id,
        job_name=job_name,
        reason=f"waits for the uploads before it{behind}",
    )


def processing_ended(
    job_name: str,
    settings: ProcessingSettings,
    sagemaker: Any,
    s3: Any,
    queue: UploadQueue,
    now: datetime | None = None,
) -> JobStart:
    """A processing job ended (Completed, Failed or Stopped): free its lease and start the
    next waiting upload, if any."""
    run_id = run_id_from_job_name(settings.job_name_prefix, job_name)
    if run_id is None:
        return JobStart(outcome=Outcome.IGNORED, reason=f"{job_name} is not a fleetcast job")
    queue.release_lease(run_id)
    started = dispatch_uploads(settings, sagemaker, s3, queue, now)
    return started or JobStart(outcome=Outcome.IGNORED, reason="no upload is waiting")


def dispatch_uploads(
    settings: ProcessingSettings,
    sagemaker: Any,
    s3: Any,
    queue: UploadQueue,
    now: datetime | None = None,
) -> JobStart | None:
    """Start the oldest waiting upload's job if it can take the lease; None if it cannot
    (another job runs, or another function took the lease first) or nothing waits."""
    now = now or datetime.now(UTC)
    # Before any lease: without an image the upload waits in the queue (and this event
    # fails, saying so, into the dead-letter queue) instead of holding the lease.
    checked_image_uri(settings.image_uri, "ProcessingImageUri")
    # Each pass either starts a job, stops, or clears one lease whose job had already
    # ended; a few passes are more than any real sequence needs.
    for _ in range(_DISPATCH_PASSES):
        waiting = queue.oldest_waiting()
        if waiting is None:
            return None
        held = queue.lease()
        if held is None or held.run_id != waiting.run_id:
            if held is not None and not _is_stale(held, sagemaker, now):
                return None
            lease = _lease_for(settings, waiting, now)
            if not queue.take_lease(lease, replacing=held):
                return None
            # An older upload whose event was handled at the same moment may have joined
            # the queue since it was read: it goes first, and takes the lease over.
            while (oldest := queue.oldest_waiting()) and oldest.run_id < waiting.run_id:
                earlier = _lease_for(settings, oldest, now)
                if not queue.take_lease(earlier, replacing=lease):
                    return None
                waiting, lease = oldest, earlier
        with_history = storage.any_object_under(
            s3, settings.artifacts_bucket, layout.HISTORY_PREFIX
        )
        with_metadata = storage.any_object_under(
            s3, settings.artifacts_bucket, layout.METADATA_PREFIX
        )
        staged_key = _stage_upload(s3, settings, waiting)
        request = processing_job_request(
            settings, waiting.run_id, waiting.upload, with_history, staged_key, with_metadata
        )
        try:
            started = _create_once(
                sagemaker.create_processing_job, request, "ProcessingJobName", waiting.run_id
            )
        except Exception:
            # The upload keeps its place; the next event (a retry of this one) tries again.
            queue.release_lease(waiting.run_id)
            raise
        queue.remove(waiting.run_id)
        if started.outcome is Outcome.STARTED:
            return started
        # Started before (a repeated event, or a function that died before removing the
        # upload): if that job has ended, its lease must not hold up the queue.
        current = queue.lease()
        if current is None or not _is_stale(current, sagemaker, now):
            return started
        queue.release_lease(current.run_id)
    return None


def _stage_upload(s3: Any, settings: ProcessingSettings, waiting: WaitingUpload) -> str | None:
    """Copy (server side) an upload whose key SageMaker cannot take as it is to a short,
    safe name in the run's folder, and return that key; None when no copy is needed.

    SageMaker downloads an S3 input to a local file named after the key's last part, which
    Linux limits to 255 bytes, and limits an input's S3Uri to 1024 characters and a
    container argument to 256; S3 keys go up to 1024 bytes. A copy of a given version is
    also exactly the upload that was queued.
    """
    upload = waiting.upload
    file_name = staged_file_name(upload.key)
    if file_name is None:
        return None
    staged_key = layout.staged_upload_key(waiting.run_id, file_name)
    source = {"Bucket": upload.bucket, "Key": upload.key}
    if upload.version_id:
        source["VersionId"] = upload.version_id
    s3.copy(source, settings.artifacts_bucket, staged_key)
    return staged_key


def _lease_for(settings: ProcessingSettings, waiting: WaitingUpload, now: datetime) -> Lease:
    job_name = processing_job_name(settings.job_name_prefix, waiting.run_id)
    return Lease(run_id=waiting.run_id, job_name=job_name, taken_at=now)


def _is_stale(lease: Lease, sagemaker: Any, now: datetime) -> bool:
    return lease.is_stale(_processing_job_status(sagemaker, lease.job_name), now)


def _processing_job_status(sagemaker: Any, job_name: str) -> str | None:
    """The job's ProcessingJobStatus; None when there is no such job."""
    try:
        return str(
            sagemaker.describe_processing_job(ProcessingJobName=job_name)["ProcessingJobStatus"]
        )
    except Exception as error:
        if error_code(error) in _NO_SUCH_JOB:
            return None
        raise


def start_training(
    processing_job_name: str, settings: TrainingSettings, sagemaker: Any, s3: Any
) -> JobStart:
    run_id = run_id_from_job_name(settings.job_name_prefix, processing_job_name)
    if run_id is None:
        return JobStart(
            outcome=Outcome.IGNORED, reason=f"{processing_job_name} is not a fleetcast job"
        )
    parts = sum(
        1
        for key in storage.keys_under(s3, settings.artifacts_bucket, layout.train_prefix(run_id))
        if layout.is_training_input(posixpath.basename(key))
    )
    if parts == 0:
        return JobStart(
            outcome=Outcome.IGNORED, run_id=run_id, reason="processing wrote no training input"
        )
    request = training_job_request(settings, run_id, parts)
    return _create_once(sagemaker.create_training_job, request, "TrainingJobName", run_id)
