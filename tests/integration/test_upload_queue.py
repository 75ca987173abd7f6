"""Uploads are processed one at a time, in upload order, whatever order their events
arrive in and however often: the upload queue and its lease against a moto server.

moto completes a processing job the moment it is created; these tests set a job's status
in moto's backend to say it is still running (the one thing moto cannot show by itself).
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sagemaker.models import sagemaker_backends

from fleetcast.embedded import lease, persistence
from fleetcast.embedded.keeping import StateKeeping
from fleetcast.embedded.template import LocalTemplate
from fleetcast.status import WAITING, RunStatus, pipeline_status
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import Outcome, processing_ended, start_processing
from fleetcast_common.settings import ProcessingSettings
from fleetcast_common.upload_queue import Lease, LostRun, UploadQueue, WaitingUpload
from fleetcast_contracts.ids import upload_sequence
from fleetcast_contracts.stages import PROCESSING, TRAINING

# The queue and the tests' helpers share one table per test: job_of reads it.
_QUEUE: list[UploadQueue] = []

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "fleetcast"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def pipeline(aws_env: str) -> Iterator[dict[str, Any]]:
    template = LocalTemplate(ROOT / "template.yaml")
    properties = template.resolve(template.resources["UploadQueueTable"]["Properties"])
    suffix = uuid.uuid4().hex[:8]
    dynamodb = boto3.client("dynamodb")
    table_name = f"queue-{suffix}"
    dynamodb.create_table(
        TableName=table_name,
        KeySchema=properties["KeySchema"],
        AttributeDefinitions=properties["AttributeDefinitions"],
        BillingMode="PAY_PER_REQUEST",
    )
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=f"artifacts-{suffix}")
    settings = processing_settings(f"artifacts-{suffix}", table_name)
    queue = UploadQueue(boto3.resource("dynamodb").Table(table_name))
    _QUEUE[:] = [queue]
    forget_processing_jobs()
    yield {"settings": settings, "sagemaker": boto3.client("sagemaker"), "s3": s3, "queue": queue}
    dynamodb.delete_table(TableName=table_name)


def processing_settings(artifacts_bucket: str, queue_table: str) -> ProcessingSettings:
    """What start-processing's environment says, for this bucket and queue table."""
    return ProcessingSettings.from_env(
        {
            "RAW_BUCKET": "raw",
            "ARTIFACTS_BUCKET": artifacts_bucket,
            "REGISTRY_TABLE": "unused",
            "JOB_NAME_PREFIX": PREFIX,
            "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/sagemaker",
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": queue_table,
        }
    )


def upload(minute: int) -> Upload:
    """A distinct upload (its own key and revision) made ``minute`` minutes after T0, put
    in the raw bucket."""
    tag = uuid.uuid4().hex[:6]
    key = f"incoming/{tag}.csv"
    s3 = boto3.client("s3")
    # The raw bucket, versioned as template.yaml makes it: every upload is copied from it.
    s3.create_bucket(Bucket="raw")
    s3.put_bucket_versioning(Bucket="raw", VersioningConfiguration={"Status": "Enabled"})
    put = s3.put_object(Bucket="raw", Key=key, Body=b"customer_id\n")
    return Upload(
        bucket="raw",
        key=key,
        revision=tag,
        size=100,
        uploaded_at=T0 + timedelta(minutes=minute),
        version_id=put["VersionId"],
    )


def job_of(uploaded: Upload) -> str:
    """The processing job of ``uploaded``, named after the run id the queue gave it."""
    run_id = _QUEUE[0].run_id_of(uploaded)
    assert run_id is not None, f"{uploaded.key} never reached the queue"
    return PROCESSING.job_name(PREFIX, run_id)


def _sagemaker_backend() -> Any:
    return sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]


def forget_processing_jobs() -> None:
    """Each test's fresh queue table numbers its uploads from 1, so its job names would
    meet the jobs of earlier tests: moto's backend outlives a test."""
    _sagemaker_backend().processing_jobs.clear()


def set_status(job_name: str, status: str) -> None:
    _sagemaker_backend().processing_jobs[job_name].processing_job_status = status


def started(world: dict[str, Any], *uploads: Upload) -> set[str]:
    """Which of ``uploads`` have a processing job."""
    pages = world["sagemaker"].get_paginator("list_processing_jobs").paginate()
    jobs = {job["ProcessingJobName"] for page in pages for job in page["ProcessingJobSummaries"]}
    return jobs & {job_of(uploaded) for uploaded in uploads}


