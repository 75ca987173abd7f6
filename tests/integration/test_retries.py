"""Throttling and 5xx from SageMaker, S3 and DynamoDB are retried with back-off by
botocore (``fleetcast_common.aws.RETRY_CONFIG``), over real HTTP: a fault injector in
front of moto answers the next requests with each service's own error, then lets them
through. Past the retry budget the error surfaces and nothing is lost or done twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from forecast_api_helpers import api_event, call, load_forecast_api
from test_registration import register_run, trained
from test_upload_queue import forget_processing_jobs, processing_settings, upload

from fleetcast.embedded.faults import SERVER_ERROR, THROTTLED, FaultInjector, applied
from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.aws import RETRY_CONFIG
from fleetcast_common.forecasting import LiveModelCache
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import Outcome, start_processing
from fleetcast_common.registry import ModelRegistry, ModelStatus
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts.model_archive import HoldoutMetrics

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "q0000000917-20261130t100000"
# Past the budget, what matters is what fleetcast does with the error, not how long
# botocore backs off first (up to 20 s a retry): a client with fewer retries shows it.
FEW_RETRIES = RETRY_CONFIG.merge(Config(retries={"mode": "adaptive", "max_attempts": 1}))
METRICS = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.03, mae=5.0, naive_smape=0.05, naive_mae=8.0
)


@pytest.fixture
def faulty(aws_env: str) -> Iterator[dict[str, Any]]:
    """Clients with fleetcast's retry configuration, talking to moto through an injector,
    and the tables and bucket of template.yaml behind it."""
    gateway = Gateway()
    injector = FaultInjector(gateway.aws_app)
    gateway.add_route(injector.matches, injector)
    gateway.start()
    session = boto3.session.Session()

    def client(service: str, config: Config = RETRY_CONFIG) -> Any:
        return session.client(service, config=config, endpoint_url=gateway.url)

    template = LocalTemplate(ROOT / "template.yaml", stack_name=f"retry{uuid.uuid4().hex[:6]}")
    dynamodb = client("dynamodb")
    tables = {}
    for logical_id in ("UploadQueueTable", "ModelRegistryTable"):
        properties = template.resolve(template.resources[logical_id]["Properties"])
        tables[logical_id] = template.physical_name(logical_id)
        dynamodb.create_table(
            TableName=tables[logical_id],
            KeySchema=properties["KeySchema"],
            AttributeDefinitions=properties["AttributeDefinitions"],
            BillingMode="PAY_PER_REQUEST",
        )
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    client("s3").create_bucket(Bucket=bucket)
    forget_processing_jobs()

    def resource(service: str, config: Config = RETRY_CONFIG) -> Any:
        return session.resource(service, config=config, endpoint_url=gateway.url)

    yield {
        "injector": injector,
        "client": client,
        "resource": resource,
        "registry_table": tables["ModelRegistryTable"],
        "queue_table": tables["UploadQueueTable"],
        "sagemaker": client("sagemaker"),
        "s3": client("s3"),
        "bucket": bucket,
        "queue": UploadQueue(resource("dynamodb").Table(tables["UploadQueueTable"])),
        "registry": ModelRegistry(resource("dynamodb").Table(tables["ModelRegistryTable"])),
    }
    for table in tables.values():
        dynamodb.delete_table(TableName=table)
    gateway.stop()


def start(world: dict[str, Any], uploaded: Upload) -> Any:
    settings = processing_settings(world["bucket"], world["queue_table"])
    return start_processing(uploaded, settings, world["sagemaker"], world["s3"], world["queue"])


def processing_jobs(world: dict[str, Any], run_id: str) -> int:
    found = world["sagemaker"].list_processing_jobs(NameContains=run_id)
    return len(found["ProcessingJobSummaries"])


@pytest.mark.parametrize("faults", [THROTTLED, SERVER_ERROR], ids=["throttled", "5xx"])
def test_starting_a_job_rides_out_throttling_and_server_errors(
    faulty: dict[str, Any], faults: dict[str, Any]
) -> None:
    # Given every service the start goes through failing its next requests
    injector: FaultInjector = faulty["injector"]
    for service, times in (("sagemaker", 2), ("dynamodb", 2), ("s3", 2)):
        injector.inject(service, faults[service], times)
    # When an upload's event arrives
    started = start(faulty, upload(0))
    # Then the job is started, exactly once, after every fault was answered
    assert started.outcome is Outcome.STARTED
    assert {s: injector.pending(s) for s in ("sagemaker", "dynamodb", "s3")} == dict.fromkeys(
        ("sagemaker", "dynamodb", "s3"), 0
    )
    assert injector.answered == {"sagemaker": 2, "dynamodb": 2, "s3": 2}
    assert processing_jobs(faulty, started.run_id) == 1
    assert faulty["queue"].waiting() == []


def test_past_the_retry_budget_the_error_surfaces_and_the_upload_keeps_its_place(
    faulty: dict[str, Any],
) -> None:
    injector: FaultInjector = faulty["injector"]
    impatient = {**faulty, "sagemaker": faulty["client"]("sagemaker", FEW_RETRIES)}
    # Given SageMaker throttling every attempt to create the job (a request and a retry)
    uploaded = upload(0)
    injector.inject("sagemaker", THROTTLED["sagemaker"], 2, operation="CreateProcessingJob")
    # When an upload's event arrives, the function fails (so the event is retried)
    with pytest.raises(ClientError) as raised:
        start(impatient, uploaded)
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert injector.answered["sagemaker"] == 2
    # And the upload still waits, with the lease free for the retry
    assert [w.upload for w in faulty["queue"].waiting()] == [uploaded]
    assert faulty["queue"].lease() is None
    # And when the event is delivered again, the job starts
    assert start(faulty, uploaded).outcome is Outcome.STARTED


def test_a_job_created_whose_answer_was_lost_is_not_created_twice(
    faulty: dict[str, Any],
) -> None:
    # Given SageMaker creating the job but failing to answer
    injector: FaultInjector = faulty["injector"]
    injector.inject(
        "sagemaker", applied(SERVER_ERROR["sagemaker"]), operation="CreateProcessingJob"
    )
    # When the upload's event arrives (botocore retries the create)
    started = start(faulty, upload(0))
    # Then one job exists and the upload no longer waits
    assert started.run_id is not None
    assert processing_jobs(faulty, started.run_id) == 1
    assert faulty["queue"].waiting() == []


@pytest.mark.parametrize("faults", [THROTTLED, SERVER_ERROR], ids=["throttled", "5xx"])
def test_registration_rides_out_faults_and_registers_each_model_once(
    faulty: dict[str, Any], faults: dict[str, Any]
) -> None:
    # Given a finished training job, and S3 and DynamoDB failing some requests, one of
    # them a conditional promotion that DynamoDB applied before failing to answer
    customers = [f"c{i}" for i in range(5)]
    trained(faulty["s3"], faulty["bucket"], RUN_ID, dict.fromkeys(customers, METRICS))
    injector: FaultInjector = faulty["injector"]
    injector.inject("s3", faults["s3"], 2)
    injector.inject("dynamodb", faults["dynamodb"], 2)
    injector.inject("dynamodb", applied(SERVER_ERROR["dynamodb"]), operation="UpdateItem")
    # When the models are registered
    report = register_run(faulty["s3"], faulty["bucket"], faulty["registry"], RUN_ID)
    # Then every fault was met, and every customer has version 1 of this run live
    assert injector.pending("s3") == injector.pending("dynamodb") == 0
    assert report.count("registered") + report.count("repeated") == len(customers)
    assert report.run.complete
    registry: ModelRegistry = faulty["registry"]
    for customer_id in customers:
        live = registry.live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (RUN_ID, 1)
        record = registry.model(customer_id, RUN_ID)
        assert record is not None
        assert (record.status, record.model_version) == (ModelStatus.LIVE, 1)


@pytest.fixture(scope="module")
def forecast_api() -> Any:
    return load_forecast_api("fleetcast_forecast_api_retries")


@pytest.mark.parametrize("route", ["forecast", "model"])
def test_a_registry_that_stays_throttled_is_a_503_with_retry_after(
    faulty: dict[str, Any],
    forecast_api: Any,
    monkeypatch: pytest.MonkeyPatch,
    route: str,
) -> None:
    # Given the forecast API whose registry reads are throttled past the retry budget
    impatient = faulty["resource"]("dynamodb", FEW_RETRIES)
    registry = ModelRegistry(impatient.Table(faulty["registry_table"]))
    monkeypatch.setattr(forecast_api, "_registry", lambda: registry)
    monkeypatch.setattr(forecast_api, "_live_models", lambda: LiveModelCache(registry, 0))
    faulty["injector"].inject("dynamodb", THROTTLED["dynamodb"], 2)
    # When a client asks
    status, headers, body = call(forecast_api, api_event(f"api_{route}.json", "42"))
    # Then it is told to come back, not that something broke
    assert (status, body["error"]) == (503, "RegistryUnavailable")
    assert int(headers["Retry-After"]) > 0
    assert faulty["injector"].pending("dynamodb") == 0
