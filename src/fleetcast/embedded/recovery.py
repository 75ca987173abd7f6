"""At a start from a snapshot, every run is driven on to its end.

A snapshot keeps the buckets, tables and jobs, but not the EventBridge events and SQS
messages still being delivered: moto holds them in memory only, and a clean stop drops
them as a crash does. A run whose job had ended before its end event was handled, or
whose registration chunks were still queued, would stay where it stopped for ever
("training done, registration pending"). So, before any event is delivered or any job
resumes (nothing else acts on the pipeline meanwhile), the stack looks at what each run
lacks and sends again exactly the message that was lost, down the same path (an event
put into EventBridge, a chunk sent to its queue), relying on each handler being
idempotent:

- an ended processing job that still holds the upload queue's lease: its state-change
  event (start-processing frees the lease, a repeat finds it free, and starts the next
  upload, a repeat finds it started);
- a completed processing job with training input and no training job: the same event
  (start-training creates the job; a repeat finds it: ResourceInUse);
- an ended training job whose run has no registration record: its state-change event
  (register-models plans the same chunks again: their ids and numbers are deterministic);
- a run whose registration record counts fewer chunks than it planned: the chunks it has
  not counted, planned again from the run's own registration record, sent to the chunks
  queue (register-chunk counts a chunk once and never decides a customer twice); but not
  a chunk whose deliveries all failed (dead-lettered: sending it at every start would
  fail it again at every start): re-driving it is the user's decision, once its cause is
  fixed (``fleetcast redrive-chunks RUN``), and the start's notice says so;
- an upload kept in the raw bucket (every version of every key under ``incoming/``,
  from the last ``ARRIVAL_RECORD_LIFETIME``) that the upload queue never numbered: its
  S3 event, which was still being delivered (an upload is acknowledged once a snapshot
  holds it, :mod:`.snapshots`; its event comes after), oldest first;
- uploads waiting with no job running to start them: the oldest one's S3 event
  (start-processing finds its run id and its place and dispatches the queue). A lease
  whose job does not exist is freed first: no function that could still create the job
  is alive (the dead stack's processes were stopped).

Jobs that were running at the snapshot run again (:mod:`.persistence`) and publish their
own events when they end.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleetcast.embedded.sagemaker_jobs.runner import JobRunner
from fleetcast.embedded.template import ACCOUNT_ID, LocalTemplate
from fleetcast_common import storage
from fleetcast_common.chunk_queue import MAX_RECEIVES, enqueue_chunks
from fleetcast_common.jobs import Upload
from fleetcast_common.registration import uncounted_chunks
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.upload_queue import ARRIVAL_RECORD_LIFETIME, ENDED_STATUSES, UploadQueue
from fleetcast_contracts import layout
from fleetcast_contracts.stages import PROCESSING, TRAINING, Stage

COMPLETED = "Completed"


@dataclass
class Redriven:
    """What a start sent again, for its report."""

    processing_ends: list[str] = field(default_factory=list)
    training_ends: list[str] = field(default_factory=list)
    # Run id -> the numbers of the registration chunks sent again.
    chunks: dict[str, list[int]] = field(default_factory=dict)
    # Run ids of waiting uploads whose S3 event was sent again.
    uploads: list[str] = field(default_factory=list)
    # Keys of kept uploads the queue never saw, whose S3 event was sent again.
    unqueued: list[str] = field(default_factory=list)
    # Run id -> the numbers of its dead-lettered chunks, not sent again.
    dead_lettered: dict[str, list[int]] = field(default_factory=dict)
    freed_lease: str | None = None

    def __bool__(self) -> bool:
        return bool(
            self.processing_ends
            or self.training_ends
            or self.chunks
            or self.uploads
            or self.unqueued
            or self.dead_lettered
        ) or (self.freed_lease is not None)

    def describe(self) -> str:
        parts = []
        if self.processing_ends:
            parts.append(
                "the end of processing job "
                + ", ".join(self.processing_ends)
                + " (start-training, and start-processing's next upload)"
            )
        if self.training_ends:
            parts.append(
                "the end of training job " + ", ".join(self.training_ends) + " (register-models)"
            )
        for run_id, numbers in sorted(self.chunks.items()):
            parts.append(
                f"{len(numbers)} registration chunks of run {run_id} not yet counted "
                f"(numbers {_ranges(numbers)}; register-chunk)"
            )
        if self.freed_lease is not None:
            parts.append(
                f"the upload queue's lease of run {self.freed_lease} freed (its processing "
                "job was never created)"
            )
        if self.unqueued:
            parts.append(
                f"the S3 event of {len(self.unqueued)} uploads the upload queue never saw ("
                + ", ".join(self.unqueued[:5])
                + (", ..." if len(self.unqueued) > 5 else "")
                + "; start-processing)"
            )
        if self.uploads:
            parts.append(
                "the S3 event of waiting upload " + ", ".join(self.uploads) + " (start-processing)"
            )
        text = (
            "re-driven, as events and messages in flight are not kept and each handler is "
            "idempotent: " + "; ".join(parts)
            if parts
            else ""
        )
        for run_id, numbers in sorted(self.dead_lettered.items()):
            text += (
                f"{'; ' if text else ''}NOT re-driven: {len(numbers)} registration chunks of "
                f"run {run_id} (numbers {_ranges(numbers)}) failed every delivery (see "
                f"`fleetcast status`); once the cause is fixed: fleetcast redrive-chunks {run_id}"
            )
        return text


def _ranges(numbers: list[int]) -> str:
    """``0-3, 7`` for [0, 1, 2, 3, 7]."""
    spans: list[list[int]] = []
    for number in sorted(numbers):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


@dataclass
class Recovery:
    """The pipeline's unfinished runs, found in moto's SageMaker backend and the stack's
    tables and buckets, and driven on."""

    template: LocalTemplate
    client: Callable[[str], Any]
    resource: Callable[[str], Any]
    runner: JobRunner
    sagemaker: Any  # moto's SageMaker backend (its jobs are the runner's to publish)

    @property
    def _prefix(self) -> str:
        return self.template.parameters.get("JobNamePrefix", "fleetcast")

    def _name(self, logical_id: str) -> str:
        return self.template.physical_name(logical_id)

    def redrive(self) -> Redriven:
        redriven = Redriven()
        ends = self._processing_ends_lost(redriven)
        for job_name in sorted(ends):
            self.runner.publish_processing(self.sagemaker.processing_jobs[job_name])
            redriven.processing_ends.append(job_name)
        self._registrations(redriven)
        return redriven

    # -- processing and the upload queue -----------------------------------------------

    def _ours(self, stage: Stage, jobs: dict[str, Any]) -> dict[str, str]:
        """Run id -> job name of this stack's jobs of ``stage`` in ``jobs``."""
        found = {}
        for name in jobs:
            run_id = stage.run_id_of(self._prefix, name)
            if run_id is not None:
                found[run_id] = name
        return found

    def _processing_ends_lost(self, redriven: Redriven) -> set[str]:
        """The processing jobs whose end must be published again; waiting uploads whose
        event must be sent again are sent here."""
        jobs = self.sagemaker.processing_jobs
        ends = set()
        s3, bucket = self.client("s3"), self._name("ArtifactsBucket")
        for run_id, name in self._ours(PROCESSING, jobs).items():
            trained = TRAINING.job_name(self._prefix, run_id) in self.sagemaker.training_jobs
            if jobs[name].processing_job_status != COMPLETED or trained:
                continue
            if any(
                layout.is_training_input(posixpath.basename(key))
                for key in storage.keys_under(s3, bucket, layout.train_prefix(run_id))
            ):
                ends.add(name)
        if "UploadQueueTable" not in self.template.resources:
            return ends
        queue = UploadQueue(self.resource("dynamodb").Table(self._name("UploadQueueTable")))
        for upload in self._uploads_never_queued(queue):
            self._upload_event(upload)
            redriven.unqueued.append(upload.key)
        lease = queue.lease()
        if lease is not None:
            job = jobs.get(lease.job_name)
            if job is None:
                queue.release_lease(lease.run_id)
                redriven.freed_lease = lease.run_id
            elif job.processing_job_status in ENDED_STATUSES:
                ends.add(lease.job_name)
                return ends
            else:
                return ends  # running (again): its end starts the next upload
        oldest = queue.oldest_waiting()
        if oldest is not None:
            self._upload_event(oldest.upload)
            redriven.uploads.append(oldest.run_id)
        return ends

    def _uploads_never_queued(self, queue: UploadQueue) -> list[Upload]:
        """The raw bucket's uploads (versions under ``incoming/``) from the last
        ``ARRIVAL_RECORD_LIFETIME`` that have no arrival record, oldest first."""
        if "RawBucket" not in self.template.resources:
            return []
        raw, s3 = self._name("RawBucket"), self.client("s3")
        since = datetime.now(UTC) - ARRIVAL_RECORD_LIFETIME
        found = []
        pages = s3.get_paginator("list_object_versions").paginate(
            Bucket=raw, Prefix=layout.INCOMING_PREFIX
        )
        # S3 lists a key's versions newest first: reversed, each key's come oldest first,
        # the order they were uploaded in, which the sort below keeps for equal times.
        versions = [version for page in pages for version in page.get("Versions", [])]
        for version in reversed(versions):
            if version["LastModified"] < since or version["Key"].endswith("/"):
                continue
            version_id = version.get("VersionId")
            version_id = None if version_id in (None, "null") else version_id
            etag = str(version.get("ETag", "")).strip('"') or None
            upload = Upload(
                bucket=raw,
                key=version["Key"],
                revision=version_id or etag or "",
                size=int(version.get("Size", 0)),
                uploaded_at=version["LastModified"],
                version_id=version_id,
                etag=etag,
            )
            if queue.run_id_of(upload) is None:
                found.append(upload)
        return sorted(found, key=lambda upload: upload.uploaded_at)

    def _upload_event(self, upload: Upload) -> None:
        """The upload's "Object Created" event as S3 sent it (the fields start-processing
        reads: key, size, ETag, version and sequencer, at the upload's time)."""
        obj: dict[str, Any] = {"key": upload.key, "size": upload.size}
        if upload.etag:
            obj["etag"] = upload.etag
        if upload.version_id:
            obj["version-id"] = upload.version_id
        if upload.sequencer:
            obj["sequencer"] = upload.sequencer
        detail = {
            "version": "0",
            "bucket": {"name": upload.bucket},
            "object": obj,
            "request-id": "fleetcast-recovery",
            "requester": ACCOUNT_ID,
            "reason": "PutObject",
        }
        response = self.client("events").put_events(
            Entries=[
                {
                    "Source": "aws.s3",
                    "DetailType": "Object Created",
                    "Resources": [f"arn:aws:s3:::{upload.bucket}"],
                    "Time": upload.uploaded_at,
                    "Detail": json.dumps(detail),
                }
            ]
        )
        if response.get("FailedEntryCount"):
            raise RuntimeError(f"could not send {upload.key}'s event again: {response}")

    # -- registration ------------------------------------------------------------------

    def _registrations(self, redriven: Redriven) -> None:
        if "ModelRegistryTable" not in self.template.resources:
            return
        registry = ModelRegistry(self.resource("dynamodb").Table(self._name("ModelRegistryTable")))
        s3, bucket = self.client("s3"), self._name("ArtifactsBucket")
        jobs = self.sagemaker.training_jobs
        for run_id, name in sorted(self._ours(TRAINING, jobs).items()):
            job = jobs[name]
            if job.training_job_status not in ENDED_STATUSES:
                continue
            progress = registry.run(run_id)
            if progress is not None and progress.complete:
                continue
            chunks = uncounted_chunks(run_id, bucket, s3, registry)
            if chunks is None:
                # No record yet, or one the chunks cannot be planned again from: the
                # coordinator plans the run again.
                self.runner.publish_training(job)
                redriven.training_ends.append(name)
                continue
            dead = {
                failure.number
                for failure in registry.failed_chunks(run_id)
                if failure.deliveries >= MAX_RECEIVES
            }
            if dead & {c.number for c in chunks}:
                redriven.dead_lettered[run_id] = sorted(dead & {c.number for c in chunks})
            chunks = [c for c in chunks if c.number not in dead]
            if not chunks:
                continue
            queue_url = self.client("sqs").get_queue_url(
                QueueName=self._name("RegistrationChunksQueue")
            )["QueueUrl"]
            enqueue_chunks(self.client("sqs"), queue_url, chunks)
            redriven.chunks[run_id] = [c.number for c in chunks if c.number is not None]
