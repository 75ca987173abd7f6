"""Serving, end to end on the embedded local stack: after a real 30-customer run, the
forecast API over HTTP with its key, the multi-model endpoint through standard clients
(boto3, the SageMaker Python SDK, the CLI), and 16 threads over 300 models with room
for 100."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import os
import subprocess
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pandas as pd
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from prophet.serialize import model_from_dict, model_from_json
from test_pipeline import finished, readings, registry, to_csv, upload

from fleetcast import cli
from fleetcast.embedded.api.models import UsagePlan
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.forecasting import CustomerModel
from fleetcast_contracts import layout
from fleetcast_contracts.families import PROPHET
from fleetcast_contracts.model_archive import ModelMetadata, read_archive, write_archive
from fleetcast_forecasters import combination
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.forecast import simulated_periods
from fleetcast_forecasters.gaussian import PathForecaster
from fleetcast_forecasters.prophet_forecaster import forecast_seed

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"
AWS_CLI = ROOT / ".venv-awscli" / "bin" / "aws"
DAYS = 150
CUSTOMERS = [f"srv-{i:02d}" for i in range(30)]
# A customer whose use falls steadily towards zero: its trend carries on below it.
FALLING = "srv-falling"


def falling_readings() -> pd.DataFrame:
    day = np.arange(DAYS)
    dates = pd.date_range("2024-03-01", periods=DAYS, freq="D")
    consumption = 600 - 3.8 * day + 15 * np.sin(2 * np.pi * day / 7)
    return pd.DataFrame(
        {
            "customer_id": FALLING,
            "timestamp": dates.strftime("%Y-%m-%dT08:00:00Z"),
            "consumption": consumption.round(3),
        }
    )


@pytest.fixture(scope="module")
def served(stack: EmbeddedStack) -> dict[str, Any]:
    """A finished run of 30 customers and a falling one, and the stack's serving
    environment."""
    frame = pd.concat([readings(CUSTOMERS, "2024-03-01", DAYS, seed=3), falling_readings()])
    body = gzip.compress(to_csv(frame))
    run_id = upload(stack, "serving.csv.gz", body)
    status = finished(stack, run_id)
    assert status.customers_registered == len(CUSTOMERS) + 1, status
    assert stack.info is not None
    return {"run_id": run_id, "env": stack.info.environment()}


def served_yhat(model: str | dict[str, Any], model_kind: str, period: int) -> list[float]:
    """What the endpoint must answer for a model, by its own family's definition: a Prophet
    model, Prophet's own ``predict``; a combination (or naive blend), the weighted mean of its
    members' answers (each by this rule, so a Prophet member is Prophet's own); any other
    family, its archive compiled by ``compile_archive``."""
    if model_kind == PROPHET:
        prophet = model_from_json(model) if isinstance(model, str) else model_from_dict(model)
        future = prophet.make_future_dataframe(periods=period, include_history=False)
        yhat: list[float] = prophet.predict(future)["yhat"].tolist()
        return yhat
    if model_kind in combination.COMBINING:
        members = (json.loads(model) if isinstance(model, str) else model)["members"]
        paths = [served_yhat(member["model"], member["kind"], period) for member in members]
        weights = [member.get("weight", 1.0) for member in members]
        return list(np.average(paths, axis=0, weights=weights).tolist())
    return list(compile_archive(model, model_kind, "D").yhat[:period].tolist())


def live_archive(stack: EmbeddedStack, customer_id: str) -> tuple[str, ModelMetadata]:
    """The customer's live model's ``model.json`` and metadata, from its archive in S3."""
    assert stack.info is not None
    live = registry(stack).live(customer_id)
    assert live is not None
    archive = stack.client("s3").get_object(
        Bucket=stack.info.artifacts_bucket, Key=layout.MODELS_PREFIX + live.target_model
    )
    return read_archive(archive["Body"].read())


@pytest.fixture(scope="module")
def expected_yhat(stack: EmbeddedStack, served: dict[str, Any]) -> Any:
    """:func:`served_yhat` of a customer's live model."""
    cache: dict[tuple[str, int], list[float]] = {}

    def yhat(customer_id: str, period: int) -> list[float]:
        if (customer_id, period) not in cache:
            model_json, metadata = live_archive(stack, customer_id)
            cache[customer_id, period] = served_yhat(model_json, metadata.model_kind, period)
        return cache[customer_id, period]

    return yhat


