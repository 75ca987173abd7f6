"""An upload that leaves the queue without a run (superseded by a newer upload of its key,
or replaced before its turn) is recorded in the upload-queue table, where ``fleetcast
status`` reads it, not only logged. Against a moto server."""

from __future__ import annotations

from typing import Any

from test_upload_queue import T0, arrive, end, job_of, pipeline, set_status, status, upload
from test_upload_staging import HEADER, put_upload, unversioned

from fleetcast_common.pipeline import Outcome, processing_ended, start_processing
from fleetcast_contracts.stages import PROCESSING

__all__ = ["pipeline", "unversioned"]  # the fixtures, shared with the queue's tests


def test_a_superseded_upload_is_recorded_with_the_run_that_superseded_it(
    pipeline: dict[str, Any], registry_table: Any
) -> None:
    # Given two uploads of one key, the newer one's event reaching the queue first
    older = upload(0).model_copy(update={"sequencer": "FF"})
    newer = older.model_copy(update={"revision": "v2", "sequencer": "0100"})
    assert arrive(pipeline, newer) is Outcome.STARTED
    # When the older one's event arrives, twice
    for _ in range(2):
        started = start_processing(
            older,
            pipeline["settings"],
            pipeline["sagemaker"],
            pipeline["s3"],
            pipeline["queue"],
            T0,
        )
        assert started.outcome is Outcome.SUPERSEDED
    # Then the queue keeps one record of it: its key, version, reason and the newer run
    newer_run = job_of(newer).removeprefix("fleetcast-p-")
    (record,) = pipeline["queue"].not_processed()
    assert record.run_id == job_of(older).removeprefix("fleetcast-p-")
    assert (record.upload.key, record.upload.version_id) == (older.key, older.version_id)
    assert (record.outcome, record.superseded_by) == ("superseded", newer_run)
    assert record.reason == started.reason
    # And fleetcast status lists it beside the newer run, as done, saying why
    runs = {run.run_id: run for run in status(pipeline, registry_table)}
    shown = runs[record.run_id]
    assert shown.job(PROCESSING).status == "Superseded" and shown.done
    assert (shown.source_key, shown.source_version) == (older.key, older.version_id)
    assert shown.superseded_by == newer_run
    assert shown.not_processed_reason == started.reason
    assert runs[newer_run].job(PROCESSING).status == "InProgress"


def test_a_replaced_upload_is_recorded_and_shown_when_the_queue_moves_past_it(
    pipeline: dict[str, Any], unversioned: str, registry_table: Any
) -> None:
    # Given an upload waiting behind a running job in an unversioned bucket, then
    # written over
    assert arrive(pipeline, upload(0)) is Outcome.STARTED
    running = pipeline["queue"].lease().job_name
    key = "incoming/daily.csv"
    replaced = put_upload(pipeline, unversioned, key, HEADER + b"sk,2024-01-01,1\n", 1)
    assert arrive(pipeline, replaced) is Outcome.QUEUED
    newer = put_upload(pipeline, unversioned, key, HEADER + b"sk,2024-01-21,2\n", 2)
    assert arrive(pipeline, newer) is Outcome.QUEUED
    # When the running job ends, and its end event comes again
    set_status(running, "Completed")
    ended = processing_ended(
        running, pipeline["settings"], pipeline["sagemaker"], pipeline["s3"], pipeline["queue"]
    )
    (skipped,) = ended.not_processed
    assert end(pipeline, running) is None
    # Then the replaced upload is recorded once, with the ETag its event named and why
    (record,) = pipeline["queue"].not_processed()
    assert record.run_id == skipped.run_id == job_of(replaced).removeprefix("fleetcast-p-")
    assert (record.outcome, record.superseded_by) == ("replaced", None)
    assert (record.upload.key, record.upload.etag) == (key, replaced.etag)
    assert record.reason == skipped.reason
    # And fleetcast status shows it, done, with its key and ETag as its version
    (shown,) = [run for run in status(pipeline, registry_table) if run.run_id == record.run_id]
    assert shown.job(PROCESSING).status == "Replaced" and shown.done
    assert (shown.source, shown.source_key, shown.source_version) == (
        "daily.csv",
        key,
        replaced.etag,
    )
    assert shown.not_processed_reason == skipped.reason
