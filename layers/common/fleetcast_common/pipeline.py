"""Starting the pipeline's SageMaker jobs: what the start-processing and start-training
functions do, given their clients (so tests pass moto's) and typed inputs."""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from boto3.s3.transfer import TransferConfig
from pydantic import BaseModel

from fleetcast_common import storage
from fleetcast_common.jobs import (
    Upload,
    UploadRecord,
    processing_job_request,
    training_job_request,
)
from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_common.upload_queue import Lease, NotProcessed, UploadQueue, WaitingUpload
from fleetcast_contracts import layout
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.images import checked_image_uri
from fleetcast_contracts.object_keys import shown_key
from fleetcast_contracts.stages import PROCESSING, TRAINING

_DISPATCH_PASSES = 4
# What DescribeProcessingJob answers for a job that does not exist.
_NO_SUCH_JOB = frozenset({"ValidationException", "ResourceNotFound"})
# How S3 answers a copy (or the managed copy's HeadObject) of an object that no longer
# holds the bytes the event named: another object replaced it (the ETag condition failed;
# HeadObject has no body, so its code is the status), or it was deleted.
_REPLACED = frozenset({"PreconditionFailed", "412"})
_GONE = frozenset({"NoSuchKey", "NoSuchVersion", "404", "NotFound"})
# Every upload is copied into its run's folder (server side, no bytes through the
# function). UploadPartCopy in 256 MiB parts copies the largest upload processing takes
# (ProcessingMaxUploadMB, 10 GiB) in 40 requests, 10 at a time, well within the function's
# Timeout; an upload up to one part is a single CopyObject.
STAGING_PART_BYTES = 256 * 2**20
STAGING_CONCURRENCY = 10
STAGING_TRANSFER = TransferConfig(
    multipart_threshold=STAGING_PART_BYTES,
    multipart_chunksize=STAGING_PART_BYTES,
    max_concurrency=STAGING_CONCURRENCY,
)


class Outcome(StrEnum):
    STARTED = "started"
    # The job exists already: this event is a repeat delivery, nothing more to do.
    ALREADY_STARTED = "already_started"
    IGNORED = "ignored"
    # Another upload's processing job is running: this one starts when it ends.
    QUEUED = "queued"
    # A newer upload of the same key reached the queue first: S3 replaced this one.
    SUPERSEDED = "superseded"
    # When its turn came the object no longer held the bytes its event named (replaced in
    # an unversioned bucket, or deleted): not processed, and said so.
    REPLACED = "replaced"


class JobStart(BaseModel):
    outcome: Outcome
    run_id: str | None = None
    job_name: str | None = None
    reason: str | None = None
    # Uploads this call took off the queue without processing them (REPLACED), each to be
    # reported: they may be other uploads than the one whose event this is.
    not_processed: list[JobStart] = []


class UploadReplacedError(Exception):
    """The object an upload's event named cannot be copied any more."""


