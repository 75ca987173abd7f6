"""SageMaker Training Job State Change (Completed, Failed, Stopped) -> registration chunks.

The coordinator of a run's registration: it reads the instances' manifests, writes the
run's registration record (its failures, and for a failed or stopped job the customers it
lost, with the reason) and queues one message per chunk of at most REGISTRATION_CHUNK_SIZE
customers for the register-chunk function (fleetcast_common.registration). Its work grows
with the number of instances, not of customers.

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
from fleetcast_common.chunk_queue import enqueue_chunks
from fleetcast_common.registration import plan_registration, start_registration
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.sagemaker_events import TrainingJobStateChange
from fleetcast_common.settings import RegistrationCoordinatorSettings, read_on_first_use
from fleetcast_contracts.stages import TRAINING

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(RegistrationCoordinatorSettings)


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=TrainingJobStateChange, envelope=envelopes.EventBridgeEnvelope)
def lambda_handler(event: TrainingJobStateChange, context: LambdaContext) -> dict[str, Any]:
    job = event.job_name
    status = event.status
    run_id = TRAINING.run_id_of(settings().job_name_prefix, job)
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

    s3 = client("s3")
    plan, chunks = plan_registration(
        run_id, job, settings().artifacts_bucket, settings().chunk_size, s3, job_failure=job_failure
    )
    registry = ModelRegistry(dynamodb_table(settings().registry_table))
    nothing_to_register = start_registration(plan, s3, settings().artifacts_bucket, registry)
    enqueue_chunks(client("sqs"), settings().chunk_queue_url, chunks)

    expected_hosts = event.resources.instance_count if event.resources else plan.hosts_reporting
    if plan.hosts_reporting < expected_hosts:
        logger.error(
            "some training instances left no manifest",
            extra={"expected": expected_hosts, "found": plan.hosts_reporting},
        )
    for lost in plan.lost:
        logger.error("customer lost with the training job", extra=lost.model_dump(mode="json"))
    metrics.add_metric(name="RegistrationChunksQueued", unit=MetricUnit.Count, value=len(chunks))
    summary = {
        "status": status,
        "chunks": len(chunks),
        "hosts_reporting": plan.hosts_reporting,
        "failed_training": len(plan.failures),
        "lost": len(plan.lost),
    }
    logger.info("registration chunks queued", extra=summary)
    return {"outcome": "registered" if nothing_to_register else "queued", **summary}
