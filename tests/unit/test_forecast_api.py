"""The forecast API without AWS: request validation through the handler with the sample
events, the endpoint adapter's error mapping (botocore Stubber), errors to responses,
and the OpenAPI document kept in the repository.

The registry lookups and the happy path need DynamoDB: tests/integration/test_forecast_api_handler.py.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from forecast_api_helpers import REPO_ROOT, api_event, call, load_forecast_api
from hypothesis import given
from hypothesis import strategies as st

from fleetcast.openapi import forecast_api_document
from fleetcast_common import forecasting
from fleetcast_common.forecast_endpoint import RETRY_AFTER_SECONDS, ForecastEndpoint
from fleetcast_common.forecasting import (
    EndpointFailedError,
    EndpointUnavailableError,
    InvalidRequestError,
    UnknownCustomerError,
)
from fleetcast_contracts.quantiles import MAX_QUANTILES

# An error response publishes no metric; the handler silences that warning, pytest resets it.
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

ENDPOINT = "fleetcast-forecast"
TARGET_MODEL = "42/q0000000909-20261129t120000.tar.gz"


@pytest.fixture(scope="module")
def api() -> Any:
    return load_forecast_api("fleetcast_forecast_api_unit")


# ---------------------------------------------------------------- request validation


@pytest.mark.parametrize(
    ("customer_id", "query", "complaint"),
    [
        ("-42", {"period": "7"}, "invalid customer id '-42'"),
        ("a" * 65, {"period": "7"}, "invalid customer id"),
        ("4 2", {"period": "7"}, "invalid customer id '4 2'"),
        (
            "42",
            {"period": "0"},
            "period must be a whole number of the customer's model's periods from 1 to its "
            "longest forecast (365 days for a daily model, 720 hours for an hourly model), "
            "not '0'",
        ),
        ("42", {"period": "721"}, "not '721'"),
        ("42", {"period": "7.5"}, "not '7.5'"),
        ("42", {"period": "week"}, "not 'week'"),
        ("42", {"period": "7", "periods": "30"}, "unknown query parameter 'periods'"),
        ("42", {"customer": "43"}, "unknown query parameter 'customer'"),
        ("42", {"quantiles": ""}, "quantiles: '' is not a decimal number"),
        ("42", {"quantiles": "0.1,,0.9"}, "quantiles: '' is not a decimal number"),
        ("42", {"quantiles": "0.1,p90"}, "quantiles: 'p90' is not a decimal number"),
        ("42", {"quantiles": "nan"}, "quantiles: 'nan' is not a decimal number"),
        ("42", {"quantiles": "-0.1"}, "quantiles: '-0.1' is not a decimal number"),
        ("42", {"quantiles": "0.5,1"}, "quantiles: 1.0 is not between 0 and 1 (exclusive)"),
        ("42", {"quantiles": "0"}, "quantiles: 0.0 is not between 0 and 1"),
        ("42", {"quantiles": "50"}, "quantiles: 50.0 is not between 0 and 1"),
        (
            "42",
            {"quantiles": ",".join(f"0.{i:02d}" for i in range(1, 22))},
            "quantiles: at most 20 quantiles, not 21",
        ),
        ("42", {"quantiles": ",".join(["0.5"] * 21)}, "quantiles: at most 20 quantiles, not 21"),
        ("42", {"quantile": "0.5"}, "unknown query parameter 'quantile'"),
    ],
    ids=[
        "leading dash",
        "too long",
        "space",
        "zero",
        "721",
        "fraction",
        "word",
        "typo",
        "extra",
        "empty quantiles",
        "empty quantile",
        "quantile name",
        "nan quantile",
        "negative quantile",
        "quantile 1",
        "quantile 0",
        "percent",
        "21 quantiles",
        "21 repeated",
        "quantile typo",
    ],
)
def test_bad_requests_get_400_saying_what_is_wrong(
    api: Any, customer_id: str, query: dict[str, str], complaint: str
) -> None:
    # Given the sample forecast event for a bad customer id or query
    event = api_event(customer_id=customer_id, query=query)
    # When the handler gets it (nothing reaches AWS: sockets are off)
    status, headers, body = call(api, event)
    # Then it is a 400 with a JSON message naming the problem, and no trace
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    assert body["error"] == "InvalidRequest"
    assert complaint in body["message"]
    assert "Traceback" not in json.dumps(body)


def test_repeated_quantiles_parameters_are_refused(api: Any) -> None:
    # Given quantiles given twice rather than comma-separated
    event = api_event(query={"quantiles": "0.9"})
    event["multiValueQueryStringParameters"] = {"quantiles": ["0.1", "0.9"]}
    # When the handler gets it, then it says how to give them
    status, _, body = call(api, event)
    assert (status, body["error"]) == (400, "InvalidRequest")
    assert "quantiles must be given once, as comma-separated numbers" in body["message"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.1,0.5,0.9", (0.1, 0.5, 0.9)),
        (" 0.9 , 0.1,0.10 ", (0.1, 0.9)),
        (".5", (0.5,)),
        ("1e-3,0.999", (0.001, 0.999)),
    ],
)
def test_quantiles_are_read_sorted_without_repeats(text: str, expected: tuple[float, ...]) -> None:
    assert forecasting.parse_quantiles(text) == expected


# Any value the document allows: 1 to MAX_QUANTILES numbers strictly between 0 and 1.
DOCUMENTED_QUANTILES = st.lists(
    st.floats(min_value=0, max_value=1, exclude_min=True, exclude_max=True),
    min_size=1,
    max_size=MAX_QUANTILES,
)


@given(DOCUMENTED_QUANTILES)
def test_every_quantiles_value_the_document_allows_is_accepted(values: list[float]) -> None:
    # Given quantiles the OpenAPI document allows, written as a client writes numbers
    # (Python's shortest repr, 1e-05 among them), comma-separated (explode: false)
    text = ",".join(map(str, values))
    # Then the API reads them, sorted and without repeats
    assert forecasting.parse_quantiles(text) == tuple(sorted(set(values)))


def test_the_model_route_takes_no_query_parameters(api: Any) -> None:
    status, _, body = call(api, api_event("api_model.json", query={"period": "7"}))
    assert (status, body["error"]) == (400, "InvalidRequest")
    assert "this route takes none" in body["message"]


def test_a_route_the_api_does_not_have_is_a_json_404(api: Any) -> None:
    event = api_event()
    event["path"] = "/customers/42/history"
    status, _, body = call(api, event)
    assert (status, body["error"]) == (404, "NotFound")


# ---------------------------------------------------------------- errors to responses


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (InvalidRequestError("no"), 400, "InvalidRequest"),
        (UnknownCustomerError("42"), 404, "UnknownCustomer"),
        (EndpointFailedError("model failed"), 502, "EndpointFailed"),
        (EndpointUnavailableError("loading", 3), 503, "EndpointUnavailable"),
    ],
    ids=["400", "404", "502", "503"],
)
def test_each_domain_error_has_one_status(
    api: Any, error: Exception, status: int, code: str
) -> None:
    response = api.error_response(error)
    assert response.status_code == status
    assert json.loads(response.body) == {"error": code, "message": str(error)}
    retry_after = response.headers.get("Retry-After")
    assert retry_after == ("3" if status == 503 else None)


def test_unexpected_errors_are_a_500_without_details(api: Any) -> None:
    response = api.unexpected_error(KeyError("secret internals"))
    assert response.status_code == 500
    assert "secret" not in response.body
    assert json.loads(response.body)["error"] == "InternalError"


# ---------------------------------------------------------------- the endpoint adapter


def runtime_client() -> Any:
    return boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )


def answer(document: object) -> dict[str, Any]:
    raw = json.dumps(document).encode()
    return {
        "Body": StreamingBody(io.BytesIO(raw), len(raw)),
        "ContentType": "application/json",
        "InvokedProductionVariant": "AllTraffic",
    }


EXPECTED_REQUEST = {
    "EndpointName": ENDPOINT,
    "TargetModel": TARGET_MODEL,
    "ContentType": "application/json",
    "Accept": "application/json",
    "Body": json.dumps({"period": 7}),
}


def test_the_adapter_sends_the_period_to_the_target_model_and_reads_the_forecast() -> None:
    client = runtime_client()
    forecast = {
        "customer_id": "42",
        "model_version": "q0000000909-20261129t120000",
        "forecast": [{"ds": "2026-11-30", "yhat": 1.5, "yhat_lower": 1.0, "yhat_upper": 2.0}],
    }
    with Stubber(client) as stub:
        stub.add_response("invoke_endpoint", answer(forecast), EXPECTED_REQUEST)
        got = ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)
    assert got.model_dump(exclude={"clipped_at_zero"}) == forecast
    assert got.clipped_at_zero == 0


@pytest.mark.parametrize(
    ("code", "status", "retry_after"),
    [
        ("ModelNotReadyException", 429, RETRY_AFTER_SECONDS["ModelNotReadyException"]),
        ("ServiceUnavailable", 503, RETRY_AFTER_SECONDS["ServiceUnavailable"]),
        ("ThrottlingException", 400, RETRY_AFTER_SECONDS["ThrottlingException"]),
        ("InternalFailure", 500, RETRY_AFTER_SECONDS["InternalFailure"]),
        ("InternalDependencyException", 530, RETRY_AFTER_SECONDS["InternalDependencyException"]),
    ],
)
def test_not_ready_busy_or_down_is_worth_a_retry(code: str, status: int, retry_after: int) -> None:
    client = runtime_client()
    with Stubber(client) as stub, pytest.raises(EndpointUnavailableError) as raised:
        stub.add_client_error("invoke_endpoint", code, "try later", status, EXPECTED_REQUEST)
        ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)
    assert raised.value.retry_after_seconds == retry_after
    assert code in str(raised.value)


def test_a_model_error_is_a_failure_with_the_containers_status() -> None:
    client = runtime_client()
    with Stubber(client) as stub, pytest.raises(EndpointFailedError, match=r"status 507"):
        stub.add_client_error(
            "invoke_endpoint",
            "ModelError",
            "Received server error (507) from model",
            424,
            EXPECTED_REQUEST,
            modeled_fields={"OriginalStatusCode": 507, "OriginalMessage": "out of memory"},
        )
        ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)


def test_a_missing_endpoint_or_model_archive_is_a_failure() -> None:
    client = runtime_client()
    with Stubber(client) as stub, pytest.raises(EndpointFailedError, match="ValidationError"):
        stub.add_client_error(
            "invoke_endpoint", "ValidationError", "Failed to download model data", 400
        )
        ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)


def test_an_answer_that_is_not_a_forecast_is_a_failure() -> None:
    client = runtime_client()
    with Stubber(client) as stub, pytest.raises(EndpointFailedError, match="not a forecast"):
        stub.add_response("invoke_endpoint", answer({"predictions": [1, 2]}), EXPECTED_REQUEST)
        ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)


def test_an_unreachable_endpoint_is_worth_a_retry() -> None:
    # Given a client whose every request fails to connect
    client = runtime_client()

    def refuse(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://runtime.sagemaker.example")

    client.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", refuse)
    # Then the adapter says the endpoint is unavailable, with a Retry-After
    with pytest.raises(EndpointUnavailableError, match="cannot be reached") as raised:
        ForecastEndpoint(client, ENDPOINT).forecast(TARGET_MODEL, 7)
    assert raised.value.retry_after_seconds > 0


# ---------------------------------------------------------------- contract and documents


def test_the_committed_openapi_document_is_what_the_code_generates() -> None:
    committed = (REPO_ROOT / "docs" / "openapi.json").read_text()
    assert committed == forecast_api_document(), "docs/openapi.json is stale: run `make openapi`"


def test_the_openapi_document_describes_the_key_routes_and_errors() -> None:
    document = json.loads(forecast_api_document())
    assert document["components"]["securitySchemes"]["apiKey"] == {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
    }
    forecast = document["paths"]["/customers/{customer_id}/forecast"]["get"]
    assert set(forecast["responses"]) == {"200", "400", "403", "404", "413", "429", "502", "503"}
    assert "Retry-After" in forecast["responses"]["503"]["headers"]
    parameters = {p["name"]: p for p in forecast["parameters"]}
    assert parameters["quantiles"]["required"] is False
    assert "Comma-separated quantiles" in parameters["quantiles"]["description"]
    # quantiles as parse_quantiles reads them: 1 to MAX_QUANTILES numbers in (0, 1), in one
    # comma-separated parameter, as a generated client must send them
    assert (parameters["quantiles"]["style"], parameters["quantiles"]["explode"]) == ("form", False)
    assert parameters["quantiles"]["schema"]["type"] == "array"
    assert parameters["quantiles"]["schema"]["items"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 1,
    }
    assert parameters["quantiles"]["schema"]["minItems"] == 1
    assert parameters["quantiles"]["schema"]["maxItems"] == MAX_QUANTILES
    assert "never negative" in forecast["description"]
    schemas = document["components"]["schemas"]
    assert set(schemas["CustomerForecast"]["properties"]) >= {"quantiles", "clipped_at_zero"}
    assert "quantiles" in schemas["ForecastPoint"]["properties"]
    assert parameters["period"]["schema"]["minimum"] == 1
    assert parameters["period"]["schema"]["maximum"] == 720
    assert "720 hours for an hourly model" in parameters["period"]["description"]
    for name in ("CustomerForecast", "CustomerModel"):
        assert {"frequency", "period_unit"} <= set(schemas[name]["properties"])
    assert schemas["Frequency"]["enum"] == ["D", "H"]
    assert parameters["customer_id"]["schema"]["pattern"] == forecasting.CUSTOMER_ID_PATTERN
    model = document["paths"]["/customers/{customer_id}/model"]["get"]
    assert model["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CustomerModel"
    }
