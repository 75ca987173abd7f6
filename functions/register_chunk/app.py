"""Registration chunks (SQS) -> the model registry.

Each message is one chunk of a run's registration, queued by register-models
(fleetcast_common.registration). A chunk that fails is reported alone (partial batch
response): SQS delivers it again after the visibility timeout and, after the queue's
maxReceiveCount, moves it to the chunks dead-letter queue, whose alarm fires; the other
chunks of the batch and of the run go on. Each failure is logged with its traceback and
kept on the run's partition of the registry (why, and how many deliveries failed), where
``fleetcast status`` reads it. Redelivery is harmless: decisions already made stand, and
a chunk is counted in its run once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.base import ExceptionInfo, FailureResponse
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client, dynamodb_table
from fleetcast_common.chunk_queue import ChunkMessage
from fleetcast_common.registration import register_chunk
from fleetcast_common.registry import FailedChunk, ModelRegistry
from fleetcast_common.settings import RegistrationSettings, read_on_first_use

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(RegistrationSettings)


class LoggingBatchProcessor(BatchProcessor):
    """Powertools' processor, logging each failed record with its traceback (it only
    reports them to SQS: the error was nowhere in this function's log)."""

    def failure_handler(self, record: Any, exception: ExceptionInfo) -> FailureResponse:
        logger.error("chunk failed: its message goes back to the queue", exc_info=exception[1])
        return super().failure_handler(record, exception)


processor = LoggingBatchProcessor(event_type=EventType.SQS, model=ChunkMessage)


@tracer.capture_method
def register(record: ChunkMessage) -> None:
    chunk = record.body
    logger.set_correlation_id(chunk.run_id)
    logger.append_keys(training_job=chunk.training_job, chunk=chunk.chunk_id)
    registry = ModelRegistry(dynamodb_table(settings().registry_table))
    try:
        report = register_chunk(chunk, settings().artifacts_bucket, client("s3"), registry)
    except Exception as error:
        registry.record_chunk_failure(
            chunk.run_id,
            FailedChunk(
                chunk_id=chunk.chunk_id,
                number=chunk.number,
                reason=f"{type(error).__name__}: {error}",
                deliveries=int(record.attributes.ApproximateReceiveCount),
                failed_at=datetime.now(UTC),
            ),
        )
        raise
    for failure in report.failures:
        logger.warning(
            "customer not trained", extra=failure.model_dump(mode="json", exclude={"metadata"})
        )
    for lost in report.lost:
        logger.error("customer lost with the training job", extra=lost.model_dump(mode="json"))
    counts = report.counts
    if report.first_delivery:
        metrics.add_metric(name="ModelsTrained", unit=MetricUnit.Count, value=counts.trained)
        metrics.add_metric(name="ModelsRegistered", unit=MetricUnit.Count, value=counts.registered)
        metrics.add_metric(name="ModelsRejected", unit=MetricUnit.Count, value=counts.rejected)
        metrics.add_metric(name="ModelsFailed", unit=MetricUnit.Count, value=counts.failed_training)
    logger.info(
        "chunk registered",
        extra={
            **counts.model_dump(),
            "first_delivery": report.first_delivery,
            "run_registered": report.run_registered,
        },
    )


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=register, processor=processor, context=context
    )
