"""The first ``sam deploy`` of an account: no image in ECR yet, maybe no endpoint quota.

Issue 27, finding 3: the endpoint was created by the first deploy, which then needed the
inference image in ECR (or the whole stack rolled back) and billed an instance around the
clock from that day, and the image parameters defaulted to ``fleetcast-*:latest``, which
is no ECR URI. The template's properties, read as CloudFormation reads them (conditions,
parameter constraints), not a snapshot of it.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from forecast_api_helpers import load_forecast_api
from template_helpers import REPO_ROOT, local_template

from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS, ParameterError, validate
from fleetcast_common.forecast_endpoint import ForecastEndpoint
from fleetcast_common.forecasting import ForecastApiSettings, NoEndpointError
from fleetcast_common.jobs import Upload, processing_job_request, training_job_request
from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_contracts.images import (
    OPTIONAL_ECR_IMAGE_URI_PATTERN,
    MissingImageError,
    checked_image_uri,
)

ADDRESSES = {"CostReportRecipients": "ops@example.com", "CostReportSender": "cost@example.com"}
FIRST_DEPLOY = local_template(ADDRESSES)
PARAMETERS: dict[str, dict[str, Any]] = FIRST_DEPLOY.body["Parameters"]
DECLARED: dict[str, dict[str, Any]] = FIRST_DEPLOY.body["Resources"]
SERVING = {"ForecastModel", "ForecastEndpointConfig", "ForecastEndpoint"}
IMAGE_PARAMETERS = ("ProcessingImageUri", "TrainingImageUri", "InferenceImageUri")
ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


def samconfig_overrides(environment: str) -> dict[str, str]:
    pairs = tomllib.loads((REPO_ROOT / "samconfig.toml").read_text())[environment]["deploy"][
        "parameters"
    ]["parameter_overrides"]
    return dict(pair.split("=", 1) for pair in pairs)


def references(value: Any, condition: str | None = None) -> Iterator[tuple[str, str | None]]:
    """Each resource name ``value`` refers to (Ref, GetAtt, ${...} of Sub), with the
    condition under whose true branch of Fn::If it sits, if any."""
    if isinstance(value, list):
        for item in value:
            yield from references(item, condition)
    elif isinstance(value, dict):
        if list(value) == ["Fn::If"]:
            name, when_true, when_false = value["Fn::If"]
            yield from references(when_true, name)
            yield from references(when_false, condition)
            return
        for key, item in value.items():
            if key == "Ref" and isinstance(item, str):
                yield item, condition
            elif key == "Fn::GetAtt":
                yield item[0], condition
            elif key == "Fn::Sub":
                text = item if isinstance(item, str) else item[0]
                for name in re.findall(r"\$\{([A-Za-z0-9]+)[.}]", text):
                    yield name, condition
                if not isinstance(item, str):
                    yield from references(item[1], condition)
            else:
                yield from references(item, condition)


# ---------------------------------------------------------------- the template


def test_the_first_deploy_needs_no_image_and_creates_no_endpoint() -> None:
    # Given only what a new account's deploy must name (the report's addresses)
    validate(PARAMETERS, ADDRESSES)
    # Then no image is needed, and nothing that bills an instance is created
    assert {name: PARAMETERS[name]["Default"] for name in IMAGE_PARAMETERS} == dict.fromkeys(
        IMAGE_PARAMETERS, ""
    )
    assert SERVING.isdisjoint(FIRST_DEPLOY.resources)
    assert {DECLARED[name]["Condition"] for name in SERVING} == {"HasEndpoint"}


@pytest.mark.parametrize(
    ("create_endpoint", "created"), [("true", True), ("false", False)], ids=["asked", "declined"]
)
def test_the_endpoint_comes_with_its_image_unless_declined(
    create_endpoint: str, created: bool
) -> None:
    stack = local_template(
        {**ADDRESSES, **LOCAL_IMAGE_PARAMETERS, "CreateEndpoint": create_endpoint}
    )
    assert set(stack.resources) >= SERVING if created else SERVING.isdisjoint(stack.resources)


@pytest.mark.parametrize(("environment", "created"), [("default", False), ("prod", True)])
def test_the_dev_environment_has_no_endpoint_even_with_its_images(
    environment: str, created: bool
) -> None:
    # Given samconfig.toml's environment, its images pushed (issue 41: the "cheap dev
    # stack" ran an ml.c5.xlarge endpoint around the clock)
    overrides = samconfig_overrides(environment)
    stack = local_template({**ADDRESSES, **overrides, **LOCAL_IMAGE_PARAMETERS})
    # Then only prod gets an endpoint
    assert set(stack.resources) >= SERVING if created else SERVING.isdisjoint(stack.resources)
    if not created:
        # And the forecast route says how to turn it on
        with pytest.raises(NoEndpointError, match=r"CreateEndpoint=true.*samconfig\.toml"):
            ForecastEndpoint(runtime=None, endpoint_name="").forecast("42/r.tar.gz", 7)


def test_nothing_refers_to_the_endpoint_where_it_may_not_exist() -> None:
    # CloudFormation refuses a template whose unconditioned resource (or output) refers
    # to a conditioned one outside Fn::If: the first deploy would fail validation.
    sections = {**DECLARED, **FIRST_DEPLOY.body["Outputs"]}
    unguarded = {
        (name, target)
        for name, body in sections.items()
        if body.get("Condition") != "HasEndpoint"
        for target, guard in references(body)
        if target in SERVING and guard != "HasEndpoint"
    }
    assert unguarded == set()


def test_without_an_endpoint_the_api_function_is_told_so() -> None:
    # Given the forecast function's environment on the first deploy
    variables = FIRST_DEPLOY.resolve(
        DECLARED["ForecastApiFunction"]["Properties"]["Environment"]["Variables"]
    )
    # Then its endpoint name is empty, which its settings accept, and a forecast says why
    assert variables["ENDPOINT_NAME"] == ""
    settings = ForecastApiSettings.model_validate({"REGISTRY_TABLE": "registry", **variables})
    with pytest.raises(NoEndpointError, match=r"no forecast endpoint yet.*make images"):
        ForecastEndpoint(runtime=None, endpoint_name=settings.endpoint_name).forecast(
            "42/r.tar.gz", 7
        )


# ---------------------------------------------------------------- image URIs


@pytest.mark.parametrize("parameter", IMAGE_PARAMETERS)
def test_image_parameters_take_ecr_uris_only_and_say_so(parameter: str) -> None:
    spec = PARAMETERS[parameter]
    # One pattern, the contract's: the template, the functions and `fleetcast images` agree.
    assert spec["AllowedPattern"] == OPTIONAL_ECR_IMAGE_URI_PATTERN
    assert "ECR image URI" in spec["ConstraintDescription"]
    for accepted in (
        "",
        f"{ECR}/fleetcast-training:0a1b2c3d4e5f",
        f"{ECR}/team/fleetcast-training:v1.2",
        "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/fleetcast-training:abc",
        f"{ECR}/fleetcast-training@sha256:{'a' * 64}",
    ):
        validate(PARAMETERS, {**ADDRESSES, parameter: accepted})
    for refused in (
        "fleetcast-training:latest",  # the old default: Docker Hub
        "docker.io/library/python:3.11",
        f"{ECR}/fleetcast-training",  # no tag: Docker's implicit latest
        f"{ECR}/Fleetcast:v1",  # ECR repositories are lower case
        "12345.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:v1",
    ):
        with pytest.raises(ParameterError, match=f"'{parameter}' failed to satisfy.*ECR image URI"):
            validate(PARAMETERS, {**ADDRESSES, parameter: refused})


def test_a_job_is_never_requested_without_an_image() -> None:
    common = {
        "RAW_BUCKET": "raw",
        "ARTIFACTS_BUCKET": "artifacts",
        "REGISTRY_TABLE": "registry",
        "JOB_NAME_PREFIX": "fleetcast",
        "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/jobs",
    }
    processing = ProcessingSettings.model_validate(
        {**common, "PROCESSING_IMAGE_URI": "", "UPLOAD_QUEUE_TABLE": "queue"}
    )
    upload = Upload(
        bucket="raw",
        key="incoming/a.csv",
        revision="v1",
        size=1,
        uploaded_at=datetime(2026, 12, 1, tzinfo=UTC),
    )
    with pytest.raises(MissingImageError, match=r"no ProcessingImageUri yet.*make images"):
        processing_job_request(processing, "q0000000001-20261201t000000", upload, "u.csv", False)
    training = TrainingSettings.model_validate(
        {**common, "TRAINING_IMAGE_URI": "fleetcast-training:latest"}
    )
    with pytest.raises(
        ValueError, match="TrainingImageUri='fleetcast-training:latest' must be an ECR"
    ):
        training_job_request(training, "q0000000001-20261201t000000", 2)
    assert checked_image_uri(LOCAL_IMAGE_PARAMETERS["TrainingImageUri"], "TrainingImageUri")


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_the_api_answers_503_no_endpoint_without_a_retry_after() -> None:
    api = load_forecast_api("fleetcast_forecast_api_first_deploy")
    response = api.error_response(NoEndpointError())
    assert response.status_code == 503
    assert json.loads(response.body)["error"] == "NoEndpoint"
    # It comes with a deploy, not in seconds: a client should not be told to retry soon.
    assert "Retry-After" not in response.headers