def arrive(world: dict[str, Any], uploaded: Upload, now: datetime = T0) -> Outcome:
    """The S3 event for ``uploaded`` reaches start-processing; a started job is left running."""
    started = start_processing(
        uploaded, world["settings"], world["sagemaker"], world["s3"], world["queue"], now
    )
    if started.outcome is Outcome.STARTED:
        set_status(started.job_name or "", "InProgress")
    return started.outcome


def end(world: dict[str, Any], job_name: str, status: str = "Completed") -> str | None:
    """``job_name`` ends; returns the job its end event started, if any."""
    set_status(job_name, status)
    started = processing_ended(
        job_name, world["settings"], world["sagemaker"], world["s3"], world["queue"], T0
    )
    if started.outcome is Outcome.STARTED:
        set_status(started.job_name or "", "InProgress")
        return started.job_name
    return None


def test_an_upload_waits_while_another_is_processed_then_starts(
    pipeline: dict[str, Any],
) -> None:
    # Given one upload being processed
    first, second = upload(0), upload(1)
    assert arrive(pipeline, first) is Outcome.STARTED
    # When a second upload arrives
    outcome = arrive(pipeline, second)
    # Then it waits, with no job of its own yet
    assert outcome is Outcome.QUEUED
    assert started(pipeline, first, second) == {job_of(first)}
    # And when the first job ends, the second starts
    assert end(pipeline, job_of(first)) == job_of(second)
    assert started(pipeline, first, second) == {job_of(first), job_of(second)}
    assert pipeline["queue"].waiting() == []


def status(world: dict[str, Any], registry_table: Any) -> list[RunStatus]:
    """What ``fleetcast status`` shows of this pipeline."""
    return pipeline_status(
        PREFIX,
        world["settings"].artifacts_bucket,
        world["sagemaker"],
        world["s3"],
        registry_table,
        world["queue"],
    )


def test_fleetcast_status_shows_an_upload_waiting_behind_a_running_job(
    pipeline: dict[str, Any], registry_table: Any
) -> None:
    # Given one upload being processed and a second one queued behind it
    first, second = upload(0), upload(1)
    arrive(pipeline, first)
    assert arrive(pipeline, second) is Outcome.QUEUED
    # When fleetcast status looks at the pipeline
    runs = status(pipeline, registry_table)
    # Then the first is shown at its job's status and the second waiting, in upload order,
    # with the file it came from
    assert [(run.job(PROCESSING).name, run.job(PROCESSING).status) for run in runs] == [
        (job_of(first), "InProgress"),
        (job_of(second), WAITING),
    ]
    assert runs[1].source == posixpath.basename(second.key)
    # And once the first has ended, the second is shown at its own job's status
    end(pipeline, job_of(first))
    runs = status(pipeline, registry_table)
    assert [run.job(PROCESSING).status for run in runs] == ["Completed", "InProgress"]


class HandedOnWhileRead(UploadQueue):
    """The queue as ``fleetcast status`` reads it while the running job ends and the next
    upload is handed to its job: the hand-over happens as the waiting uploads are read."""

    def __init__(self, world: dict[str, Any], running: list[str]) -> None:
        super().__init__(world["queue"]._table)
        self._world, self._running = world, running

    def waiting(self) -> list[WaitingUpload]:
        if self._running:
            started = end(self._world, self._running.pop())
            self._running += [started] if started else []
        return super().waiting()


def test_fleetcast_status_lists_every_upload_while_each_is_handed_to_its_job(
    pipeline: dict[str, Any], registry_table: Any
) -> None:
    # Given twelve uploads at once: one processed, eleven waiting behind it
    uploads = [upload(minute) for minute in range(12)]
    for uploaded in uploads:
        arrive(pipeline, uploaded)
    running = [job_of(uploads[0])]
    every_job = {job_of(uploaded) for uploaded in uploads}
    # When fleetcast status reads the pipeline as each upload is handed from the queue to
    # its job (the previous one ending)
    for _ in uploads:
        runs = pipeline_status(
            PREFIX,
            pipeline["settings"].artifacts_bucket,
            pipeline["sagemaker"],
            pipeline["s3"],
            registry_table,
            HandedOnWhileRead(pipeline, running),
        )
        # Then every upload is listed, each once, waiting or at its job's status
        assert sorted(run.job(PROCESSING).name or "" for run in runs) == sorted(every_job)
    assert running == [] and {run.job(PROCESSING).status for run in runs} == {"Completed"}


