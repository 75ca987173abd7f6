"""S3 "Object Created" under incoming/ (via EventBridge) -> CreateProcessingJob."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import (
    S3EventBridgeNotificationEvent,
    event_source,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import Outcome, start_processing
from fleetcast_common.settings import ProcessingSettings

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = ProcessingSettings.from_env()


def upload_from(event: S3EventBridgeNotificationEvent) -> Upload:
    detail = event.detail
    return Upload(
        bucket=detail.bucket.name,
        key=detail.object.key,  # EventBridge keys are not URL-encoded
        revision=detail.object.version_id or detail.object.etag,
        size=detail.object.size or 0,
        uploaded_at=datetime.fromisoformat(event.time),
    )


@logger.inject_lambda_context(correlation_id_path="detail.object.key", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_source(data_class=S3EventBridgeNotificationEvent)
def lambda_handler(event: S3EventBridgeNotificationEvent, context: LambdaContext) -> dict[str, Any]:
    upload = upload_from(event)
    started = start_processing(upload, settings, client("sagemaker"), client("s3"))
    logger.info(
        "processing job %s",
        started.outcome,
        extra={"upload": upload.model_dump(mode="json"), **started.model_dump()},
    )
    if started.outcome is Outcome.STARTED:
        metrics.add_metric(name="ProcessingJobsStarted", unit=MetricUnit.Count, value=1)
    return started.model_dump(mode="json")
