"""Where each upload is in the pipeline, read from the same APIs on AWS and locally:
its processing job and report, its training job and manifests, and the registry."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from fleetcast_common import storage
from fleetcast_common.chunk_queue import MAX_RECEIVES
from fleetcast_common.jobs import UploadRecord
from fleetcast_common.processing_report import processing_summary
from fleetcast_common.registration import RegistrationPlan, read_registration_record
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.upload_queue import ENDED_STATUSES, UploadQueue
from fleetcast_contracts import layout
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.ids import upload_sequence
from fleetcast_contracts.object_keys import upload_file_name
from fleetcast_contracts.processing import REJECTED_FILE, ProcessingSummary
from fleetcast_contracts.shards import USE_INACTIVE, USE_INCOMPLETE
from fleetcast_contracts.stages import PIPELINE, PROCESSING, TRAINING, Stage
from fleetcast_contracts.training import host_names, progress_name
from fleetcast_contracts.training_manifest import TrainingProgress

POLL_SECONDS = 0.5
# An upload whose processing job waits for the one running (fleetcast_common.upload_queue).
WAITING = "Waiting"
# Uploads that left the queue without a run (upload_queue.NotProcessed), by outcome; and
# runs a killed local stack lost (upload_queue.LostRun).
NOT_PROCESSED = {"superseded": "Superseded", "replaced": "Replaced", "lost": "Lost"}


# The kind of a failure recorded before manifests kept kinds.
UNCLASSIFIED = "unclassified"


class TrainingFailure(BaseModel):
    """A customer the run could not train, as its instance's manifest says."""

    customer_id: str
    kind: str
    reason: str


class FailedChunkStatus(BaseModel):
    """A registration chunk of the run that is not counted and whose last delivery failed:
    ``dead_lettered`` once every delivery the chunks queue allows has failed (it waits in
    the dead-letter queue; nothing sends it again until ``redrive``, the command, is run)."""

    chunk_id: str
    number: int
    reason: str
    deliveries: int
    dead_lettered: bool
    redrive: str


class StageJob(BaseModel):
    """A run's job of one pipeline stage (fleetcast_contracts.stages), as SageMaker
    describes it; every field None for a stage whose job has not started."""

    name: str | None = None
    # SageMaker's JobStatus; for processing also Waiting (the upload queue holds it back),
    # Superseded and Replaced (the upload got no run) or Lost (with a killed local stack).
    status: str | None = None
    secondary_status: str | None = None
    failure: str | None = None
    instances: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


NOT_STARTED = StageJob()


class RunStatus(BaseModel):
    run_id: str
    # The upload's file name, and its whole S3 key (from the run's upload record).
    source: str | None = None
    source_key: str | None = None
    # The object version its event named (the ETag in an unversioned bucket).
    source_version: str | None = None
    # Its stages' jobs, in the pipeline's order, by stage name: those started so far.
    jobs: dict[str, StageJob] = Field(default_factory=dict)
    # An upload that got no run (its processing status Superseded or Replaced): why, and
    # the run of the newer upload of its key that superseded it.
    not_processed_reason: str | None = None
    superseded_by: str | None = None
    rows_read: int | None = None
    rows_rejected: int | None = None
    # The rejected rows by reason (most first), and the S3 URI of the rejected.csv that lists
    # them (``fleetcast rejected RUN`` reads it); None without rejected rows.
    rejected_by_reason: dict[str, int] = Field(default_factory=dict)
    rejected_report: str | None = None
    # Stored readings this upload replaced (same customer and instant), and of them those it
    # gave another value: conflicting uploads, listed in the run's changed.csv (the later
    # upload's values are kept).
    readings_replaced: int | None = None
    readings_changed: int | None = None
    # Periods sent to training but left out of fitting: too few readings, or the meter off.
    periods_incomplete: int | None = None
    periods_inactive: int | None = None
    # Periods training left out of fitting as implausible (a meter's glitch: its history
    # module's rule), from the run's registration record.
    periods_implausible: int | None = None
    customers_processed: int | None = None
    # Customers processing sent to training: all of them for readings, those whose holiday
    # calendar changed (and who have history) for a metadata upload; 0 means no training job.
    customers_to_train: int | None = None
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
    # Its chunks whose last delivery failed, with why (the register-chunk function's log
    # has the traceback).
    failed_chunks: list[FailedChunkStatus] = Field(default_factory=list)
    created_at: datetime | None = None

    def job(self, stage: Stage) -> StageJob:
        """Its job of ``stage``: :data:`NOT_STARTED` (every field None) before it starts."""
        return self.jobs.get(stage.name, NOT_STARTED)

    @property
    def completed(self) -> bool:
        """Every stage's job completed."""
        return all(self.job(stage).status == "Completed" for stage in PIPELINE)

    @property
    def failure(self) -> str | None:
        """Why the first of its jobs that did not complete did not."""
        return next((job.failure for job in self.jobs.values() if job.failure), None)

    @property
    def upload_order(self) -> int | None:
        """The upload queue's number for this run's upload: the order uploads are processed
        and their models promoted in."""
        return upload_sequence(self.run_id)

    @property
    def done(self) -> bool:
        """Nothing more will happen to this run."""
        processing = self.job(PROCESSING).status
        if processing in ("Failed", "Stopped", *NOT_PROCESSED.values()):
            return True
        if processing == "Completed" and self.customers_to_train == 0:
            return True  # a metadata upload that changed nobody's calendar: nothing to train
        if self.job(PIPELINE[-1]).status not in ENDED_STATUSES:
            return False
        # A failed or stopped job's models are registered too; a run with chunks left
        # only dead-lettered ones waits for nothing but a user's re-drive.
        left = (self.chunks_total or 0) - (self.chunks_done or 0)
        dead = sum(1 for chunk in self.failed_chunks if chunk.dead_lettered)
        return self.registered or (left > 0 and dead == left)

    @property
    def registration(self) -> str:
        """``chunks 3/8`` while registering, ``registered`` once every chunk is done."""
        if self.registered:
            return "registered"
        if self.chunks_total is None:
            return "-"
        return f"chunks {self.chunks_done}/{self.chunks_total}"

    def top_rejections(self, count: int = 3) -> str:
        """The most frequent reasons rows were rejected: ``60 invalid_consumption, 2 more``."""
        reasons = [f"{n} {reason}" for reason, n in self.rejected_by_reason.items()]
        more = len(reasons) - count
        return ", ".join(reasons[:count]) + (f", {more} more reasons" if more > 0 else "")

    def failure_summary(self) -> list[str]:
        """One line per kind of training failure, most first, with its first customer:
        ``2 too_few_rows (first 0042: has 20 rows, needs at least 28)``."""
        lines = []
        for kind, count in self.failures_by_kind.items():
            first = next(f for f in self.failures if f.kind == kind)
            lines.append(f"{count} {kind} (first {first.customer_id}: {first.reason})")
        return lines