def test_fleetcast_status_shows_a_run_lost_with_a_killed_stack_until_it_comes_back(
    pipeline: dict[str, Any], registry_table: Any
) -> None:
    # Given a run a killed stack lost (its job started after the last snapshot), as the
    # next start records it, and a run that came back (its job exists again)
    queue: UploadQueue = pipeline["queue"]
    kept = upload(0)
    arrive(pipeline, kept)
    back = queue.run_id_of(kept)
    assert back is not None
    gone = "q0000000009-20261130t093000"
    for run_id in (gone, back):
        queue.record_lost(
            LostRun(
                run_id=run_id,
                job_name=PROCESSING.job_name(PREFIX, run_id),
                reason="lost: the local stack was killed after this job started",
                recorded_at=T0,
            )
        )
    # When fleetcast status looks
    runs = {run.run_id: run for run in status(pipeline, registry_table)}
    # Then the lost run is listed, Lost, with why (and as done: nothing more will happen),
    # and the run that came back at its job's status
    assert runs[gone].job(PROCESSING).status == "Lost" and runs[gone].done
    assert runs[gone].not_processed_reason is not None
    assert "stack was killed" in runs[gone].not_processed_reason
    assert runs[back].job(PROCESSING).status == "InProgress"


def test_a_start_after_a_crash_records_the_runs_whose_jobs_died_with_the_stack(
    pipeline: dict[str, Any], tmp_path: Path
) -> None:
    # Given a stack that died with two jobs of one run started after its last snapshot
    # (their folders in jobs/, the jobs not in the snapshot), and a job that is not a run's
    queue: UploadQueue = pipeline["queue"]
    run_id = "q0000000042-20261130t100000"
    for job in (PROCESSING.job_name(PREFIX, run_id), TRAINING.job_name(PREFIX, run_id), "x"):
        (tmp_path / "jobs" / job).mkdir(parents=True)
    keeping = StateKeeping(tmp_path, True, DEFAULT_ACCOUNT_ID, "us-east-1", queue._table.name)
    keeping.dead = lease.DeadStack(
        lease.Lease(pid=1, process_started=0.0, started_at=T0.isoformat()),
        last_seen=T0 + timedelta(minutes=5),
        stopped=(),
    )
    keeping.kept = persistence.KeptState(1, 1, 1, 1, 0, taken_at=T0 + timedelta(minutes=4))
    # When the next start restores that snapshot and records what was lost
    said = keeping._after_a_crash(keeping.kept, keeping.dead)
    keeping.record_lost_runs(
        boto3.resource("dynamodb"),
        lambda job: PROCESSING.run_id_of(PREFIX, job) or TRAINING.run_id_of(PREFIX, job),
    )
    # Then the notice names the jobs, and the upload queue holds the run, lost, with why
    assert f"{PROCESSING.job_name(PREFIX, run_id)}" in said
    (lost,) = queue.lost_runs()
    assert (lost.run_id, lost.job_name) == (run_id, PROCESSING.job_name(PREFIX, run_id))
    assert "killed" in lost.reason and "before a snapshot held it" in lost.reason


@pytest.mark.parametrize("status", ["Failed", "Stopped"])
def test_a_job_that_fails_or_is_stopped_still_lets_the_next_upload_start(
    pipeline: dict[str, Any], status: str
) -> None:
    first, second = upload(0), upload(1)
    arrive(pipeline, first)
    arrive(pipeline, second)
    assert end(pipeline, job_of(first), status) == job_of(second)


def test_waiting_uploads_start_in_the_order_they_reached_the_queue(
    pipeline: dict[str, Any],
) -> None:
    # Given a running job and three later uploads whose events reach the queue in an order
    # other than their event times' (S3 orders different keys only to the second, and
    # EventBridge may deliver out of order)
    running, early, middle, late = upload(0), upload(1), upload(2), upload(3)
    arrive(pipeline, running)
    for uploaded in (late, early, middle):
        assert arrive(pipeline, uploaded) is Outcome.QUEUED
    # When each job ends in turn, the next upload to have arrived starts, one at a time
    order = []
    job = job_of(running)
    while (job := end(pipeline, job)) is not None:  # type: ignore[assignment]
        order.append(job)
    assert order == [job_of(late), job_of(early), job_of(middle)]


