"""Where each upload is in the pipeline, read from the same APIs on AWS and locally:
its processing job and report, its training job and manifests, and the registry."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from fleetcast_common import storage
from fleetcast_common.jobs import UploadRecord
from fleetcast_common.processing_report import processing_summary
from fleetcast_common.registration import read_registration_record
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts import layout
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.ids import upload_sequence
from fleetcast_contracts.object_keys import upload_file_name
from fleetcast_contracts.shards import USE_INACTIVE, USE_INCOMPLETE
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_contracts.training import host_names, progress_name
from fleetcast_contracts.training_manifest import TrainingProgress

POLL_SECONDS = 0.5
# An upload whose processing job waits for the one running (fleetcast_common.upload_queue).
WAITING = "Waiting"
# Uploads that left the queue without a run (upload_queue.NotProcessed), by outcome.
NOT_PROCESSED = {"superseded": "Superseded", "replaced": "Replaced"}


# The kind of a failure recorded before manifests kept kinds.
UNCLASSIFIED = "unclassified"


class TrainingFailure(BaseModel):
    """A customer the run could not train, as its instance's manifest says."""

    customer_id: str
    kind: str
    reason: str


class RunStatus(BaseModel):
    run_id: str
    # The upload's file name, and its whole S3 key (from the run's upload record).
    source: str | None = None
    source_key: str | None = None
    # The object version its event named (the ETag in an unversioned bucket).
    source_version: str | None = None
    processing_job: str
    # An upload that got no run (processing_status Superseded or Replaced): why, and the
    # run of the newer upload of its key that superseded it.
    not_processed_reason: str | None = None
    superseded_by: str | None = None
    processing_status: str
    processing_failure: str | None = None
    rows_read: int | None = None
    rows_rejected: int | None = None
    # Stored readings this upload replaced (same customer and instant), and of them those it
    # gave another value: conflicting uploads, listed in the run's changed.csv (the later
    # upload's values are kept).
    readings_replaced: int | None = None
    readings_changed: int | None = None
    # Periods sent to training but left out of fitting: too few readings, or the meter off.
    periods_incomplete: int | None = None
    periods_inactive: int | None = None
    customers_processed: int | None = None
    # Customers processing sent to training: all of them for readings, those whose holiday
    # calendar changed (and who have history) for a metadata upload; 0 means no training job.
    customers_to_train: int | None = None
    training_job: str | None = None
    training_status: str | None = None
    training_secondary_status: str | None = None
    training_failure: str | None = None
    instances: int | None = None
    customers_checkpointed: int = 0
    customers_trained: int | None = None
    customers_failed: int | None = None
    # From the run's registration record: every customer training failed, with the kind
    # of failure and its reason, and how many of each kind (most first).
    failures: list[TrainingFailure] = Field(default_factory=list)
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    # From the run's registration record: customers sent to training that have neither a
    # model nor a manifest entry saying why (their instance failed), and the first of them.
    customers_lost: int | None = None
    first_lost: str | None = None
    customers_registered: int = 0
    customers_decided: int = 0
    # The run's registration, fanned out in chunks: how many are done, and whether every
    # one is (the run is registered). None before its coordinator ran.
    chunks_done: int | None = None
    chunks_total: int | None = None
    registered: bool = False
    created_at: datetime | None = None
    processing_started_at: datetime | None = None
    processing_ended_at: datetime | None = None
    training_started_at: datetime | None = None
    training_ended_at: datetime | None = None

    @property
    def upload_order(self) -> int | None:
        """The upload queue's number for this run's upload: the order uploads are processed
        and their models promoted in."""
        return upload_sequence(self.run_id)

    @property
    def done(self) -> bool:
        """Nothing more will happen to this run."""
        if self.processing_status in ("Failed", "Stopped", *NOT_PROCESSED.values()):
            return True
        if self.processing_status == "Completed" and self.customers_to_train == 0:
            return True  # a metadata upload that changed nobody's calendar: nothing to train
        if self.training_status not in ("Completed", "Failed", "Stopped"):
            return False
        # A failed or stopped job's models are registered too.
        return self.registered

    @property
    def registration(self) -> str:
        """``chunks 3/8`` while registering, ``registered`` once every chunk is done."""
        if self.registered:
            return "registered"
        if self.chunks_total is None:
            return "-"
        return f"chunks {self.chunks_done}/{self.chunks_total}"

    def failure_summary(self) -> list[str]:
        """One line per kind of training failure, most first, with its first customer:
        ``2 too_few_rows (first 0042: has 20 rows, needs at least 28)``."""
        lines = []
        for kind, count in self.failures_by_kind.items():
            first = next(f for f in self.failures if f.kind == kind)
            lines.append(f"{count} {kind} (first {first.customer_id}: {first.reason})")
        return lines

    @property
    def processing_seconds(self) -> float | None:
        return _seconds(self.processing_started_at, self.processing_ended_at)

    @property
    def training_seconds(self) -> float | None:
        return _seconds(self.training_started_at, self.training_ended_at)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def run_status(
    run_id: str,
    prefix: str,
    bucket: str,
    sagemaker: Any,
    s3: Any,
    table: Any,
) -> RunStatus:
    """One run's state, read with a number of requests that does not grow with its
    customers."""
    processing_job = PROCESSING.job_name(prefix, run_id)
    described = sagemaker.describe_processing_job(ProcessingJobName=processing_job)
    status = RunStatus(
        run_id=run_id,
        processing_job=processing_job,
        processing_status=described[PROCESSING.status_field],
        processing_failure=described.get("FailureReason") or None,
        created_at=described.get("CreationTime"),
        processing_started_at=described.get("ProcessingStartTime"),
        processing_ended_at=described.get("ProcessingEndTime"),
    )
    record = storage.read_text_if_exists(s3, bucket, layout.upload_record_key(run_id))
    if record is not None:
        # Written before the job started: a run that failed before its report has it too.
        upload = UploadRecord.model_validate_json(record).upload
        status.source_key, status.source_version = upload.key, upload.version_id or upload.etag
        status.source = upload_file_name(status.source_key)
    summary = processing_summary(s3, bucket, run_id)
    if summary is not None:
        status.source = status.source or summary.source_name
        status.rows_read = summary.rows_read
        status.rows_rejected = summary.rows_rejected
        status.readings_replaced = summary.readings_replaced
        status.readings_changed = summary.readings_changed
        status.periods_incomplete = summary.periods_by_use.get(USE_INCOMPLETE, 0)
        status.periods_inactive = summary.periods_by_use.get(USE_INACTIVE, 0)
        status.customers_processed = summary.customers
        if summary.metadata is not None:
            status.customers_to_train = len(summary.metadata.retrained)
        else:
            status.customers_to_train = summary.customers
    if status.processing_status != "Completed":
        return status
    try:
        training = sagemaker.describe_training_job(
            TrainingJobName=TRAINING.job_name(prefix, run_id)
        )
    except Exception as error:
        if error_code(error) in ("ValidationException", "ResourceNotFound"):
            return status
        raise
    status.training_job = training[TRAINING.name_field]
    status.training_status = training[TRAINING.status_field]
    status.training_secondary_status = training.get("SecondaryStatus")
    status.training_failure = training.get("FailureReason") or None
    status.instances = training.get("ResourceConfig", {}).get("InstanceCount")
    status.training_started_at = training.get("TrainingStartTime")
    status.training_ended_at = training.get("TrainingEndTime")
    status.customers_checkpointed = customers_done(s3, bucket, run_id, status.instances or 0)
    if status.training_status in ("Completed", "Failed", "Stopped"):
        plan = read_registration_record(s3, bucket, run_id)
        progress = ModelRegistry(table).run(run_id)
        if plan is not None:
            status.customers_trained = plan.customers_to_register
            status.customers_failed = len(plan.failures)
            status.failures = [
                TrainingFailure(
                    customer_id=failure.customer_id,
                    kind=failure.kind or UNCLASSIFIED,
                    reason=failure.reason or "no reason recorded",
                )
                for failure in sorted(plan.failures, key=lambda failure: failure.customer_id)
            ]
            kinds = Counter(failure.kind for failure in status.failures)
            status.failures_by_kind = dict(kinds.most_common())
            status.customers_lost = len(plan.lost)
            if plan.lost:
                status.first_lost = f"{plan.lost[0].customer_id}: {plan.lost[0].reason}"
        if progress is not None:
            status.chunks_done, status.chunks_total = progress.chunks_done, progress.chunks_total
            status.registered = progress.complete
            if progress.complete:
                # Exact once every chunk is counted: unusable archives are lost, not trained.
                status.customers_trained = progress.trained
                status.customers_failed = progress.failed_training
                status.customers_lost = progress.lost
        if progress is not None:
            # The chunks keep their counts on the run's record: one read.
            status.customers_decided = progress.models_decided
            status.customers_registered = progress.models_live
    return status


