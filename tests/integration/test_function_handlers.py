"""The Lambda handlers as modules: importing one needs no environment (settings are read
on first use), and the SageMaker events they take are typed by Powertools' parser.

Integration tier only because the X-Ray SDK that Powertools' Tracer imports opens a UDP
socket; nothing here talks to AWS or moto."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import ValidationError as ParserValidationError
from function_helpers import REPO_ROOT, load_function
from pydantic import ValidationError

from fleetcast.embedded.lambdas import LambdaContext
from fleetcast_common.sagemaker_events import ProcessingJobStateChange, TrainingJobStateChange

FUNCTIONS = sorted(path.name for path in (REPO_ROOT / "functions").iterdir() if path.is_dir())
# Variables some function's settings require; none is set while importing.
SETTINGS_VARIABLES = (
    "RAW_BUCKET",
    "ARTIFACTS_BUCKET",
    "REGISTRY_TABLE",
    "JOB_NAME_PREFIX",
    "SAGEMAKER_ROLE_ARN",
    "ENDPOINT_NAME",
    "UPLOAD_QUEUE_TABLE",
    "PROCESSING_IMAGE_URI",
    "TRAINING_IMAGE_URI",
    "COST_STATE_TABLE",
    "COST_REPORT_SENDER",
    "COST_REPORT_RECIPIENTS",
)
pytestmark = pytest.mark.integration
CONTEXT = LambdaContext("test", 512, "request-1", "arn:aws:lambda:us-east-1:1:function:test")


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((REPO_ROOT / "events" / name).read_text())
    return loaded


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")


@pytest.mark.parametrize("directory", FUNCTIONS)
def test_a_handler_imports_without_its_environment_and_says_what_is_missing_when_used(
    directory: str, bare_environment: None
) -> None:
    # Given no function variable set, when the handler module is imported, it imports
    module = load_function(directory)
    # and only reading its settings fails, naming a missing variable
    with pytest.raises(ValidationError) as raised:
        module.settings()
    assert any(name in str(raised.value) for name in SETTINGS_VARIABLES)


def test_the_sample_job_events_parse_into_the_typed_details() -> None:
    processing = ProcessingJobStateChange.model_validate(
        sample("processing_job_completed.json")["detail"]
    )
    assert processing.job_name.startswith("fleetcast-p-")
    assert processing.status == "Completed"
    training = TrainingJobStateChange.model_validate(
        sample("training_job_completed.json")["detail"]
    )
    assert training.status == "Completed"
    assert training.resources is not None and training.resources.instance_count == 2
    failed = TrainingJobStateChange.model_validate(sample("training_job_failed.json")["detail"])
    assert failed.status == "Failed" and failed.failure_reason


@pytest.mark.parametrize(
    ("directory", "sample_name", "field"),
    [
        ("start_training", "processing_job_completed.json", "ProcessingJobName"),
        ("register_models", "training_job_completed.json", "TrainingJobName"),
    ],
)
def test_an_event_without_its_job_name_is_refused_naming_the_field(
    directory: str, sample_name: str, field: str, bare_environment: None
) -> None:
    # Given a job state change whose detail lacks the job name
    event = sample(sample_name)
    del event["detail"][field]
    # When the handler gets it, then the parser refuses it before anything is read
    module = load_function(directory)
    with pytest.raises(ParserValidationError) as raised:
        module.lambda_handler(event, CONTEXT)
    assert field in str(raised.value)