def get(env: dict[str, str], path: str, key: str | None = "env") -> tuple[int, dict[str, str], Any]:
    """GET the API like curl does: one request, the key in x-api-key."""
    url = urllib.parse.urlsplit(env["FLEETCAST_API_URL"])
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    headers = (
        {} if key is None else {"x-api-key": env["FLEETCAST_API_KEY"] if key == "env" else key}
    )
    try:
        connection.request("GET", url.path + path, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, dict(response.getheaders()), json.loads(raw)
    finally:
        connection.close()


# ---------------------------------------------------------------- the API


def test_fleetcast_env_exports_the_api_and_the_endpoint(
    stack: EmbeddedStack, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--state-dir", str(stack.state_dir), "env"]) == 0
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in capsys.readouterr().out.splitlines()
    )
    assert exported["FLEETCAST_API_URL"].startswith("http://127.0.0.1:")
    assert exported["FLEETCAST_API_URL"].endswith("/v1")
    assert len(exported["FLEETCAST_API_KEY"]) >= 20
    assert exported["FLEETCAST_ENDPOINT_NAME"] == "fleetcast-forecast"


def get_when_ready(env: dict[str, str], path: str) -> tuple[int, dict[str, str], Any]:
    """GET as a client that honours the API's documented 503 + Retry-After (the endpoint
    is not ready, e.g. its container restarting after test_api_hardening's kill, slower
    on a loaded machine), for at most a minute."""
    deadline = time.monotonic() + 60
    while True:
        status, headers, body = get(env, path)
        if status != 503 or "Retry-After" not in headers or time.monotonic() > deadline:
            return status, headers, body
        time.sleep(min(float(headers["Retry-After"]), 5.0))


def test_every_customer_gets_its_models_forecast_through_the_api(
    served: dict[str, Any], expected_yhat: Any
) -> None:
    # (Prophet's own predict for Prophet models: test_serving_prophet, on a stack that
    # serves Prophet alone)
    for index, customer_id in enumerate(CUSTOMERS):
        period = (7, 1, 30)[index % 3]
        status, headers, body = get_when_ready(
            served["env"], f"/customers/{customer_id}/forecast?period={period}"
        )
        assert status == 200, body
        assert headers["Content-Type"] == "application/json"
        assert (body["customer_id"], body["model_version"], body["run_id"]) == (
            customer_id,
            1,
            served["run_id"],
        )
        assert body["data_end"] == str(
            (pd.Timestamp("2024-03-01") + pd.Timedelta(days=DAYS - 1)).date()
        )
        yhat = [point["yhat"] for point in body["forecast"]]
        assert np.allclose(yhat, expected_yhat(customer_id, period), rtol=0, atol=1e-6)
        assert all(p["yhat_lower"] < p["yhat"] < p["yhat_upper"] for p in body["forecast"])


def served_samples(model_json: str, model_kind: str, period: int, seed: int) -> Any:
    """The model's predictive samples (periods by samples) as the endpoint draws them with
    ``seed``: Prophet's own ``predictive_samples`` for a Prophet model; for every other
    family its point path plus its deviation times ``seed``'s standard normals
    (docs/model-families.md)."""
    if model_kind == PROPHET:
        model = model_from_json(model_json)
        # the first `period` days of its forecast of simulated_periods (a day's draws are
        # the same whatever the period)
        future = model.make_future_dataframe(
            periods=simulated_periods(period), include_history=False
        )
        np.random.seed(seed)
        return model.predictive_samples(future)["yhat"][:period]
    compiled = compile_archive(model_json, model_kind, "D")
    assert isinstance(compiled, PathForecaster)
    samples = int(json.loads(model_json)["uncertainty_samples"])
    normals = np.random.default_rng(seed).standard_normal((period, samples))
    return compiled.yhat[:period, None] + compiled.sigma[:period, None] * normals


def test_quantiles_through_the_api_are_those_of_the_models_own_samples(
    stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    # Given the predictive samples of a customer's live model, seeded as the container
    # seeds this run (the customer and the period are no part of it)
    customer_id, period = "srv-05", 14
    model_json, metadata = live_archive(stack, customer_id)
    samples = served_samples(
        model_json, metadata.model_kind, period, forecast_seed(served["run_id"])
    )
    path = f"/customers/{customer_id}/forecast?period={period}"

    # When the API is asked for quantiles (out of order, one repeated), and without them
    status, _, body = get(served["env"], path + "&quantiles=0.9,0.1,0.5,0.10")
    again = get(served["env"], path + "&quantiles=0.1,0.5,0.9")[2]
    plain = get(served["env"], path)[2]
    refused = get(served["env"], path + "&quantiles=0.5,1.5")

    # Then each point carries numpy's quantiles of those samples, the same every time,
    # beside the answer it has without them
    assert status == 200, body
    assert body["quantiles"] == [0.1, 0.5, 0.9] and again == body
    got = [[point["quantiles"][q] for q in ("0.1", "0.5", "0.9")] for point in body["forecast"]]
    expected = np.quantile(samples, [0.1, 0.5, 0.9], axis=1).T
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    # ... and the interval is the same samples' 10% and 90% (Prophet's interval_width 0.8)
    bounds = [[point["yhat_lower"], point["yhat_upper"]] for point in plain["forecast"]]
    np.testing.assert_allclose(bounds, np.quantile(samples, [0.1, 0.9], axis=1).T, atol=1e-6)
    assert "quantiles" not in plain and "clipped_at_zero" not in plain
    assert [{k: p[k] for k in p if k != "quantiles"} for p in body["forecast"]] == plain["forecast"]
    # ... and a quantile outside (0, 1) is a 400 naming it
    assert (refused[0], refused[2]["error"]) == (400, "InvalidRequest")
    assert "quantiles: 1.5 is not between 0 and 1" in refused[2]["message"]


def test_a_falling_customers_forecast_stops_at_zero_and_says_so(served: dict[str, Any]) -> None:
    # When the falling customer's forecast reaches past the day its trend crosses zero
    status, _, body = get(
        served["env"], f"/customers/{FALLING}/forecast?period=90&quantiles=0.1,0.5,0.9"
    )

    # Then no value is below zero, the answer counts those raised to zero, and the
    # point forecast itself ends at zero
    assert status == 200, body
    values = [
        value
        for point in body["forecast"]
        for value in (
            point["yhat"],
            point["yhat_lower"],
            point["yhat_upper"],
            *point["quantiles"].values(),
        )
    ]
    assert min(values) == 0.0
    assert body["clipped_at_zero"] == values.count(0.0) > 0
    assert body["forecast"][-1]["yhat"] == 0.0
    assert body["forecast"][0]["yhat"] > 0


def test_the_model_route_answers_the_live_model_in_the_apis_own_shape(
    stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    status, _, body = get(served["env"], "/customers/srv-04/model")
    assert status == 200
    live = registry(stack).live("srv-04")
    assert live is not None
    assert body == json.loads(CustomerModel.from_live(live).model_dump_json())
    assert "model_s3_uri" not in body and "training_job" not in body


@pytest.mark.parametrize(
    ("path", "key", "status", "message"),
    [
        ("/customers/srv-01/forecast", None, 403, "Forbidden"),
        ("/customers/srv-01/forecast", "not-the-key", 403, "Forbidden"),
        ("/customers/srv-01/forecasts", "env", 403, "Missing Authentication Token"),
        ("/customers/nobody/forecast", "env", 404, "customer 'nobody' has no live model"),
        ("/customers/-bad/forecast", "env", 400, "invalid customer id '-bad'"),
        ("/customers/srv-01/forecast?period=0", "env", 400, "period must be a whole number"),
        ("/customers/srv-01/forecast?period=400", "env", 400, "not 400"),
        ("/customers/srv-01/forecast?days=7", "env", 400, "unknown query parameter 'days'"),
        # Ids the allow-list refuses, as a client that encodes them sends them: each is
        # named as an invalid id, but one with a '/' (even encoded), which API Gateway
        # matches against no route
        ("/customers/..%2Fx/forecast", "env", 403, "Missing Authentication Token"),
        ("/customers/../forecast", "env", 400, "invalid customer id '..'"),
        ("/customers/%2e%2e/model", "env", 400, "invalid customer id '..'"),
        ("/customers/x%20y/forecast", "env", 400, "invalid customer id 'x y'"),
        ("/customers/%C3%A9/model", "env", 400, "invalid customer id 'é'"),
        ("/customers/a%0Ab/forecast", "env", 400, "invalid customer id 'a\\nb'"),
        (f"/customers/{'a' * 65}/forecast", "env", 400, "1 to 64 characters"),
    ],
    ids=[
        "no key",
        "wrong key",
        "no route",
        "unknown customer",
        "bad id",
        "period 0",
        "period 400",
        "unknown parameter",
        "encoded slash",
        "dot dot",
        "encoded dot dot",
        "space",
        "not ascii",
        "newline",
        "65 characters",
    ],
)
def test_api_errors_are_json_with_a_clear_message(
    served: dict[str, Any], path: str, key: str | None, status: int, message: str
) -> None:
    got, headers, body = get(served["env"], path, key)
    assert got == status
    assert headers["Content-Type"] == "application/json"
    assert message in body["message"]
    assert "Traceback" not in json.dumps(body)


@contextlib.contextmanager
def usage_plan(stack: EmbeddedStack, plan: UsagePlan | None) -> Iterator[None]:
    """The running API with other usage plan limits (None: none) for a while."""
    assert stack.serving is not None
    api = stack.serving.apis["ForecastApi"]
    original = api.usage_plan
    api.usage_plan = plan
    try:
        yield
    finally:
        api.usage_plan = original


def test_a_key_over_its_throttle_or_quota_gets_429(
    stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    path = "/customers/srv-02/model"
    with usage_plan(stack, UsagePlan(rate=0.01, burst=2, quota=None)):
        statuses = [get(served["env"], path)[0] for _ in range(4)]
        assert statuses == [200, 200, 429, 429]
        assert get(served["env"], path)[2] == {"message": "Too Many Requests"}
    with usage_plan(stack, UsagePlan(rate=None, burst=None, quota=1)):
        assert get(served["env"], path)[0] == 200
        assert get(served["env"], path)[:3:2] == (429, {"message": "Limit Exceeded"})


# ---------------------------------------------------------------- the endpoint, by standard clients


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_boto3_invokes_the_endpoint_with_a_target_model(
    stack: EmbeddedStack, served: dict[str, Any], expected_yhat: Any
) -> None:
    live = registry(stack).live("srv-05")
    assert live is not None
    # Given nothing but `fleetcast env`'s variables
    with environment(served["env"]):
        runtime = boto3.session.Session().client("sagemaker-runtime")
        sagemaker = boto3.session.Session().client("sagemaker")
        # When a standard client invokes the endpoint for the customer's TargetModel
        response = runtime.invoke_endpoint(
            EndpointName=served["env"]["FLEETCAST_ENDPOINT_NAME"],
            TargetModel=live.target_model,
            ContentType="application/json",
            Body=json.dumps({"period": 7}),
        )
        endpoint = sagemaker.describe_endpoint(
            EndpointName=served["env"]["FLEETCAST_ENDPOINT_NAME"]
        )
    # Then it gets the model's forecast, from an endpoint the control plane reports in service
    document = json.loads(response["Body"].read())
    assert document["customer_id"] == "srv-05" and document["model_version"] == served["run_id"]
    yhat = [p["yhat"] for p in document["forecast"]]
    assert np.allclose(yhat, expected_yhat("srv-05", 7), rtol=0, atol=1e-6)
    assert response["InvokedProductionVariant"] == "AllTraffic"
    assert endpoint["EndpointStatus"] == "InService"


@pytest.mark.skipif(
    not SDK_PYTHON.exists(), reason=".venv-sdk (the SageMaker Python SDK) is absent: `make install`"
)
def test_the_sagemaker_sdk_example_gets_the_forecast(
    stack: EmbeddedStack, served: dict[str, Any], expected_yhat: Any
) -> None:
    live = registry(stack).live("srv-06")
    assert live is not None
    result = subprocess.run(
        [
            SDK_PYTHON,
            ROOT / "examples" / "sdk_client.py",
            live.target_model,
            "--period",
            "10",
            "--json",
        ],
        env={**os.environ, **served["env"]},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(result.stdout)
    assert document["customer_id"] == "srv-06"
    yhat = [p["yhat"] for p in document["forecast"]]
    assert np.allclose(yhat, expected_yhat("srv-06", 10), rtol=0, atol=1e-6)


@pytest.mark.skipif(
    not AWS_CLI.exists(), reason=".venv-awscli (the AWS CLI) is absent: `make install`"
)
def test_the_aws_cli_invokes_the_endpoint(
    stack: EmbeddedStack, served: dict[str, Any], expected_yhat: Any, tmp_path: Path
) -> None:
    live = registry(stack).live("srv-07")
    assert live is not None
    answer = tmp_path / "forecast.json"
    # Given nothing but `fleetcast env`'s variables, the AWS CLI as a reader would type it
    command = [
        str(AWS_CLI),
        "sagemaker-runtime",
        "invoke-endpoint",
        "--endpoint-name",
        served["env"]["FLEETCAST_ENDPOINT_NAME"],
        "--target-model",
        live.target_model,
        "--content-type",
        "application/json",
        "--body",
        '{"period": 7}',
        str(answer),
    ]
    result = subprocess.run(
        command,
        env={**os.environ, **served["env"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Then it writes the model's forecast and reports the variant that served it
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["InvokedProductionVariant"] == "AllTraffic"
    document = json.loads(answer.read_text())
    assert document["customer_id"] == "srv-07"
    yhat = [p["yhat"] for p in document["forecast"]]
    assert np.allclose(yhat, expected_yhat("srv-07", 7), rtol=0, atol=1e-6)


def test_the_cli_prints_the_forecast_and_draws_it(
    stack: EmbeddedStack,
    served: dict[str, Any],
    expected_yhat: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plot = tmp_path / "srv-07.png"
    with environment(served["env"]):
        assert cli.main(["forecast", "srv-07", "--period", "10", "--plot", str(plot)]) == 0
        table = capsys.readouterr().out
        assert cli.main(["forecast", "srv-07", "--period", "10", "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert cli.main(["forecast", "nobody"]) == 2
        complaint = capsys.readouterr().err
    assert "model v1" in table and "srv-07" in table and document["forecast"][0]["ds"] in table
    assert np.allclose(
        [p["yhat"] for p in document["forecast"]], expected_yhat("srv-07", 10), atol=1e-6
    )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 20_000
    assert "no live model" in complaint


def test_the_cli_names_the_real_cause_of_each_403(
    served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # When the API's URL lacks its stage, API Gateway serves no such path
    no_stage = served["env"]["FLEETCAST_API_URL"].removesuffix("/v1")
    with environment({**served["env"], "FLEETCAST_API_URL": no_stage}):
        assert cli.main(["forecast", "srv-07"]) == 2
        no_route = " ".join(capsys.readouterr().err.split())
    # And when the key is wrong
    with environment({**served["env"], "FLEETCAST_API_KEY": "not-the-key"}):
        assert cli.main(["forecast", "srv-07"]) == 2
        refused = " ".join(capsys.readouterr().err.split())
    # Then each says what is wrong: the path, then the key
    assert "the API has no route for /customers/srv-07/forecast" in no_route
    assert "key" not in no_route
    assert "the API refused the key (403 Forbidden): check FLEETCAST_API_KEY" in refused


def test_the_cli_prints_and_draws_quantiles(
    served: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot = tmp_path / "srv-07-quantiles.png"
    args = ["forecast", "srv-07", "--period", "10", "--quantiles", "0.9,0.1"]
    with environment(served["env"]):
        assert cli.main([*args, "--plot", str(plot)]) == 0
        table = capsys.readouterr().out
        assert cli.main([*args, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert cli.main(["forecast", "srv-07", "--quantiles", "0.1,ninety"]) == 2
        complaint = capsys.readouterr().err
    assert "q0.1" in table and "q0.9" in table
    first = document["forecast"][0]
    assert f"{first['quantiles']['0.9']:,.1f}" in table
    assert document["quantiles"] == [0.1, 0.9]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "'ninety' is not a decimal number" in complaint


# ---------------------------------------------------------------- 16 threads, 300 models, room for 100

THREADS = 16
REQUESTS_PER_THREAD = 200
MODELS = 300
RESIDENT = 100
PERIODS = (1, 7, 14)
# Process memory that is not the models': 16 request threads, a load's JSON parsing, the
# allocator's per-thread arenas. Measured here at ~31 MiB, the same whether 100 or all
# 300 models are loaded (the models themselves are ~20 KB each).
RSS_ALLOWANCE = 48 * 1024 * 1024


@pytest.fixture(scope="module")
def many_models(
    stack: EmbeddedStack, served: dict[str, Any], expected_yhat: Any
) -> dict[str, list[float]]:
    """300 TargetModels made from the run's 30 archives, each relabelled with its own
    customer id (the container serves what it is given); the forecast each must get."""
    assert stack.info is not None
    s3, bucket = stack.client("s3"), stack.info.artifacts_bucket
    run_id = served["run_id"]
    sources = []
    for customer_id in CUSTOMERS:
        key = layout.model_key(customer_id, run_id)
        sources.append(read_archive(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
    expected: dict[str, list[float]] = {}
    folder = Path(stack.state_dir) / "many-models"
    folder.mkdir(exist_ok=True)

    def publish(index: int) -> None:
        model_json, metadata = sources[index % len(sources)]
        customer_id = f"load-{index:03d}"
        archive = folder / f"{customer_id}.tar.gz"
        write_archive(archive, model_json, metadata.model_copy(update={"customer_id": customer_id}))
        s3.upload_file(str(archive), bucket, layout.model_key(customer_id, run_id))
        expected[layout.target_model(customer_id, run_id)] = expected_yhat(
            CUSTOMERS[index % len(sources)], max(PERIODS)
        )

    for customer_id in CUSTOMERS:
        expected_yhat(customer_id, max(PERIODS))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(publish, range(MODELS)))
    return expected


def test_16_threads_over_300_models_with_room_for_100(
    stack: EmbeddedStack, served: dict[str, Any], many_models: dict[str, list[float]]
) -> None:
    assert stack.serving is not None
    endpoint = stack.serving.endpoint()
    container = endpoint.container
    targets = sorted(many_models)
    runtime = stack.client("sagemaker-runtime")
    name = served["env"]["FLEETCAST_ENDPOINT_NAME"]

    def invoke(client: Any, target: str, period: int) -> dict[str, Any]:
        response = client.invoke_endpoint(
            EndpointName=name,
            TargetModel=target,
            ContentType="application/json",
            Body=json.dumps({"period": period}),
        )
        document: dict[str, Any] = json.loads(response["Body"].read())
        return document

    # Given a container restarted with a memory budget that holds about 100 models
    invoke(runtime, targets[0], 7)
    answer = container.request("GET", "/models/" + urllib.parse.quote(targets[0], safe=""))
    model_bytes = json.loads(answer.body)["memoryBytes"]
    budget = RESIDENT * model_bytes
    original_budget = container.memory_budget_mb
    container.restart(memory_budget_mb=budget / 2**20)
    baseline_rss, _ = container.rss_bytes()
    try:
        random = np.random.default_rng(16)
        plans = [
            [
                (targets[int(random.integers(MODELS))], int(random.choice(PERIODS)))
                for _ in range(REQUESTS_PER_THREAD)
            ]
            for _ in range(THREADS)
        ]
        outcomes: Counter[str] = Counter()
        wrong: list[str] = []

        def worker(plan: list[tuple[str, int]]) -> None:
            # One client per thread, no retries: every answer is counted.
            own = boto3.session.Session().client(
                "sagemaker-runtime",
                endpoint_url=stack.endpoint_url,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                config=Config(retries={"max_attempts": 1}, read_timeout=60),
            )
            for target, period in plan:
                while True:
                    try:
                        document = invoke(own, target, period)
                    except ClientError as error:
                        code = error.response["Error"]["Code"]
                        outcomes[code] += 1
                        if code in ("ModelNotReadyException", "ServiceUnavailable"):
                            time.sleep(0.05)  # the deliberate "retry shortly" answers
                            continue
                        wrong.append(f"{target}: {error}")
                        break
                    outcomes["ok"] += 1
                    yhat = [p["yhat"] for p in document["forecast"]]
                    if not np.allclose(yhat, many_models[target][:period], rtol=0, atol=1e-6):
                        wrong.append(f"{target} period {period}: wrong forecast")
                    break

        # When 16 threads send 200 requests each, spread over the 300 models (in two
        # halves, to see whether memory grows with the loads and unloads)
        half = REQUESTS_PER_THREAD // 2
        started = time.perf_counter()
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(worker, [plan[:half] for plan in plans]))
            middle_rss, _ = container.rss_bytes()
            middle_loads = endpoint.stats.loads
            list(pool.map(worker, [plan[half:] for plan in plans]))
        elapsed = time.perf_counter() - started
        final_rss, peak_rss = container.rss_bytes()
        loaded = [
            m["modelName"]
            for m in json.loads(container.request("GET", "/models?limit=1000").body)["models"]
        ]
        held = sum(
            json.loads(container.request("GET", "/models/" + urllib.parse.quote(m, safe="")).body)[
                "memoryBytes"
            ]
            for m in loaded
        )
        # Then every request got its own model's forecast; the only errors were "not
        # ready, retry"; the container held about 100 models, within its budget
        assert not wrong, wrong[:5]
        assert outcomes["ok"] == THREADS * REQUESTS_PER_THREAD, outcomes
        assert set(outcomes) <= {"ok", "ModelNotReadyException", "ServiceUnavailable"}, outcomes
        assert len(loaded) <= RESIDENT + 5 and held <= budget
        assert endpoint.stats.unloads > 0
        # And its resident memory stayed within the budget plus the fixed allowance, and
        # did not grow with the second half's loads (a leak of a model each would show)
        assert peak_rss - baseline_rss <= budget + RSS_ALLOWANCE, (peak_rss - baseline_rss) / 2**20
        second_half_loads = endpoint.stats.loads - middle_loads
        assert second_half_loads > 500
        assert final_rss - middle_rss < second_half_loads * model_bytes / 4
        print(
            f"\n{THREADS}x{REQUESTS_PER_THREAD} requests over {MODELS} models in {elapsed:.1f} s; "
            f"{outcomes}; loads {endpoint.stats.loads}, unloads {endpoint.stats.unloads}; "
            f"budget {budget / 2**20:.2f} MiB holds {len(loaded)} models ({held / 2**20:.2f} MiB); "
            f"RSS {baseline_rss / 2**20:.1f} MiB at start, +{(middle_rss - baseline_rss) / 2**20:.1f} "
            f"after the first half, +{(final_rss - baseline_rss) / 2**20:.1f} at the end"
        )
    finally:
        container.restart(memory_budget_mb=original_budget)