class _Dispatched(BaseModel):
    started: JobStart | None = None
    not_processed: list[JobStart] = []


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
    job_name = PROCESSING.job_name(settings.job_name_prefix, run_id)
    if _processing_job_status(sagemaker, job_name) is not None:
        return JobStart(outcome=Outcome.ALREADY_STARTED, run_id=run_id, job_name=job_name)
    # (A repeated event of an upload that was queued before the newer one arrived finds
    # it waiting: it keeps its place, and the newer one follows it.)
    if arrival.superseded_by is not None and not queue.is_waiting(run_id):
        superseded = JobStart(
            outcome=Outcome.SUPERSEDED,
            run_id=run_id,
            reason=(
                f"not processed: {upload.key!r} was uploaded again (S3 sequencer "
                f"{upload.sequencer} is older than run {arrival.superseded_by}'s), and the "
                "newer object replaced this one"
            ),
        )
        _record_not_processed(queue, upload, superseded, now, arrival.superseded_by)
        return superseded
    queue.add(WaitingUpload(run_id=run_id, upload=upload))
    dispatched = dispatch_uploads(settings, sagemaker, s3, queue, now)
    started, others = dispatched.started, dispatched.not_processed
    own = [skipped for skipped in others if skipped.run_id == run_id]
    others = [skipped for skipped in others if skipped.run_id != run_id]
    if own:
        return own[0].model_copy(update={"not_processed": others})
    if started is not None and started.run_id == run_id:
        return started.model_copy(update={"not_processed": others})
    lease = queue.lease()
    behind = f"; {lease.job_name} is running" if lease and lease.run_id != run_id else ""
    return JobStart(
        outcome=Outcome.QUEUED,
        run_id=run_id,
        job_name=job_name,
        reason=f"waits for the uploads before it{behind}",
        not_processed=others,
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
    run_id = PROCESSING.run_id_of(settings.job_name_prefix, job_name)
    if run_id is None:
        return JobStart(outcome=Outcome.IGNORED, reason=f"{job_name} is not a fleetcast job")
    queue.release_lease(run_id)
    dispatched = dispatch_uploads(settings, sagemaker, s3, queue, now)
    started = dispatched.started or JobStart(outcome=Outcome.IGNORED, reason="no upload is waiting")
    return started.model_copy(update={"not_processed": dispatched.not_processed})


def dispatch_uploads(
    settings: ProcessingSettings,
    sagemaker: Any,
    s3: Any,
    queue: UploadQueue,
    now: datetime | None = None,
) -> _Dispatched:
    """Start the oldest waiting upload's job if it can take the lease (``started`` None if
    it cannot: another job runs, or another function took the lease first, or nothing
    waits); uploads whose object was replaced are taken off the queue on the way, in
    ``not_processed``."""
    now = now or datetime.now(UTC)
    not_processed: list[JobStart] = []
    # Before any lease: without an image the upload waits in the queue (and this event
    # fails, saying so, into the dead-letter queue) instead of holding the lease.
    checked_image_uri(settings.image_uri, "ProcessingImageUri")
    # Each pass either starts a job, stops, or clears one lease whose job had already
    # ended; a few passes are more than any real sequence needs. A replaced upload takes
    # no pass: however many there are, the queue moves on to one that can run.
    passes = 0
    while passes < _DISPATCH_PASSES:
        waiting = queue.oldest_waiting()
        if waiting is None:
            break
        held = queue.lease()
        if held is None or held.run_id != waiting.run_id:
            if held is not None and not _is_stale(held, sagemaker, now):
                break
            lease = _lease_for(settings, waiting, now)
            if not queue.take_lease(lease, replacing=held):
                break
            # An older upload whose event was handled at the same moment may have joined
            # the queue since it was read: it goes first, and takes the lease over.
            while (oldest := queue.oldest_waiting()) and oldest.run_id < waiting.run_id:
                earlier = _lease_for(settings, oldest, now)
                if not queue.take_lease(earlier, replacing=lease):
                    return _Dispatched(not_processed=not_processed)
                waiting, lease = oldest, earlier
        try:
            started = _start_job(settings, sagemaker, s3, waiting)
        except UploadReplacedError as error:
            replaced = JobStart(outcome=Outcome.REPLACED, run_id=waiting.run_id, reason=str(error))
            # Recorded before it leaves the queue: a function stopped in between leaves it
            # waiting, to be found replaced (and recorded) again.
            _record_not_processed(queue, waiting.upload, replaced, now)
            queue.remove(waiting.run_id)
            queue.release_lease(waiting.run_id)
            not_processed.append(replaced)
            continue
        except Exception:
            # The upload keeps its place; the next event (a retry of this one) tries again.
            queue.release_lease(waiting.run_id)
            raise
        queue.remove(waiting.run_id)
        if started.outcome is Outcome.STARTED:
            return _Dispatched(started=started, not_processed=not_processed)
        # Started before (a repeated event, or a function that died before removing the
        # upload): if that job has ended, its lease must not hold up the queue.
        current = queue.lease()
        if current is None or not _is_stale(current, sagemaker, now):
            return _Dispatched(started=started, not_processed=not_processed)
        queue.release_lease(current.run_id)
        passes += 1
    return _Dispatched(not_processed=not_processed)


def _record_not_processed(
    queue: UploadQueue,
    upload: Upload,
    outcome: JobStart,
    now: datetime | None,
    superseded_by: str | None = None,
) -> None:
    """Keep an upload that gets no run where ``fleetcast status`` reads (not only in this
    function's log and metrics)."""
    assert outcome.run_id is not None and outcome.reason is not None
    queue.record_not_processed(
        NotProcessed(
            run_id=outcome.run_id,
            upload=upload,
            outcome=outcome.outcome.value,
            reason=outcome.reason,
            superseded_by=superseded_by,
            recorded_at=now or datetime.now(UTC),
        )
    )


def _start_job(
    settings: ProcessingSettings, sagemaker: Any, s3: Any, waiting: WaitingUpload
) -> JobStart:
    """Stage the upload and create its processing job, unless the job exists already (then
    its upload was staged before, and copying it again could take minutes)."""
    job_name = PROCESSING.job_name(settings.job_name_prefix, waiting.run_id)
    if _processing_job_status(sagemaker, job_name) is not None:
        return JobStart(outcome=Outcome.ALREADY_STARTED, run_id=waiting.run_id, job_name=job_name)
    with_history = storage.any_object_under(s3, settings.artifacts_bucket, layout.HISTORY_PREFIX)
    with_metadata = storage.any_object_under(s3, settings.artifacts_bucket, layout.METADATA_PREFIX)
    staged_key = _stage_upload(s3, settings, waiting)
    request = processing_job_request(
        settings, waiting.run_id, waiting.upload, staged_key, with_history, with_metadata
    )
    return _create_once(
        sagemaker.create_processing_job, request, PROCESSING.name_field, waiting.run_id
    )


def _stage_upload(s3: Any, settings: ProcessingSettings, waiting: WaitingUpload) -> str:
    """Copy (server side) exactly the object the upload's event named into the run's
    folder, under a short, safe name (layout.staged_upload_key), record the upload beside
    it, and return the copy's key.

    The job reads this copy, never the raw key: SageMaker would read the key's latest
    version (a second upload of the same key while the first waited would be read twice
    and the first never), and processing runs with network isolation, so the container
    cannot fetch a version itself. A versioned bucket's object is copied by VersionId;
    an unversioned one only if it still has the event's ETag, else
    :class:`UploadReplacedError`.
    """
    upload = waiting.upload
    staged_key = layout.staged_upload_key(waiting.run_id, upload.key)
    source = {"Bucket": upload.bucket, "Key": upload.key}
    # Tagged for the bucket's lifecycle rule, which expires the copy once its run is
    # surely over (the upload itself stays in the raw bucket).
    extra: dict[str, str] = {
        "Tagging": layout.retention_tagging(layout.STAGED_UPLOAD_RETENTION),
        "TaggingDirective": "REPLACE",
    }
    if upload.version_id:
        source["VersionId"] = upload.version_id
    elif upload.etag:
        # The event's ETag has no quotes; an HTTP entity tag (If-Match) has them.
        extra["CopySourceIfMatch"] = '"' + upload.etag.strip('"') + '"'
    try:
        s3.copy(
            source, settings.artifacts_bucket, staged_key, ExtraArgs=extra, Config=STAGING_TRANSFER
        )
    except Exception as error:
        code = error_code(error)
        if code in _REPLACED or code in _GONE:
            named = f"version {upload.version_id}" if upload.version_id else f"ETag {upload.etag}"
            what = "was replaced by another object" if code in _REPLACED else "no longer exists"
            raise UploadReplacedError(
                f"not processed: the upload {shown_key(upload.key)} in bucket {upload.bucket} "
                f"({named}) {what} before its turn in the upload queue came; a newer object "
                "under that key is an upload of its own"
            ) from None
        raise
    record = UploadRecord(run_id=waiting.run_id, upload=upload, staged_key=staged_key)
    storage.write_text(
        s3,
        settings.artifacts_bucket,
        layout.upload_record_key(waiting.run_id),
        record.model_dump_json(),
    )
    return staged_key


def _lease_for(settings: ProcessingSettings, waiting: WaitingUpload, now: datetime) -> Lease:
    job_name = PROCESSING.job_name(settings.job_name_prefix, waiting.run_id)
    return Lease(run_id=waiting.run_id, job_name=job_name, taken_at=now)


def _is_stale(lease: Lease, sagemaker: Any, now: datetime) -> bool:
    return lease.is_stale(_processing_job_status(sagemaker, lease.job_name), now)


def _processing_job_status(sagemaker: Any, job_name: str) -> str | None:
    """The job's ProcessingJobStatus; None when there is no such job."""
    try:
        return str(
            sagemaker.describe_processing_job(ProcessingJobName=job_name)[PROCESSING.status_field]
        )
    except Exception as error:
        if error_code(error) in _NO_SUCH_JOB:
            return None
        raise


def start_training(
    processing_job_name: str, settings: TrainingSettings, sagemaker: Any, s3: Any
) -> JobStart:
    run_id = PROCESSING.run_id_of(settings.job_name_prefix, processing_job_name)
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
    return _create_once(sagemaker.create_training_job, request, TRAINING.name_field, run_id)