def test_the_counter_numbers_uploads_once_each_in_arrival_order(
    pipeline: dict[str, Any],
) -> None:
    # Given twelve uploads in the same second, and one of them delivered three times
    queue: UploadQueue = pipeline["queue"]
    same_second = [upload(0) for _ in range(12)]
    # When their events reach the queue, the sixth one repeatedly
    run_ids = [queue.arrive(u, T0).run_id for u in same_second]
    repeats = [queue.arrive(same_second[5], T0).run_id for _ in range(3)]
    # Then each upload has its own number, in arrival order, and a repeat gets the same one
    assert [upload_sequence(r) for r in run_ids] == list(range(1, 13))
    assert repeats == [run_ids[5]] * 3
    assert sorted(run_ids) == run_ids
    # And the next new upload continues the count
    assert upload_sequence(queue.arrive(upload(0), T0).run_id) == 13


def test_two_events_of_one_upload_handled_at_once_share_one_run_id(
    pipeline: dict[str, Any],
) -> None:
    # Given an upload whose second event is handled while the first is being numbered
    queue: UploadQueue = pipeline["queue"]
    uploaded = upload(0)

    class _RepeatMeanwhile(UploadQueue):
        def _next_sequence(self) -> int:
            number = super()._next_sequence()
            if not hasattr(self, "_repeated"):
                self._repeated = queue.arrive(uploaded, T0)
            return number

    racing = _RepeatMeanwhile(queue._table)
    # When both finish
    first = racing.arrive(uploaded, T0)
    # Then they agree on the run id the other got first (its number is left unused)
    assert first.run_id == racing._repeated.run_id == queue.run_id_of(uploaded)


def test_a_same_key_upload_older_by_sequencer_that_arrives_later_is_superseded(
    pipeline: dict[str, Any],
) -> None:
    # Given two uploads of one key, S3's sequencer says which was written last; the newer
    # one's event reaches the queue first (the shorter sequencer is the older: S3 pads it)
    older = upload(0).model_copy(update={"sequencer": "FF"})
    newer = older.model_copy(update={"revision": "v2", "sequencer": "0100"})
    assert arrive(pipeline, newer) is Outcome.STARTED
    # When the older one's event arrives, and again
    started = start_processing(
        older, pipeline["settings"], pipeline["sagemaker"], pipeline["s3"], pipeline["queue"], T0
    )
    again = start_processing(
        older, pipeline["settings"], pipeline["sagemaker"], pipeline["s3"], pipeline["queue"], T0
    )
    # Then it is reported superseded, naming the newer run, and never queued
    assert started.outcome is again.outcome is Outcome.SUPERSEDED
    assert job_of(newer).removeprefix("fleetcast-p-") in (started.reason or "")
    assert pipeline["queue"].waiting() == []
    # And a same-key upload newer still, and a repeat of the newer one, go ahead
    newest = older.model_copy(update={"revision": "v3", "sequencer": "0101"})
    assert arrive(pipeline, newest) is Outcome.QUEUED
    assert arrive(pipeline, newer) is Outcome.ALREADY_STARTED
    assert end(pipeline, job_of(newer)) == job_of(newest)


def test_repeated_events_start_nothing_twice(pipeline: dict[str, Any]) -> None:
    # Given a running job and one waiting upload
    first, second, third = upload(0), upload(1), upload(2)
    arrive(pipeline, first)
    arrive(pipeline, second)
    # When the first upload's event comes again, and the waiting one's too
    assert arrive(pipeline, first) is Outcome.ALREADY_STARTED
    assert arrive(pipeline, second) is Outcome.QUEUED
    assert [w.run_id for w in pipeline["queue"].waiting()] == [
        job_of(second)[len("fleetcast-p-") :]
    ]
    # And the first job's end event is delivered twice, with a third upload waiting
    arrive(pipeline, third)
    assert end(pipeline, job_of(first)) == job_of(second)
    assert end(pipeline, job_of(first)) is None
    # Then the third upload still waits for the second job, which is running
    assert started(pipeline, first, second, third) == {job_of(first), job_of(second)}
    assert end(pipeline, job_of(second)) == job_of(third)


