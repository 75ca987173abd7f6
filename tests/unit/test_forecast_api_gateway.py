"""The local stack's API Gateway, its pure parts: routes from template.yaml, the proxy
event it builds (compared with the sample events AWS sends), throttling and quotas."""

from __future__ import annotations

from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventModel
from forecast_api_helpers import REPO_ROOT, sample

from fleetcast.embedded.api.models import TokenBucket, UsagePlan
from fleetcast.embedded.api.responses import proxy_event
from fleetcast.embedded.api.urls import ApiRoute
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.template import LocalTemplate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def template_routes() -> list[tuple[str, str, str]]:
    """(method, path, function) of every Api event in template.yaml."""
    template = LocalTemplate(REPO_ROOT / "template.yaml")
    routes = []
    for function, resource in template.resources_of_type("AWS::Serverless::Function").items():
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] == "Api":
                properties = event["Properties"]
                routes.append((properties["Method"].upper(), properties["Path"], function))
    return sorted(routes)


def route(resource: str = "/customers/{customer_id}/forecast") -> ApiRoute:
    return ApiRoute.create("GET", resource, function=None, api_key_required=True)  # type: ignore[arg-type]


def test_the_template_declares_the_two_get_routes_on_one_function() -> None:
    assert template_routes() == [
        ("GET", "/customers/{customer_id}/forecast", "ForecastApiFunction"),
        ("GET", "/customers/{customer_id}/model", "ForecastApiFunction"),
    ]


@pytest.mark.parametrize(
    ("path", "parameters"),
    [
        ("/customers/42/forecast", {"customer_id": "42"}),
        ("/customers/a%2Db/forecast", {"customer_id": "a-b"}),
        ("/customers/42/forecast/", None),
        ("/customers/42/43/forecast", None),
        ("/customers//forecast", None),
        ("/customers/42/model", None),
    ],
)
def test_routes_match_one_segment_per_path_parameter(
    path: str, parameters: dict[str, str] | None
) -> None:
    assert route().path_parameters(path) == parameters


def test_a_greedy_parameter_takes_the_rest_of_the_path() -> None:
    assert route("/files/{proxy+}").path_parameters("/files/a/b.csv") == {"proxy": "a/b.csv"}


def built_event(sample_name: str) -> dict[str, Any]:
    """What the local API builds for the request the sample describes."""
    original = sample(sample_name)
    query = "&".join(f"{k}={v}" for k, v in (original["queryStringParameters"] or {}).items())
    return proxy_event(
        route=route(original["resource"]),
        path=original["path"],
        method="GET",
        query=query,
        headers=list(original["headers"].items()),
        body=b"",
        path_parameters=original["pathParameters"],
        stage="v1",
        api_id="a1b2c3d4e5",
        request_id="6f1d2c9e-3b4a-4e8f-9a1b-2c3d4e5f6a7b",
        source_ip="127.0.0.1",
        api_key=("key-value", "key-id"),
    )


@pytest.mark.parametrize("sample_name", ["api_forecast.json", "api_model.json"])
def test_the_proxy_event_has_the_shape_api_gateway_sends(sample_name: str) -> None:
    # Given the event API Gateway sends for a request, and the one the local API builds
    original, built = sample(sample_name), built_event(sample_name)
    # Then both have the same fields, and the same values where the request decides them
    assert set(built) == set(original)
    assert set(built["requestContext"]) <= set(original["requestContext"])
    assert set(built["requestContext"]["identity"]) == set(original["requestContext"]["identity"])
    for name in (
        "resource",
        "path",
        "httpMethod",
        "headers",
        "multiValueHeaders",
        "queryStringParameters",
        "multiValueQueryStringParameters",
        "pathParameters",
        "body",
        "isBase64Encoded",
    ):
        assert built[name] == original[name], name
    for name in ("resourcePath", "httpMethod", "path", "stage", "accountId", "protocol"):
        assert built["requestContext"][name] == original["requestContext"][name], name
    assert built["requestContext"]["identity"]["apiKey"] == "key-value"
    APIGatewayProxyEventModel.model_validate(built)
    APIGatewayProxyEventModel.model_validate(original)


def test_a_request_without_a_query_string_has_null_parameters_like_api_gateway() -> None:
    built = built_event("api_model.json")
    assert built["queryStringParameters"] is None
    assert built["multiValueQueryStringParameters"] is None


def test_the_throttle_allows_a_burst_then_the_steady_rate() -> None:
    # Given 10 requests per second with bursts of 5
    clock = Clock()
    bucket = TokenBucket(rate=10, burst=5, clock=clock)
    # Then 5 go at once and the sixth waits for a token
    assert [bucket.take() for _ in range(6)] == [True] * 5 + [False]
    clock.now += 0.1
    assert bucket.take() is True
    assert bucket.take() is False
    # And an idle second refills only up to the burst
    clock.now += 10
    assert sum(bucket.take() for _ in range(10)) == 5


def test_the_quota_counts_per_key() -> None:
    plan = UsagePlan(rate=None, burst=None, quota=2)
    assert [plan.admit("key-a") for _ in range(3)] == [None, None, "Limit Exceeded"]
    assert plan.admit("key-b") is None


def test_a_throttled_key_does_not_slow_another() -> None:
    plan = UsagePlan(rate=0.001, burst=1, quota=None)
    assert plan.admit("key-a") is None
    assert plan.admit("key-a") == "Too Many Requests"
    assert plan.admit("key-b") is None


def test_the_local_stack_names_the_serving_resources_as_cloudformation_would() -> None:
    # Given template.yaml as the local stack resolves it (with its images: the endpoint
    # exists only with one)
    template = LocalTemplate(
        REPO_ROOT / "template.yaml", parameter_overrides=LOCAL_IMAGE_PARAMETERS
    )
    config = template.resolve(template.resources["ForecastEndpointConfig"]["Properties"])
    endpoint = template.resolve(template.resources["ForecastEndpoint"]["Properties"])
    # Then GetAtt gives the names the API calls take, Ref the ARNs, as on AWS
    (variant,) = config["ProductionVariants"]
    assert variant["ModelName"] == template.physical_name("ForecastModel")
    assert endpoint["EndpointConfigName"] == template.physical_name("ForecastEndpointConfig")
    assert endpoint["EndpointName"] == "fleetcast-forecast"
    assert template.ref("ForecastEndpoint") == (
        "arn:aws:sagemaker:us-east-1:123456789012:endpoint/fleetcast-forecast"
    )
    environment = template.function_environment("ForecastApiFunction")
    assert environment["ENDPOINT_NAME"] == "fleetcast-forecast"