def describe_job(sagemaker: Any, stage: Stage, job_name: str) -> StageJob | None:
    """``stage``'s job of that name as SageMaker describes it; None when there is none."""
    try:
        described = getattr(sagemaker, stage.describe_operation)(**{stage.name_field: job_name})
    except Exception as error:
        if error_code(error) in ("ValidationException", "ResourceNotFound"):
            return None
        raise
    instances: Any = described
    for field in stage.instance_count_path:
        instances = instances.get(field, {}) if isinstance(instances, dict) else {}
    status = described[stage.status_field]
    # A processing container's own words are its ExitMessage; SageMaker's FailureReason
    # for a container that exited non-zero is generic ("AlgorithmError: See job logs").
    failure = (described.get("ExitMessage") if status == "Failed" else None) or described.get(
        "FailureReason"
    )
    return StageJob(
        name=described[stage.name_field],
        status=status,
        secondary_status=described.get("SecondaryStatus"),
        failure=failure or None,
        instances=instances if isinstance(instances, int) else None,
        created_at=described.get("CreationTime"),
        started_at=described.get(stage.start_time_field),
        ended_at=described.get(stage.end_time_field),
    )


def run_status(
    run_id: str,
    prefix: str,
    bucket: str,
    sagemaker: Any,
    s3: Any,
    table: Any,
    summaries: dict[str, ProcessingSummary] | None = None,
) -> RunStatus:
    """One run's state, read with a number of requests that does not grow with its
    customers. ``summaries``, kept by a caller that polls: each run's processing summary
    once its processing job has ended (written whole once, then never changed), read
    from there instead of S3 (it lists the run's customers: megabytes for a fleet, which
    a poll every half second re-read and parsed while the run's jobs needed the CPU)."""
    status = RunStatus(run_id=run_id)
    for stage in PIPELINE:
        job_name = stage.job_name(prefix, run_id)
        job = describe_job(sagemaker, stage, job_name)
        if job is None:
            if stage is PIPELINE[0]:
                raise LookupError(f"run {run_id} has no {stage.name} job {job_name}")
            break
        status.jobs[stage.name] = job
        if job.status != "Completed":
            break  # each job is started by the previous one's completion
    status.created_at = status.job(PIPELINE[0]).created_at
    record = storage.read_text_if_exists(s3, bucket, layout.upload_record_key(run_id))
    if record is not None:
        # Written before the job started: a run that failed before its report has it too.
        upload = UploadRecord.model_validate_json(record).upload
        status.source_key, status.source_version = upload.key, upload.version_id or upload.etag
        status.source = upload_file_name(status.source_key)
    summary = (summaries or {}).get(run_id) or processing_summary(s3, bucket, run_id)
    ended = status.job(PROCESSING).status in ENDED_STATUSES
    if summary is not None and summaries is not None and ended:
        summaries[run_id] = summary
    if summary is not None:
        _add_processing(status, summary, f"s3://{bucket}/{rejected_report_key(run_id)}")
    training = status.job(TRAINING)
    if training.status is None:
        return status
    status.customers_checkpointed = customers_done(s3, bucket, run_id, training.instances or 0)
    if training.status in ENDED_STATUSES:
        plan = read_registration_record(s3, bucket, run_id)
        progress = ModelRegistry(table).run(run_id)
        if plan is not None:
            _add_registration_plan(status, plan)
        if progress is not None:
            status.chunks_done, status.chunks_total = progress.chunks_done, progress.chunks_total
            status.registered = progress.complete
            if progress.complete:
                # Exact once every chunk is counted: unusable archives are lost, not trained.
                status.customers_trained = progress.trained
                status.customers_failed = progress.failed_training
                status.customers_lost = progress.lost
        if progress is not None and not progress.complete:
            status.failed_chunks = [
                FailedChunkStatus(
                    chunk_id=failure.chunk_id,
                    number=failure.number,
                    reason=failure.reason,
                    deliveries=failure.deliveries,
                    dead_lettered=failure.deliveries >= MAX_RECEIVES,
                    redrive=f"fleetcast redrive-chunks {run_id}",
                )
                for failure in ModelRegistry(table).failed_chunks(run_id)
                if failure.number not in progress.counted_chunks
            ]
        if progress is not None:
            # The chunks keep their counts on the run's record: one read.
            status.customers_decided = progress.models_decided
            status.customers_registered = progress.models_live
    return status


