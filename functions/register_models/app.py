"""SageMaker Training Job State Change (Completed, Failed, Stopped) -> the model registry.

A failed or stopped job still registers every model it wrote and that was checked
(fleetcast_common.registration); the customers it lost are logged with the reason and
kept in the run's registration record, which ``fleetcast status`` shows.

Logs carry the run id (from the job name) as their correlation id, as start-training's
do; start-processing logs the upload's key with the run id it starts.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import envelopes, event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.aws import client, dynamodb_table
from fleetcast_common.ids import run_id_from_job_name
from fleetcast_common.registration import register_models, write_registration_record
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.sagemaker_events import TrainingJobStateChange
from fleetcast_common.settings import RegistrationSettings, read_on_first_use

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(RegistrationSettings)


@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=TrainingJobStateChange, envelope=envelopes.EventBridgeEnvelope)
def lambda_handler(event: TrainingJobStateChange, context: LambdaContext) -> dict[str, Any]:
    job = event.job_name
    status = event.status
    run_id = run_id_from_job_name(settings().job_name_prefix, job)
    logger.set_correlation_id(run_id)
    logger.append_keys(training_job=job)
    if run_id is None:
        logger.info("not a fleetcast training job", extra={"training_job": job})
        return {"outcome": "ignored", "training_job": job}
    job_failure = None
    if status != "Completed":
        job_failure = event.failure_reason or f"the job was {status.lower()}"
        logger.error(
            "training job did not complete: registering the models it wrote",
            extra={"training_job": job, "status": status, "failure_reason": job_failure},
        )
        metrics.add_metric(name="TrainingJobsFailed", unit=MetricUnit.Count, value=1)

    registry = ModelRegistry(dynamodb_table(settings().registry_table))
    s3 = client("s3")
    report = register_models(
        run_id,
        job,
        settings().artifacts_bucket,
        settings().quality_gate_ratio,
        s3,
        registry,
        job_failure=job_failure,
    )
    write_registration_record(s3, settings().artifacts_bucket, report)
    expected_hosts = event.resources.instance_count if event.resources else report.hosts_reporting
    if report.hosts_reporting < expected_hosts:
        logger.error(
            "some training instances left no manifest",
            extra={"expected": expected_hosts, "found": report.hosts_reporting},
        )
    for failure in report.failures:
        logger.warning(
            "customer not trained", extra=failure.model_dump(mode="json", exclude={"metadata"})
        )
    for lost in report.lost:
        logger.error("customer lost with the training job", extra=lost.model_dump(mode="json"))
    metrics.add_metric(name="ModelsTrained", unit=MetricUnit.Count, value=len(report.customers))
    metrics.add_metric(name="ModelsRegistered", unit=MetricUnit.Count, value=report.registered)
    metrics.add_metric(name="ModelsRejected", unit=MetricUnit.Count, value=report.rejected)
    metrics.add_metric(name="ModelsFailed", unit=MetricUnit.Count, value=report.failed_training)
    summary = report.model_dump(mode="json", exclude={"customers", "failures", "lost"})
    logger.info("models registered", extra={**summary, "lost": len(report.lost)})
    return {"outcome": "registered", "status": status, **summary, "lost": len(report.lost)}
