"""The forecast API handler with its registry in DynamoDB (moto server, the table built from
template.yaml) and the SageMaker runtime stubbed (botocore Stubber): the sample API
Gateway events in, the documented responses out."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import Stubber
from forecast_api_helpers import api_event, call, load_forecast_api, violations
from model_helpers import chosen

from fleetcast_common.forecast_endpoint import ForecastEndpoint
from fleetcast_common.forecasting import HoldoutAccuracy, LiveModelCache
from fleetcast_common.registry import ModelRecord, ModelRegistry, ModelStatus
from fleetcast_contracts import layout
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import Backtest, HoldoutMetrics

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
]

RUN_ID = "q0000000909-20261129t120000"
HELD_RUN = "q0000000930-20261206t120000"
LATER_RUN = "q0000000931-20261206t130000"
ENDPOINT = "fleetcast-forecast"
METRICS = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.05, mae=10.0, naive_smape=0.08, naive_mae=15.0
)


@pytest.fixture(scope="module")
def api() -> Any:
    return load_forecast_api("fleetcast_forecast_api_integration")


@pytest.fixture
def registry(registry_table: Any) -> ModelRegistry:
    return ModelRegistry(registry_table)


@pytest.fixture
def runtime() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def wired(
    api: Any, registry: ModelRegistry, runtime: tuple[Any, Stubber], monkeypatch: pytest.MonkeyPatch
) -> Stubber:
    """The handler with this test's registry and stubbed runtime as its adapters."""
    client, stub = runtime
    monkeypatch.setattr(api, "_registry", lambda: registry)
    cache = LiveModelCache(registry, api.settings().live_model_cache_seconds)
    monkeypatch.setattr(api, "_live_models", lambda: cache)
    monkeypatch.setattr(api, "_endpoint", lambda: ForecastEndpoint(client, ENDPOINT))
    return stub


def live(
    registry: ModelRegistry,
    customer_id: str = "42",
    run_id: str = RUN_ID,
    version: int = 1,
    frequency: Frequency = Frequency.DAILY,
) -> ModelRecord:
    record = ModelRecord(
        frequency=frequency,
        **chosen(),
        customer_id=customer_id,
        run_id=run_id,
        status=ModelStatus.LIVE,
        target_model=layout.target_model(customer_id, run_id),
        model_s3_uri=f"s3://artifacts/{layout.model_key(customer_id, run_id)}",
        training_job=f"fleetcast-t-{run_id}",
        trained_at=datetime(2026, 11, 29, 12, 5, tzinfo=UTC),
        data_start=date(2024, 1, 1),
        data_end=date(2026, 11, 28),
        rows=1063,
        metrics=METRICS,
    )
    assert registry.promote(record) == version
    return record


