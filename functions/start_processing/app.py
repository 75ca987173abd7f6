"""Starts SageMaker Processing jobs, one at a time and in upload order:

- S3 "Object Created" under incoming/ (via EventBridge): queue the upload, and start it
  if no processing job is running;
- Processing Job State Change (ours, Completed/Failed/Stopped): start the next upload.
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client, dynamodb_table
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import JobStart, Outcome, processing_ended, start_processing
from fleetcast_common.sagemaker_events import (
    ObjectCreated,
    ProcessingJobEnded,
    StartProcessingEvent,
)
from fleetcast_common.settings import ProcessingSettings, read_on_first_use
from fleetcast_common.upload_queue import UploadQueue

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(ProcessingSettings)


@functools.cache
def _queue() -> UploadQueue:
    return UploadQueue(dynamodb_table(settings().upload_queue_table))


def upload_from(event: ObjectCreated) -> Upload:
    """The upload an S3 "Object Created" event describes (EventBridge carries the key
    exactly as stored; classic S3 notifications URL-encode it)."""
    detail = event.detail
    return Upload(
        bucket=detail.bucket.name,
        key=detail.object.key,
        revision=detail.object.version_id or detail.object.etag,
        size=int(detail.object.size or 0),
        uploaded_at=event.time,
        version_id=detail.object.version_id,
        etag=detail.object.etag or None,
        sequencer=detail.object.sequencer,
    )


def _uploaded(event: ObjectCreated) -> JobStart:
    upload = upload_from(event)
    logger.set_correlation_id(upload.key)
    started = start_processing(upload, settings(), client("sagemaker"), client("s3"), _queue())
    logger.info(
        "processing job %s",
        started.outcome,
        extra={"upload": upload.model_dump(mode="json"), **started.model_dump()},
    )
    return started


def _ended(event: ProcessingJobEnded) -> JobStart:
    ended_job = event.detail.job_name
    logger.set_correlation_id(ended_job)
    started = processing_ended(ended_job, settings(), client("sagemaker"), client("s3"), _queue())
    logger.info(
        "after %s (%s): next processing job %s",
        ended_job,
        event.detail.status,
        started.outcome,
        extra={"ended_job": ended_job, **started.model_dump()},
    )
    return started


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=StartProcessingEvent)
def lambda_handler(
    event: ObjectCreated | ProcessingJobEnded, context: LambdaContext
) -> dict[str, Any]:
    started = _ended(event) if isinstance(event, ProcessingJobEnded) else _uploaded(event)
    if started.outcome is Outcome.STARTED:
        metrics.add_metric(name="ProcessingJobsStarted", unit=MetricUnit.Count, value=1)
    elif started.outcome is Outcome.QUEUED:
        metrics.add_metric(name="UploadsQueued", unit=MetricUnit.Count, value=1)
    elif started.outcome is Outcome.SUPERSEDED:
        logger.warning("upload superseded: %s", started.reason, extra=started.model_dump())
        metrics.add_metric(name="UploadsSuperseded", unit=MetricUnit.Count, value=1)
    # Uploads whose object changed before their turn: this event's own, or others the
    # queue moved past while dispatching.
    replaced = [started] if started.outcome is Outcome.REPLACED else []
    for skipped in replaced + started.not_processed:
        logger.warning(
            "upload not processed: %s", skipped.reason, extra=skipped.model_dump(mode="json")
        )
        metrics.add_metric(name="UploadsReplaced", unit=MetricUnit.Count, value=1)
    return started.model_dump(mode="json")