def _add_processing(status: RunStatus, summary: ProcessingSummary, rejected_report: str) -> None:
    """What the processing job's summary says of the run; ``rejected_report`` the S3 URI
    of its rejected rows."""
    status.source = status.source or summary.source_name
    status.rows_read = summary.rows_read
    status.rows_rejected = summary.rows_rejected
    status.rejected_by_reason = dict(most_first(summary.rejected_by_reason))
    if summary.rows_rejected:
        status.rejected_report = rejected_report
    status.readings_replaced = summary.readings_replaced
    status.readings_changed = summary.readings_changed
    status.periods_incomplete = summary.periods_by_use.get(USE_INCOMPLETE, 0)
    status.periods_inactive = summary.periods_by_use.get(USE_INACTIVE, 0)
    status.customers_processed = summary.customers
    if summary.metadata is not None:
        status.customers_to_train = len(summary.metadata.retrained)
    else:
        status.customers_to_train = summary.customers


def _add_registration_plan(status: RunStatus, plan: RegistrationPlan) -> None:
    """What training's end left for registration: the customers trained, failed and lost."""
    status.customers_trained = plan.customers_to_register
    status.customers_failed = len(plan.failures)
    status.periods_implausible = plan.implausible_periods
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


def most_first(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """Counts by name, the largest first, ties by name: the same order every time."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def rejected_report_key(run_id: str) -> str:
    """The run's rejected.csv: the rows processing rejected, with their lines and reasons."""
    return layout.report_prefix(run_id) + REJECTED_FILE


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
    summaries: dict[str, ProcessingSummary] = {}
    while True:
        status = run_status(run_id, prefix, bucket, sagemaker, s3, table, summaries)
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
    summaries: dict[str, ProcessingSummary] | None = None,
) -> list[RunStatus]:
    """Every run of this stack in upload order (the order they reached the upload queue);
    with the upload ``queue``, also the uploads waiting for their processing job and those
    that left the queue without one (superseded or replaced).

    The queue is read before the jobs are listed: an upload leaves the queue only after
    its job is created, or its not-processed record written (``fleetcast_common.pipeline
    .dispatch_uploads``), so one handed on between the reads is listed by its job. Read
    the other way round it was in neither list, and ``status --wait`` could report every
    run done while it was being handed on."""
    queued = queue.waiting() if queue else []
    left = queue.not_processed() if queue else []
    lost = queue.lost_runs() if queue else []
    started = run_ids(prefix, sagemaker)
    runs = [
        run_status(run_id, prefix, bucket, sagemaker, s3, table, summaries) for run_id in started
    ]
    waiting = [w for w in queued if w.run_id not in started]
    runs += [
        RunStatus(
            run_id=w.run_id,
            source=upload_file_name(w.upload.key),
            source_key=w.upload.key,
            jobs={
                PROCESSING.name: StageJob(
                    name=PROCESSING.job_name(prefix, w.run_id), status=WAITING
                )
            },
            created_at=w.upload.uploaded_at,
        )
        for w in waiting
    ]
    skipped = [n for n in left if n.run_id not in started]
    runs += [
        RunStatus(
            run_id=n.run_id,
            source=upload_file_name(n.upload.key),
            source_key=n.upload.key,
            source_version=n.upload.version_id or n.upload.etag,
            jobs={
                PROCESSING.name: StageJob(
                    name=PROCESSING.job_name(prefix, n.run_id),
                    status=NOT_PROCESSED.get(n.outcome, n.outcome),
                )
            },
            not_processed_reason=n.reason,
            superseded_by=n.superseded_by,
            created_at=n.upload.uploaded_at,
        )
        for n in skipped
    ]
    runs += [
        RunStatus(
            run_id=lost_run.run_id,
            jobs={PROCESSING.name: StageJob(name=lost_run.job_name, status=NOT_PROCESSED["lost"])},
            not_processed_reason=lost_run.reason,
            created_at=lost_run.recorded_at,
        )
        for lost_run in lost
        if lost_run.run_id not in started
    ]
    return sorted(runs, key=lambda run: run.run_id)