def test_a_lost_end_event_does_not_block_the_queue(pipeline: dict[str, Any]) -> None:
    # Given a job that ended without its end event reaching the function
    first, second = upload(0), upload(1)
    arrive(pipeline, first)
    set_status(job_of(first), "Completed")
    # When the next upload arrives, it takes over the lease and starts
    assert arrive(pipeline, second) is Outcome.STARTED


def test_a_lease_whose_job_was_never_created_is_taken_over_after_the_grace_period(
    pipeline: dict[str, Any],
) -> None:
    # Given a lease taken by a function that died before creating its job
    queue: UploadQueue = pipeline["queue"]
    orphan = Lease(run_id="q0000000914-20261130t085900", job_name="fleetcast-p-never", taken_at=T0)
    assert queue.take_lease(orphan, replacing=None)
    later = upload(1)
    # When an upload arrives within the grace period, it waits
    assert arrive(pipeline, later, now=T0 + timedelta(minutes=1)) is Outcome.QUEUED
    # And once the grace period is over, the next event starts it
    assert arrive(pipeline, upload(2), now=T0 + timedelta(minutes=10)) is Outcome.QUEUED
    assert started(pipeline, later) == {job_of(later)}


def test_two_functions_racing_for_the_lease_start_one_job(pipeline: dict[str, Any]) -> None:
    # Given two waiting uploads and a free lease
    queue: UploadQueue = pipeline["queue"]
    held = Lease(run_id="q0000000915-20261130t090000", job_name="fleetcast-p-x", taken_at=T0)
    # When two functions try to take it at once, only the first succeeds
    assert queue.take_lease(held, replacing=None)
    contender = held.model_copy(update={"run_id": "q0000000916-20261130t090100"})
    assert not queue.take_lease(contender, replacing=None)
    # And taking over is only possible from the lease as it was read
    stale_read = held.model_copy(update={"taken_at": T0 - timedelta(minutes=1)})
    assert not queue.take_lease(contender, replacing=stale_read)
    assert queue.take_lease(contender, replacing=held)
    lease = queue.lease()
    assert lease is not None and lease.run_id == contender.run_id


class _OlderEventMeanwhile(UploadQueue):
    """The real queue, with an older upload's event handled by another function at the
    moment this one takes the lease (the race two close uploads can run)."""

    def __init__(self, table: Any, older: Upload) -> None:
        super().__init__(table)
        self._older: Upload | None = older

    def take_lease(self, lease: Lease, replacing: Lease | None) -> bool:
        taken = super().take_lease(lease, replacing)
        if self._older is not None:
            older, self._older = self._older, None
            run_id = self.run_id_of(older)
            assert run_id is not None
            self.add(WaitingUpload(run_id=run_id, upload=older))
        return taken


def test_an_older_upload_queued_while_the_lease_is_taken_goes_first(
    pipeline: dict[str, Any],
) -> None:
    # Given two uploads whose events are handled at the same moment: the older one was
    # numbered first, the newer one's function gets to the lease first
    older, newer = upload(0), upload(1)
    pipeline["queue"].arrive(older, T0)
    racing = {**pipeline, "queue": _OlderEventMeanwhile(pipeline["queue"]._table, older)}
    # When the newer one's function takes the lease and the older one joins the queue
    outcome = arrive(racing, newer)
    # Then the older upload is processed first and the newer one waits for it
    assert outcome is Outcome.QUEUED
    assert started(pipeline, older, newer) == {job_of(older)}
    assert end(pipeline, job_of(older)) == job_of(newer)


def test_an_older_same_key_upload_queued_first_keeps_its_place_when_its_event_repeats(
    pipeline: dict[str, Any],
) -> None:
    # Given a running job, then an older and a newer upload of one key queued in that order
    running = upload(0)
    older = upload(1).model_copy(update={"sequencer": "0A"})
    newer = older.model_copy(update={"revision": "v2", "sequencer": "0B"})
    arrive(pipeline, running)
    assert arrive(pipeline, older) is arrive(pipeline, newer) is Outcome.QUEUED
    # When the older one's event is delivered again
    repeated = arrive(pipeline, older)
    # Then it still waits, and the two run in S3's order
    assert repeated is Outcome.QUEUED
    assert end(pipeline, job_of(running)) == job_of(older)
    assert end(pipeline, job_of(older)) == job_of(newer)
