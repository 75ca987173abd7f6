"""Processing Job State Change (Completed, ours) -> CreateTrainingJob, sharded by customer.

Logs carry the run id (from the job name) as their correlation id, as register-models'
do; start-processing logs the upload's key with the run id it starts. RowsRejected comes
from processing's summary of the run.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import envelopes, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client
from fleetcast_common.pipeline import Outcome, start_training
from fleetcast_common.processing_report import rows_rejected
from fleetcast_common.sagemaker_events import ProcessingJobStateChange
from fleetcast_common.settings import TrainingSettings, read_on_first_use
from fleetcast_contracts.stages import PROCESSING

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(TrainingSettings)


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=ProcessingJobStateChange, envelope=envelopes.EventBridgeEnvelope)
def lambda_handler(event: ProcessingJobStateChange, context: LambdaContext) -> dict[str, Any]:
    processing_job = event.job_name
    logger.set_correlation_id(PROCESSING.run_id_of(settings().job_name_prefix, processing_job))
    logger.append_keys(processing_job=processing_job)
    started = start_training(processing_job, settings(), client("sagemaker"), client("s3"))
    logger.info(
        "training job %s",
        started.outcome,
        extra={"processing_job": processing_job, **started.model_dump()},
    )
    if started.outcome is Outcome.STARTED:
        metrics.add_metric(name="TrainingJobsStarted", unit=MetricUnit.Count, value=1)
    # Once per run: a repeated event finds the training job started already.
    if started.run_id is not None and started.outcome is not Outcome.ALREADY_STARTED:
        rejected = rows_rejected(client("s3"), settings().artifacts_bucket, started.run_id)
        if rejected is not None:
            metrics.add_metric(name="RowsRejected", unit=MetricUnit.Count, value=rejected)
    return started.model_dump(mode="json")
