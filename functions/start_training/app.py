"""Processing Job State Change (Completed, ours) -> CreateTrainingJob, sharded by customer."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes import EventBridgeEvent, event_source
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client
from fleetcast_common.pipeline import Outcome, start_training
from fleetcast_common.settings import TrainingSettings

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = TrainingSettings.from_env()


@logger.inject_lambda_context(correlation_id_path="detail.ProcessingJobName", log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_source(data_class=EventBridgeEvent)
def lambda_handler(event: EventBridgeEvent, context: LambdaContext) -> dict[str, Any]:
    processing_job = str(event.detail["ProcessingJobName"])
    started = start_training(processing_job, settings, client("sagemaker"), client("s3"))
    logger.info(
        "training job %s",
        started.outcome,
        extra={"processing_job": processing_job, **started.model_dump()},
    )
    if started.outcome is Outcome.STARTED:
        metrics.add_metric(name="TrainingJobsStarted", unit=MetricUnit.Count, value=1)
    return started.model_dump(mode="json")
