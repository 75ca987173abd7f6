"""What the pipeline functions tell CloudWatch: structured JSON logs that carry the run id
as their correlation id from the upload to registration, and EMF metrics.

Each handler runs on its sample event (events/) against a moto server, with the
environment template.yaml gives it; Powertools prints both the log lines and the EMF
blob to stdout, which is what Lambda sends to CloudWatch Logs.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext
from function_helpers import load_function
from shard_helpers import processing_summary_json
from test_registration import trained

from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.queues import sqs_event
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.registration import read_registration_record
from fleetcast_contracts import layout
from fleetcast_contracts.ids import run_id_for_upload
from fleetcast_contracts.model_archive import HoldoutMetrics
from fleetcast_contracts.shards import train_part_name

ROOT = Path(__file__).resolve().parents[2]
# The run the job samples are named for (events/README.md).
RUN_ID = "q0000000909-20261129t120000"
GOOD = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.03, mae=5.0, naive_smape=0.05, naive_mae=8.0
)


class _Context(LambdaContext):
    _function_name = "test-function"
    _memory_limit_in_mb = 512
    _invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    _aws_request_id = "11111111-2222-3333-4444-555555555555"


def _event(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "events" / name).read_text())
    return loaded


@pytest.fixture
def world(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Every table of template.yaml under a stack name of its own, a fresh artifacts
    bucket, and the pipeline functions' template environment (as the local stack resolves
    it) pointed at them."""
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name=f"obs{uuid.uuid4().hex[:8]}",
        parameter_overrides=LOCAL_IMAGE_PARAMETERS,
    )
    dynamodb = boto3.client("dynamodb")
    tables = []
    for logical_id, resource in template.resources_of_type("AWS::DynamoDB::Table").items():
        properties = template.resolve(resource["Properties"])
        tables.append(template.physical_name(logical_id))
        dynamodb.create_table(
            TableName=tables[-1],
            KeySchema=properties["KeySchema"],
            AttributeDefinitions=properties["AttributeDefinitions"],
            BillingMode="PAY_PER_REQUEST",
            **{k: properties[k] for k in ("GlobalSecondaryIndexes",) if k in properties},
        )
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    for function in (
        "StartProcessingFunction",
        "StartTrainingFunction",
        "RegisterModelsFunction",
        "RegisterChunkFunction",
    ):
        for name, value in template.function_environment(function).items():
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("ARTIFACTS_BUCKET", bucket)
    sqs = boto3.client("sqs")
    chunks = sqs.create_queue(QueueName=f"chunks-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    monkeypatch.setenv("REGISTRATION_QUEUE_URL", chunks)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "INFO")
    yield {"s3": s3, "bucket": bucket, "sqs": sqs, "chunks": chunks}
    for table in tables:
        dynamodb.delete_table(TableName=table)


def _invoke(
    function_dir: str, event: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run a handler; return its log records and its one EMF blob."""
    handler = load_function(function_dir)
    # Powertools keeps one stdlib logger per service, configured by the first module that
    # made it: its handler holds that test's stdout and its level that test's
    # POWERTOOLS_LOG_LEVEL (the forecast API tests load theirs at WARNING). Use this test's.
    handler.logger.registered_handler.stream = sys.stdout
    handler.logger.setLevel("INFO")
    capsys.readouterr()
    handler.lambda_handler(event, _Context())
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    (emf,) = [line for line in lines if "_aws" in line]
    logs = [line for line in lines if "_aws" not in line]
    assert logs, "the handler logged nothing"
    return logs, emf


def _chunks_event(world: dict[str, Any]) -> dict[str, Any]:
    """The registration chunks the coordinator queued, as one SQS event."""
    messages = world["sqs"].receive_message(
        QueueUrl=world["chunks"], MaxNumberOfMessages=10, AttributeNames=["All"]
    )
    return sqs_event(messages.get("Messages", []), "arn:aws:sqs:us-east-1:123456789012:chunks")


def _metric_values(emf: dict[str, Any]) -> dict[str, Any]:
    (directive,) = emf["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "Fleetcast"
    assert directive["Dimensions"] == [["service"]]
    return {m["Name"]: emf[m["Name"]] for m in directive["Metrics"]}


def test_start_processing_logs_the_upload_key_and_its_run_id(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an upload event, of an object in the raw bucket
    event = _event("s3_object_created.json")
    detail = event["detail"]
    raw = boto3.client("s3")
    raw.create_bucket(Bucket=detail["bucket"]["name"])
    put = raw.put_object(Bucket=detail["bucket"]["name"], Key=detail["object"]["key"], Body=b"")
    detail["object"]["etag"] = put["ETag"].strip('"')
    del detail["object"]["version-id"]
    # (the first upload of a fresh queue table)
    run_id = run_id_for_upload(1, datetime.fromisoformat(event["time"]))
    # When the function starts the processing job
    logs, emf = _invoke("start_processing", event, capsys)
    # Then its logs carry both the upload's key and the run id the next functions log
    assert {line["correlation_id"] for line in logs} == {detail["object"]["key"]}
    assert any(line.get("run_id") == run_id for line in logs)
    assert {line["service"] for line in logs} == {"fleetcast"}
    assert _metric_values(emf) == {"ProcessingJobsStarted": [1.0]}
    assert emf["service"] == "fleetcast"


def test_start_training_logs_the_run_id_and_counts_rejected_rows(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a processing run that wrote two training parts and rejected 3 rows
    s3, bucket = world["s3"], world["bucket"]
    for part in (0, 1):
        s3.put_object(
            Bucket=bucket, Key=layout.train_prefix(RUN_ID) + train_part_name(part), Body=b""
        )
    s3.put_object(
        Bucket=bucket,
        Key=f"{layout.report_prefix(RUN_ID)}summary.json",
        Body=processing_summary_json(["7", "8", "9", "10", "11", "12", "13"], rows_rejected=3),
    )
    # When its completion event arrives (moto accepts a second CreateTrainingJob of the
    # same name, so the repeated-event path is left to the unit tests of pipeline.py)
    event = _event("processing_job_completed.json")
    logs, emf = _invoke("start_training", event, capsys)
    # Then the logs are the run's and the rows are counted
    assert {line["correlation_id"] for line in logs} == {RUN_ID}
    assert {line["processing_job"] for line in logs} == {f"fleetcast-p-{RUN_ID}"}
    assert _metric_values(emf) == {"TrainingJobsStarted": [1.0], "RowsRejected": [3.0]}


def test_register_models_logs_the_run_id_and_counts_models(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a finished training job: two customers trained, one failed
    trained(world["s3"], world["bucket"], RUN_ID, {"3": None, "7": GOOD, "42": GOOD}, hosts=1)
    event = _event("training_job_completed.json")
    event["detail"]["ResourceConfig"]["InstanceCount"] = 1
    # When its completion event arrives, and the chunk it queued is registered
    logs, emf = _invoke("register_models", event, capsys)
    assert _metric_values(emf) == {"RegistrationChunksQueued": [1.0]}
    chunk_logs, emf = _invoke("register_chunk", _chunks_event(world), capsys)
    # Then the logs are the run's, and the metrics count what the manifest says
    assert {line["correlation_id"] for line in logs + chunk_logs} == {RUN_ID}
    assert {line["training_job"] for line in logs + chunk_logs} == {f"fleetcast-t-{RUN_ID}"}
    assert _metric_values(emf) == {
        "ModelsTrained": [2.0],
        "ModelsRegistered": [2.0],
        "ModelsRejected": [0.0],
        "ModelsFailed": [1.0],
    }


def test_a_failed_training_job_registers_what_it_wrote_and_logs_what_it_lost(
    world: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a failed job whose one finished instance trained 42, while 7 was never reached
    s3, bucket = world["s3"], world["bucket"]
    trained(s3, bucket, RUN_ID, {"42": GOOD}, hosts=1)
    s3.put_object(
        Bucket=bucket,
        Key=f"{layout.report_prefix(RUN_ID)}summary.json",
        Body=processing_summary_json(["7", "42"]),
    )
    event = _event("training_job_failed.json")
    # And a warm process whose last invocation appended a customer's id to the service's
    # logger (as the forecast API does for each request)
    load_function("forecast_api").logger.append_keys(customer_id="7")
    # When its failure event arrives
    logs, emf = _invoke("register_models", event, capsys)
    # Then the logs are the run's: the job's failure, and the customer lost with its reason
    assert {line["correlation_id"] for line in logs} == {RUN_ID}
    errors = [line for line in logs if line["level"] == "ERROR"]
    assert errors[0]["failure_reason"] == event["detail"]["FailureReason"]
    # (only the line about the lost customer names one: no key of the last invocation's)
    (lost,) = [line for line in errors if line.get("customer_id") == "7"]
    assert lost["reason"].endswith(event["detail"]["FailureReason"])
    assert _metric_values(emf) == {"TrainingJobsFailed": [1.0], "RegistrationChunksQueued": [1.0]}
    # And the model it wrote is registered and counted by its chunk
    _, emf = _invoke("register_chunk", _chunks_event(world), capsys)
    assert _metric_values(emf) == {
        "ModelsTrained": [1.0],
        "ModelsRegistered": [1.0],
        "ModelsRejected": [0.0],
        "ModelsFailed": [0.0],
    }
    # And the run's registration record names the lost customer
    record = read_registration_record(s3, bucket, RUN_ID)
    assert record is not None and [c.customer_id for c in record.lost] == ["7"]
