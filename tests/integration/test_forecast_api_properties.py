"""Property-based tests of the forecast API handler (hypothesis): with the registry in
DynamoDB (moto) and the SageMaker runtime stubbed, no request, however odd its customer
id, period or query parameters, gets a 5xx, and each gets the answer the API documents."""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import Stubber
from forecast_api_helpers import api_event, call, load_forecast_api
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_forecast_api_handler import RUN_ID, live

from fleetcast_common.forecast_endpoint import ForecastEndpoint
from fleetcast_common.forecasting import LiveModelCache
from fleetcast_common.registry import ModelRegistry
from fleetcast_contracts.ids import is_valid_customer_id
from fleetcast_contracts.inference import MAX_PERIOD, MIN_PERIOD

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

KNOWN = "42"
CUSTOMER_IDS = st.one_of(
    st.text(max_size=70),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,70}\n?", fullmatch=True),
    st.sampled_from([KNOWN, "41", "", "..", "a/b", "42\n", "-42", "4 2"]),
)
PERIODS = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=800).map(str),
    st.text(max_size=10),
    st.sampled_from(["007", "7.0", "1e2", " 7", "+7", "0x10", "", "1", "365", "366", "720", "721"]),
)
EXTRA = st.dictionaries(
    # (quantiles, which the forecast route also takes, have their own tests)
    st.text(min_size=1, max_size=10).filter(lambda name: name not in ("period", "quantiles")),
    st.text(max_size=10),
    max_size=2,
)


@pytest.fixture(scope="module")
def api() -> Any:
    return load_forecast_api("fleetcast_forecast_api_properties")


@pytest.fixture
def handler(api: Any, registry_table: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The handler with customer 42 live in the registry and a runtime this test stubs."""
    registry = ModelRegistry(registry_table)
    live(registry, customer_id=KNOWN)
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )
    cache = LiveModelCache(registry, api.settings().live_model_cache_seconds)
    monkeypatch.setattr(api, "_registry", lambda: registry)
    monkeypatch.setattr(api, "_live_models", lambda: cache)
    monkeypatch.setattr(api, "_endpoint", lambda: ForecastEndpoint(client, "fleetcast-forecast"))
    return api, client


def endpoint_answer(days: int) -> dict[str, Any]:
    forecast = [
        {"ds": f"2027-01-{1 + day % 28:02d}", "yhat": 1.0, "yhat_lower": 0.5, "yhat_upper": 1.5}
        for day in range(days)
    ]
    raw = json.dumps({"customer_id": KNOWN, "model_version": RUN_ID, "forecast": forecast})
    return {"Body": StreamingBody(io.BytesIO(raw.encode()), len(raw)), "ContentType": "json"}


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    customer_id=CUSTOMER_IDS,
    sample_name=st.sampled_from(["api_forecast.json", "api_model.json"]),
    period=PERIODS,
    extra=EXTRA,
)
def test_any_request_gets_its_documented_answer_and_never_a_5xx(
    handler: Any, customer_id: str, sample_name: str, period: str | None, extra: dict[str, str]
) -> None:
    api, client = handler
    query = dict(extra) | ({} if period is None else {"period": period})
    event = api_event(sample_name, customer_id=customer_id, query=query)
    # The endpoint answers whatever it is asked (at most once); the API decides whether
    # to ask it.
    with Stubber(client) as stub:
        stub.add_response("invoke_endpoint", endpoint_answer(MAX_PERIOD))
        status, headers, body = call(api, event)
        try:
            stub.assert_no_pending_responses()
            asked = True
        except AssertionError:
            asked = False

    assert status in (200, 400, 404), (status, body)
    assert headers["Content-Type"] == "application/json"
    takes = {"period"} if sample_name == "api_forecast.json" else set()
    if not is_valid_customer_id(customer_id) or set(query) - takes:
        assert (status, body["error"]) == (400, "InvalidRequest")
    if status == 404:
        assert body["error"] == "UnknownCustomer" and customer_id != KNOWN
    if status == 200:
        assert body["customer_id"] == customer_id == KNOWN
        if sample_name == "api_forecast.json":
            assert MIN_PERIOD <= body["period"] <= MAX_PERIOD
            if period is not None and period.isascii() and period.isdigit():
                assert body["period"] == int(period)
    # A period the API takes but customer 42's daily model does not serve (366 to 720 days:
    # up to an hourly model's longest) is refused in days, before the endpoint is asked.
    past_daily = (
        period is not None
        and period.isascii()
        and period.isdigit()
        and 365 < int(period) <= MAX_PERIOD
    )
    if past_daily and customer_id == KNOWN and sample_name == "api_forecast.json" and not extra:
        assert status == 400, body
        assert "whole number of days from 1 to 365 for customer '42'" in body["message"]
    # Only a valid forecast request for a customer with a live model reaches the endpoint.
    assert asked == (status == 200 and sample_name == "api_forecast.json")