def container_answer(
    customer_id: str = "42",
    run_id: str = RUN_ID,
    days: int = 7,
    quantiles: dict[str, float] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    forecast: list[dict[str, Any]] = [
        {"ds": f"2026-12-{day:02d}", "yhat": 500.0 + day, "yhat_lower": 450.0, "yhat_upper": 560.0}
        for day in range(1, days + 1)
    ]
    if quantiles is not None:
        for point in forecast:
            point["quantiles"] = quantiles
    document = {"customer_id": customer_id, "model_version": run_id, "forecast": forecast}
    raw = json.dumps(document | fields).encode()
    return {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": "application/json"}


def expected_invoke(
    record: ModelRecord, period: int, quantiles: list[float] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"period": period}
    if quantiles is not None:
        body["quantiles"] = quantiles
    return {
        "EndpointName": ENDPOINT,
        "TargetModel": record.target_model,
        "ContentType": "application/json",
        "Accept": "application/json",
        "Body": json.dumps(body),
    }


def test_the_forecast_is_the_live_models_with_its_version_and_training(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given customer 42's live model, and the endpoint's answer for its TargetModel
    record = live(registry)
    wired.add_response("invoke_endpoint", container_answer(days=14), expected_invoke(record, 14))
    # When the sample forecast request asks for 14 days
    status, headers, body = call(api, api_event(query={"period": "14"}))
    # Then the answer is the container's forecast plus what the registry knows
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert body["customer_id"] == "42" and body["period"] == 14
    assert (body["model_version"], body["run_id"]) == (1, RUN_ID)
    assert body["trained_at"] == "2026-11-29T12:05:00Z"
    assert body["data_end"] == "2026-11-28"
    assert len(body["forecast"]) == 14 and body["forecast"][0]["yhat"] == 501.0


def hourly_answer(hours: int) -> dict[str, Any]:
    start = datetime(2026, 11, 29, tzinfo=UTC)
    forecast = [
        {
            "ds": f"{start + timedelta(hours=hour):%Y-%m-%dT%H:%M:%SZ}",
            "yhat": 5.0,
            "yhat_lower": 4.0,
            "yhat_upper": 6.0,
        }
        for hour in range(hours)
    ]
    raw = json.dumps({"customer_id": "42", "model_version": RUN_ID, "forecast": forecast}).encode()
    return {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": "application/json"}


def test_an_hourly_model_is_forecast_720_hours_and_says_so(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given customer 42's live model is hourly
    record = live(registry, frequency=Frequency.HOURLY)
    wired.add_response("invoke_endpoint", hourly_answer(720), expected_invoke(record, 720))
    # When 30 days of hours are asked for
    status, _, body = call(api, api_event(query={"period": "720"}))
    # Then the answer is 720 periods of the model's own unit, and says which
    assert status == 200, body
    assert (body["frequency"], body["period_unit"], body["period"]) == ("H", "hour", 720)
    assert len(body["forecast"]) == 720
    # And the model route says its frequency and its longest forecast
    status, _, model = call(api, api_event("api_model.json"))
    assert (model["frequency"], model["period_unit"], model["max_period"]) == ("H", "hour", 720)


@pytest.mark.parametrize(
    ("frequency", "period", "complaint"),
    [
        # (past every model's: refused before the model is read, naming each frequency's)
        (Frequency.HOURLY, 721, "720 hours for an hourly model), not '721'"),
        (
            Frequency.DAILY,
            400,
            "period must be a whole number of days from 1 to 365 for customer '42', whose "
            "model is daily (a period is one day), not 400",
        ),
    ],
)
def test_a_period_past_the_models_longest_forecast_is_refused_in_its_unit(
    api: Any,
    registry: ModelRegistry,
    wired: Stubber,
    frequency: Frequency,
    period: int,
    complaint: str,
) -> None:
    # Given a live model of one frequency; when asked past its longest forecast
    live(registry, frequency=frequency)
    status, _, body = call(api, api_event(query={"period": str(period)}))
    # Then 400 in the model's own unit, and the endpoint is never called
    assert (status, body["error"]) == (400, "InvalidRequest")
    assert complaint in body["message"]
    assert violations("/customers/{customer_id}/forecast", status, body) == []


def test_the_period_defaults_to_a_week(api: Any, registry: ModelRegistry, wired: Stubber) -> None:
    record = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(record, 7))
    status, _, body = call(api, api_event(query={}))
    assert (status, body["period"]) == (200, 7)
    # (a model of a record written before frequencies were kept is daily)
    assert (body["frequency"], body["period_unit"]) == ("D", "day")


def test_the_model_route_answers_the_live_model_without_the_storage_details(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given a live model in the registry
    live(registry)
    # When its model is asked for
    status, _, body = call(api, api_event("api_model.json"))
    # Then the answer says which model and how good, in the API's own shape
    assert status == 200
    assert body["model_version"] == 1
    assert body["target_model"] == layout.target_model("42", RUN_ID)
    # The API's accuracy fields (the run exports carry WAPE, RMSE and MASE besides)
    assert body["metrics"] == METRICS.model_dump(include=set(HoldoutAccuracy.model_fields))
    assert (body["data_start"], body["data_end"]) == ("2024-01-01", "2026-11-28")
    assert body["live_since"] == json.loads(registry.live("42").model_dump_json())["updated_at"]
    # and not where the registry or the buckets keep it
    assert set(body).isdisjoint({"model_s3_uri", "training_job", "updated_at", "record"})
    assert "s3://" not in json.dumps(body)


@pytest.mark.parametrize("sample_name", ["api_forecast.json", "api_model.json"])
def test_a_customer_without_a_live_model_is_404(
    api: Any, registry: ModelRegistry, wired: Stubber, sample_name: str
) -> None:
    # Given a registry that knows another customer only
    live(registry, customer_id="41")
    # When customer 42 is asked for; then 404, and the endpoint is never called
    status, _, body = call(api, api_event(sample_name))
    assert status == 404
    assert body == {
        "error": "UnknownCustomer",
        "message": "customer '42' has no live model: check the id; if its readings were "
        "uploaded, `fleetcast status` says why its training failed (a customer needs a whole "
        "day of readings for a cold start, 28 days by default for a model of its own)",
    }


@pytest.mark.parametrize(
    ("code", "http_status", "retry_after"),
    [("ModelNotReadyException", 429, "1"), ("ServiceUnavailable", 503, "5")],
)
def test_an_endpoint_not_ready_is_503_with_retry_after(
    api: Any, registry: ModelRegistry, wired: Stubber, code: str, http_status: int, retry_after: str
) -> None:
    record = live(registry)
    wired.add_client_error(
        "invoke_endpoint", code, "not yet", http_status, expected_invoke(record, 7)
    )
    status, headers, body = call(api, api_event())
    assert status == 503
    assert headers["Retry-After"] == retry_after
    assert body["error"] == "EndpointUnavailable"


def test_a_failing_model_is_502(api: Any, registry: ModelRegistry, wired: Stubber) -> None:
    record = live(registry)
    wired.add_client_error(
        "invoke_endpoint",
        "ModelError",
        "Received server error (500) from model",
        424,
        expected_invoke(record, 7),
        modeled_fields={"OriginalStatusCode": 500, "OriginalMessage": "unexpected error"},
    )
    status, headers, body = call(api, api_event())
    assert (status, body["error"]) == (502, "EndpointFailed")
    assert "status 500" in body["message"]
    assert "Retry-After" not in headers


def test_an_answer_from_another_customers_model_is_502_and_names_nobody_else(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given an archive at 42's TargetModel that holds customer 43's model
    record = live(registry)
    wired.add_response("invoke_endpoint", container_answer("43"), expected_invoke(record, 7))
    status, _, body = call(api, api_event())
    assert (status, body["error"]) == (502, "EndpointFailed")
    assert "43" not in body["message"]


# ---------------------------------------------------------------- quantiles and the floor

# The forecast response's fields before quantiles and clipping existed, in their order.
FORECAST_FIELDS = [
    "customer_id",
    "model_version",
    "run_id",
    "trained_at",
    "data_end",
    "frequency",
    "period_unit",
    "period",
]
POINT_FIELDS = ["ds", "yhat", "yhat_lower", "yhat_upper"]


def test_without_quantiles_the_answer_has_exactly_the_fields_it_always_had(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    record = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(record, 7))
    status, _, body = call(api, api_event(query={"period": "7"}))
    assert status == 200
    assert list(body) == [*FORECAST_FIELDS, "forecast"]
    assert all(list(point) == POINT_FIELDS for point in body["forecast"])


def test_quantiles_are_asked_of_the_endpoint_sorted_and_returned_per_point(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given the endpoint's answer with three quantiles per point
    record = live(registry)
    values = {"0.1": 470.0, "0.5": 505.0, "0.9": 550.0}
    wired.add_response(
        "invoke_endpoint",
        container_answer(quantiles=values),
        expected_invoke(record, 7, [0.1, 0.5, 0.9]),
    )
    # When they are asked for out of order and with a repeat
    status, _, body = call(api, api_event(query={"period": "7", "quantiles": "0.9,0.1,0.5,0.10"}))
    # Then the endpoint was asked for the sorted set, and each point carries them
    assert status == 200
    assert body["quantiles"] == [0.1, 0.5, 0.9]
    assert all(point["quantiles"] == values for point in body["forecast"])
    assert "clipped_at_zero" not in body


def test_the_count_of_values_clipped_at_zero_reaches_the_caller(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    record = live(registry)
    answer = container_answer(clipped_at_zero=3)
    wired.add_response("invoke_endpoint", answer, expected_invoke(record, 7))
    status, _, body = call(api, api_event(query={"period": "7"}))
    assert (status, body["clipped_at_zero"]) == (200, 3)


@pytest.mark.parametrize(
    ("answer", "complaint"),
    [
        (container_answer(quantiles={"0.1": 470.0}), "answered quantiles ['0.1'] where"),
        (container_answer(quantiles=None), "answered quantiles [] where ['0.1', '0.9']"),
        (container_answer(quantiles={"0.1": -2.0, "0.9": 3.0}), "a value below 0.0 on 2026-12-01"),
    ],
    ids=["other quantiles", "no quantiles", "negative"],
)
def test_an_answer_without_what_was_asked_or_below_zero_is_502(
    api: Any, registry: ModelRegistry, wired: Stubber, answer: dict[str, Any], complaint: str
) -> None:
    record = live(registry)
    wired.add_response("invoke_endpoint", answer, expected_invoke(record, 7, [0.1, 0.9]))
    status, _, body = call(api, api_event(query={"period": "7", "quantiles": "0.1,0.9"}))
    assert (status, body["error"]) == (502, "EndpointFailed")
    assert complaint in body["message"]


# ---------------------------------------------------------------- the live-model cache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(api: Any, registry: ModelRegistry, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The handler's live-model cache on a clock the test moves."""
    clock = Clock()
    cache = LiveModelCache(registry, api.settings().live_model_cache_seconds, clock=clock)
    monkeypatch.setattr(api, "_live_models", lambda: cache)
    return clock


NEWER_RUN = "q0000000921-20261206t120000"


def test_a_promoted_model_serves_once_the_cached_lookup_expires(
    api: Any, registry: ModelRegistry, wired: Stubber, clock: Clock
) -> None:
    ttl = api.settings().live_model_cache_seconds
    assert ttl > 0
    # Given 42's first model, served once (so the lookup is remembered)
    first = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(first, 7))
    assert call(api, api_event())[2]["model_version"] == 1
    # When a newer run is promoted
    second = live(registry, run_id=NEWER_RUN, version=2)
    # Then until the lookup expires the answer is still the first model's, labelled as it
    clock.now += ttl / 2
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(first, 7))
    status, _, body = call(api, api_event())
    assert (status, body["model_version"], body["run_id"]) == (200, 1, RUN_ID)
    # and after it, the promoted model's, from its own TargetModel
    clock.now += ttl
    wired.add_response(
        "invoke_endpoint", container_answer(run_id=NEWER_RUN), expected_invoke(second, 7)
    )
    status, _, body = call(api, api_event())
    assert (status, body["model_version"], body["run_id"]) == (200, 2, NEWER_RUN)


def test_no_cache_asks_for_the_model_live_now(
    api: Any, registry: ModelRegistry, wired: Stubber, clock: Clock
) -> None:
    # Given 42's first model, served once (so the lookup is remembered), then a newer run
    # promoted
    first = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(first, 7))
    assert call(api, api_event())[2]["model_version"] == 1
    second = live(registry, run_id=NEWER_RUN, version=2)
    # When a request says Cache-Control: no-cache (as fleetcast's CLI does), at once
    event = api_event()
    event["headers"] = {**(event.get("headers") or {}), "Cache-Control": "max-age=0, no-cache"}
    event["multiValueHeaders"] = {
        **(event.get("multiValueHeaders") or {}),
        "Cache-Control": ["max-age=0, no-cache"],
    }
    wired.add_response(
        "invoke_endpoint", container_answer(run_id=NEWER_RUN), expected_invoke(second, 7)
    )
    status, _, body = call(api, event)
    # Then it is the promoted model's answer
    assert (status, body["model_version"], body["run_id"]) == (200, 2, NEWER_RUN)
    # And the next request without it finds that lookup remembered
    wired.add_response(
        "invoke_endpoint", container_answer(run_id=NEWER_RUN), expected_invoke(second, 7)
    )
    assert call(api, api_event())[2]["model_version"] == 2


def test_a_cached_model_the_endpoint_no_longer_has_is_looked_up_again(
    api: Any, registry: ModelRegistry, wired: Stubber, clock: Clock
) -> None:
    # Given 42's first model remembered, then a newer one promoted
    first = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(first, 7))
    call(api, api_event())
    second = live(registry, run_id=NEWER_RUN, version=2)
    # When the endpoint cannot serve the remembered TargetModel (its archive is gone)
    wired.add_client_error(
        "invoke_endpoint", "ValidationError", "no such model", 400, expected_invoke(first, 7)
    )
    wired.add_response(
        "invoke_endpoint", container_answer(run_id=NEWER_RUN), expected_invoke(second, 7)
    )
    # Then the same request reads the registry again and answers from the live model
    status, _, body = call(api, api_event())
    assert (status, body["model_version"], body["run_id"]) == (200, 2, NEWER_RUN)


def test_a_customer_without_a_live_model_is_not_remembered(
    api: Any, registry: ModelRegistry, wired: Stubber, clock: Clock
) -> None:
    # Given 42 asked for before it has a model
    assert call(api, api_event())[0] == 404
    # When its first model is registered a moment later
    record = live(registry)
    wired.add_response("invoke_endpoint", container_answer(), expected_invoke(record, 7))
    # Then it is served at once, not after the cache's time
    assert call(api, api_event())[0] == 200


@pytest.mark.parametrize(
    "target_model",
    ["43/q0000000909-20261129t120000.tar.gz", "42/../43/x.tar.gz", "../../etc/passwd"],
    ids=["another customer's", "dot-dot", "outside the prefix"],
)
def test_a_registry_entry_naming_another_target_model_is_refused_unsent(
    api: Any, registry: ModelRegistry, registry_table: Any, wired: Stubber, target_model: str
) -> None:
    # Given a LIVE record whose TargetModel was tampered with
    live(registry)
    registry_table.update_item(
        Key={"customer_id": "42", "record": "LIVE"},
        UpdateExpression="SET target_model = :t",
        ExpressionAttributeValues={":t": target_model},
    )
    # When 42's forecast is asked for; then 502, and the endpoint is never called
    status, _, body = call(api, api_event())
    assert (status, body["error"]) == (502, "EndpointFailed")
    assert "43" not in body["message"] and "passwd" not in body["message"]


NEWER_RUN = "q0000000920-20261206t120000"


@pytest.mark.parametrize("sample_name", ["api_forecast.json", "api_model.json"])
def test_an_answer_from_a_model_older_than_the_latest_data_says_which_run_and_why(
    api: Any, registry: ModelRegistry, wired: Stubber, sample_name: str
) -> None:
    # Given customer 42 live at run 1, and a newer run's model, on data to a later day,
    # that the quality gate did not make live
    record = live(registry)
    rejected = record.model_copy(
        update={"run_id": NEWER_RUN, "status": ModelStatus.REJECTED, "data_end": date(2026, 12, 5)}
    )
    assert registry.hold_back(rejected, "holdout sMAPE 0.3000 is over 1.5 x seasonal naive's")
    if sample_name == "api_forecast.json":
        wired.add_response("invoke_endpoint", container_answer(), expected_invoke(record, 7))
    # When the forecast or the model is asked for
    status, _, body = call(api, api_event(sample_name))
    # Then the answer is the live model's, and says the newer run's was not made live, and why
    assert status == 200 and body["run_id"] == RUN_ID
    newer = body["newer_model"]
    assert (newer["run_id"], newer["status"], newer["data_end"]) == (
        NEWER_RUN,
        "rejected",
        "2026-12-05",
    )
    assert newer["reason"] == "holdout sMAPE 0.3000 is over 1.5 x seasonal naive's"
    assert newer["message"].startswith(
        f"the live model (run {RUN_ID}, data to 2026-11-28) predates the customer's latest "
        f"data: run {NEWER_RUN}'s model (data to 2026-12-05) was rejected, not made live: "
    )


def test_without_a_held_back_model_the_answers_have_no_newer_model(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    live(registry)
    status, _, body = call(api, api_event("api_model.json"))
    assert status == 200 and "newer_model" not in body


def test_every_answer_is_what_the_document_says_every_date_time_with_its_offset(
    api: Any, registry: ModelRegistry, wired: Stubber
) -> None:
    # Given customer 42's live model as training records it: its backtest's origins are
    # the history's own timestamps, naive (UTC's wall clock); and a newer model held back
    record = live(registry, version=1)
    backtest = record.backtest.model_dump() | {"origins": [datetime(2023, 10, 3, 0, 0)]}
    record = record.model_copy(
        update={
            "run_id": HELD_RUN,
            "target_model": layout.target_model("42", HELD_RUN),
            "backtest": Backtest(**backtest),
        }
    )
    assert registry.promote(record) == 2
    newer = record.model_copy(update={"run_id": LATER_RUN, "status": ModelStatus.REJECTED})
    assert registry.hold_back(newer, "worse than seasonal naive")
    wired.add_response(
        "invoke_endpoint", container_answer(run_id=HELD_RUN), expected_invoke(record, 7)
    )
    # When both routes answer
    answers = {
        "/customers/{customer_id}/model": call(api, api_event("api_model.json")),
        "/customers/{customer_id}/forecast": call(api, api_event(query={})),
    }
    # Then each answer is valid against docs/openapi.json as a generated client reads it:
    # every date-time RFC 3339, with its offset
    for route, (status, _, body) in answers.items():
        assert status == 200, body
        assert violations(route, status, body) == [], route
    model = answers["/customers/{customer_id}/model"][2]
    assert model["backtest"]["origins"] == ["2023-10-03T00:00:00Z"]
    assert model["newer_model"]["trained_at"] == "2026-11-29T12:05:00Z"