def customers_done(s3: Any, bucket: str, run_id: str, instances: int) -> int:
    """How many customers the run's training instances have done so far, from their
    progress files: one small read per instance, however large the fleet (and no listing
    of a prefix that holds every archive of the run)."""
    done = 0
    for host in host_names(instances):
        key = layout.checkpoint_prefix(run_id) + progress_name(host)
        text = storage.read_text_if_exists(s3, bucket, key)
        if text is not None:
            done += TrainingProgress.model_validate_json(text).done
    return done


def run_ids(prefix: str, sagemaker: Any) -> set[str]:
    """The run of every processing job this stack started."""
    found = set()
    paginator = sagemaker.get_paginator("list_processing_jobs")
    for page in paginator.paginate(NameContains=PROCESSING.job_name_prefix(prefix)):
        for job in page.get("ProcessingJobSummaries", []):
            run_id = PROCESSING.run_id_of(prefix, job[PROCESSING.name_field])
            if run_id is not None:
                found.add(run_id)
    return found


def wait_for_new_run(prefix: str, sagemaker: Any, known: set[str], timeout: float = 60) -> str:
    """The run an upload started: the first one not in ``known`` (taken before the upload)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = run_ids(prefix, sagemaker) - known
        if new:
            return min(new)
        time.sleep(POLL_SECONDS / 2)
    raise TimeoutError(f"no processing job started within {timeout:.0f} s of the upload")


def follow_run(
    run_id: str,
    prefix: str,
    bucket: str,
    sagemaker: Any,
    s3: Any,
    table: Any,
    timeout: float,
    on_status: Callable[[RunStatus], None] | None = None,
) -> RunStatus:
    """Poll a run until nothing more will happen to it; ``on_status`` sees every poll."""
    deadline = time.monotonic() + timeout
    while True:
        status = run_status(run_id, prefix, bucket, sagemaker, s3, table)
        if on_status is not None:
            on_status(status)
        if status.done:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not finish within {timeout:.0f} s: {status}")
        time.sleep(POLL_SECONDS)


def pipeline_status(
    prefix: str,
    bucket: str,
    sagemaker: Any,
    s3: Any,
    table: Any,
    queue: UploadQueue | None = None,
) -> list[RunStatus]:
    """Every run of this stack in upload order (the order they reached the upload queue);
    with the upload ``queue``, also the uploads waiting for their processing job and those
    that left the queue without one (superseded or replaced)."""
    started = run_ids(prefix, sagemaker)
    runs = [run_status(run_id, prefix, bucket, sagemaker, s3, table) for run_id in started]
    waiting = [w for w in (queue.waiting() if queue else []) if w.run_id not in started]
    runs += [
        RunStatus(
            run_id=w.run_id,
            source=upload_file_name(w.upload.key),
            source_key=w.upload.key,
            processing_job=PROCESSING.job_name(prefix, w.run_id),
            processing_status=WAITING,
            created_at=w.upload.uploaded_at,
        )
        for w in waiting
    ]
    skipped = [n for n in (queue.not_processed() if queue else []) if n.run_id not in started]
    runs += [
        RunStatus(
            run_id=n.run_id,
            source=upload_file_name(n.upload.key),
            source_key=n.upload.key,
            source_version=n.upload.version_id or n.upload.etag,
            processing_job=PROCESSING.job_name(prefix, n.run_id),
            processing_status=NOT_PROCESSED.get(n.outcome, n.outcome),
            not_processed_reason=n.reason,
            superseded_by=n.superseded_by,
            created_at=n.upload.uploaded_at,
        )
        for n in skipped
    ]
    return sorted(runs, key=lambda run: run.run_id)
