"""The local multi-model endpoint: the SageMaker runtime's InvokeEndpoint through a standard
boto3 client, the platform logic in front of the real inference container (a subprocess),
model archives in a moto server's S3. Every path: cold load, warm invoke, LRU unloading
on 507, a bounded disk, unknown endpoint / target model, container errors, and a
container that dies and comes back."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pandas as pd
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from model_helpers import chosen
from prophet import Prophet
from prophet.serialize import model_to_json
from werkzeug.serving import make_server

from fleetcast.embedded.endpoint import (
    EndpointRuntime,
    InferenceContainer,
    LocalEndpoint,
    ModelDiskCache,
)
from fleetcast.embedded.sagemaker_jobs.containers import (
    image_entrypoint,
    image_environment,
    local_command,
)
from fleetcast_contracts import layout
from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata, write_archive

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"
REGION = "us-east-1"
BUCKET = "fleetcast-artifacts-123456789012"
RUN_ID = "q0000000902-20240601t120000"
CUSTOMERS = [f"c-{i:02d}" for i in range(12)]
BASE_MODELS = 3
HORIZON = 14
MiB = 1024 * 1024


@dataclass(frozen=True)
class Fleet:
    """Model archives in S3 under models/<customer>/<run>.tar.gz, and Prophet's own yhat."""

    yhat: dict[str, list[float]]  # by customer, for the first HORIZON days

    @staticmethod
    def target(customer_id: str) -> str:
        return layout.target_model(customer_id, RUN_ID)


@pytest.fixture(scope="module")
def s3(moto_endpoint: str) -> Any:
    return client("s3", moto_endpoint)


def client(service: str, endpoint_url: str, **config: Any) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(**config) if config else None,
    )


@pytest.fixture(scope="module")
def fleet(s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    # Three fitted models shared round-robin by twelve customers.
    logging.getLogger("cmdstanpy").disabled = True
    folder = tmp_path_factory.mktemp("archives")
    s3.create_bucket(Bucket=BUCKET)
    day = np.arange(90)
    jsons, yhats = [], []
    for base in range(BASE_MODELS):
        noise = np.random.default_rng(base).normal(0, 8, day.size)
        y = 400 + 150 * base + 50 * np.sin(2 * np.pi * day / 7 + base) + noise
        history = pd.DataFrame({"ds": pd.date_range("2024-01-01", periods=day.size), "y": y})
        model = Prophet(yearly_seasonality=False).fit(history)
        future = model.make_future_dataframe(periods=HORIZON, include_history=False)
        yhats.append(model.predict(future)["yhat"].tolist())
        jsons.append(model_to_json(model))
    yhat = {}
    for index, customer_id in enumerate(CUSTOMERS):
        archive = folder / f"{customer_id}.tar.gz"
        write_archive(archive, jsons[index % BASE_MODELS], metadata(customer_id))
        s3.upload_file(str(archive), BUCKET, layout.model_key(customer_id, RUN_ID))
        yhat[customer_id] = yhats[index % BASE_MODELS]
    s3.put_object(Bucket=BUCKET, Key="models/broken/run.tar.gz", Body=b"not an archive at all")
    return Fleet(yhat)


def metadata(customer_id: str) -> ModelMetadata:
    return ModelMetadata(
        **chosen(),
        customer_id=customer_id,
        run_id=RUN_ID,
        trained_at=datetime(2024, 6, 1, 12, tzinfo=UTC),
        data_start=date(2024, 1, 1),
        data_end=date(2024, 3, 30),
        rows=90,
        metrics=HoldoutMetrics(
            windows=2, holdout_days=7, smape=0.1, mae=10, naive_smape=0.2, naive_mae=20
        ),
        library_versions={"prophet": "1.5.0"},
    )


@dataclass
class Runtime:
    """One endpoint (container + platform) served like the local stack's gateway serves it."""

    endpoint: LocalEndpoint
    runtime: EndpointRuntime
    client: Any  # sagemaker-runtime, no retries: every answer is seen
    name: str

    @property
    def container(self) -> InferenceContainer:
        return self.endpoint.container

    @property
    def cache(self) -> ModelDiskCache:
        return self.endpoint.cache

    def invoke(self, customer_id: str, period: int = 7, **overrides: Any) -> dict[str, Any]:
        request = {
            "EndpointName": self.name,
            "TargetModel": Fleet.target(customer_id),
            "ContentType": "application/json",
            "Body": json.dumps({"period": period}),
            **overrides,
        }
        response = self.client.invoke_endpoint(**request)
        document: dict[str, Any] = json.loads(response["Body"].read())
        document["_variant"] = response["InvokedProductionVariant"]
        return document

    def container_models(self) -> list[str]:
        answer = self.container.request("GET", "/models?limit=1000")
        return sorted(m["modelName"] for m in json.loads(answer.body)["models"])

    def model_bytes(self, customer_id: str) -> int:
        answer = self.container.request(
            "GET", "/models/" + Fleet.target(customer_id).replace("/", "%2F")
        )
        return int(json.loads(answer.body)["memoryBytes"])


@pytest.fixture(scope="module")
def start_runtime(
    moto_endpoint: str, s3: Any, fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Runtime]]:
    sagemaker = client("sagemaker", moto_endpoint)
    started: list[tuple[Runtime, Any]] = []

    def start(
        name: str,
        memory_budget_mb: float = 64,
        disk_bytes: int = 512 * MiB,
        restart_delay: float = 0.2,
    ) -> Runtime:
        home = tmp_path_factory.mktemp(name)
        sagemaker.create_model(
            ModelName=f"{name}-model",
            ExecutionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/inference",
            PrimaryContainer={
                "Image": "fleetcast-inference:latest",
                "Mode": "MultiModel",
                "ModelDataUrl": f"s3://{BUCKET}/{layout.MODELS_PREFIX}",
            },
        )
        sagemaker.create_endpoint_config(
            EndpointConfigName=f"{name}-config",
            ProductionVariants=[
                {
                    "VariantName": "AllTraffic",
                    "ModelName": f"{name}-model",
                    "InstanceType": "ml.c5.xlarge",
                    "InitialInstanceCount": 1,
                }
            ],
        )
        sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-config")
        command = local_command(
            [*image_entrypoint("fleetcast-inference:latest", ROOT / "containers"), "serve"]
        )
        container = InferenceContainer(
            command,
            home / "opt_ml",
            home / "container.log",
            memory_budget_mb,
            restart_delay,
            environment=image_environment("fleetcast-inference:latest", ROOT / "containers"),
        )
        cache = ModelDiskCache(container.models_root, disk_bytes, s3, BUCKET, layout.MODELS_PREFIX)
        endpoint = LocalEndpoint(name, container, cache, "AllTraffic", ACCOUNT, REGION)
        container.on_restart = endpoint.forget_loaded
        container.start()
        runtime = EndpointRuntime(sagemaker, ACCOUNT, REGION, existence_ttl=0)
        runtime.add(endpoint)
        server = make_server("127.0.0.1", 0, runtime, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_port}"
        invoker = client(
            "sagemaker-runtime", url, retries={"max_attempts": 1}, max_pool_connections=32
        )
        result = Runtime(endpoint, runtime, invoker, name)
        started.append((result, server))
        return result

    yield start
    for result, server in started:
        server.shutdown()
        result.container.stop()


@pytest.fixture(scope="module")
def roomy(start_runtime: Callable[..., Runtime]) -> Runtime:
    """An endpoint with room for every model."""
    return start_runtime("roomy")


def error_of(call: Callable[[], Any]) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        call()
    response: dict[str, Any] = raised.value.response
    return response


def assert_forecast(document: dict[str, Any], fleet: Fleet, customer_id: str, period: int) -> None:
    assert document["customer_id"] == customer_id
    assert document["model_version"] == RUN_ID
    yhat = [point["yhat"] for point in document["forecast"]]
    assert len(yhat) == period
    assert np.allclose(yhat, fleet.yhat[customer_id][:period], rtol=0, atol=1e-6)
    for point in document["forecast"]:
        assert point["yhat_lower"] < point["yhat"] < point["yhat_upper"]


# ---------------------------------------------------------------- cold and warm


def test_first_invoke_downloads_unpacks_loads_and_forecasts_as_prophet(
    roomy: Runtime, fleet: Fleet
) -> None:
    # Given a TargetModel the endpoint has never seen
    customer = CUSTOMERS[0]
    assert not roomy.cache.cached(Fleet.target(customer))
    # When it is invoked
    document = roomy.invoke(customer, period=HORIZON)
    # Then the archive was downloaded and unpacked under /opt/ml/models, loaded, and the
    # answer is Prophet's forecast
    assert_forecast(document, fleet, customer, HORIZON)
    assert document["_variant"] == "AllTraffic"
    folder = roomy.container.models_root / roomy.cache.folder_name(Fleet.target(customer)) / "model"
    assert sorted(p.name for p in folder.iterdir()) == ["metadata.json", "model.json"]
    assert Fleet.target(customer) in roomy.container_models()
    assert (roomy.endpoint.stats.loads, roomy.cache.downloads) == (1, 1)


def test_a_warm_model_is_neither_downloaded_nor_loaded_again(roomy: Runtime, fleet: Fleet) -> None:
    customer = CUSTOMERS[1]
    roomy.invoke(customer)
    loads, downloads = roomy.endpoint.stats.loads, roomy.cache.downloads
    for period in (1, 7, 14, 7):
        assert_forecast(roomy.invoke(customer, period=period), fleet, customer, period)
    assert (roomy.endpoint.stats.loads, roomy.cache.downloads) == (loads, downloads)


def test_the_public_samples_double_encoded_body_is_served_too(roomy: Runtime, fleet: Fleet) -> None:
    document = roomy.invoke(CUSTOMERS[2], Body=json.dumps(json.dumps({"period": 3})))
    assert_forecast(document, fleet, CUSTOMERS[2], 3)


# ---------------------------------------------------------------- errors, as AWS gives them


def test_a_target_model_not_in_s3_is_a_validation_error(roomy: Runtime) -> None:
    response = error_of(lambda: roomy.invoke("nobody"))
    assert response["Error"]["Code"] == "ValidationError"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
    key = layout.model_key("nobody", RUN_ID)
    assert (
        f"Failed to download model data(bucket: {BUCKET}, key: {key})"
        in response["Error"]["Message"]
    )
    assert not roomy.cache.cached(Fleet.target("nobody"))


def test_an_unknown_endpoint_is_a_validation_error(roomy: Runtime) -> None:
    response = error_of(lambda: roomy.invoke(CUSTOMERS[0], EndpointName="nope"))
    assert response["Error"]["Code"] == "ValidationError"
    assert response["Error"]["Message"] == f"Endpoint nope of account {ACCOUNT} not found."


@pytest.mark.parametrize("target_model", ["../secrets.tar.gz", "/abs.tar.gz", "a//b.tar.gz"])
def test_a_target_model_outside_the_prefix_is_refused(roomy: Runtime, target_model: str) -> None:
    response = error_of(lambda: roomy.invoke(CUSTOMERS[0], TargetModel=target_model))
    assert response["Error"]["Code"] == "ValidationError"
    assert "relative path" in response["Error"]["Message"]


def test_a_multi_model_endpoint_needs_a_target_model(roomy: Runtime) -> None:
    with pytest.raises(ClientError) as raised:
        roomy.client.invoke_endpoint(
            EndpointName=roomy.name, ContentType="application/json", Body=b'{"period": 7}'
        )
    assert raised.value.response["Error"]["Code"] == "ValidationError"
    assert "missing a target model header" in raised.value.response["Error"]["Message"]


def test_a_container_error_is_a_model_error_with_its_status_and_message(roomy: Runtime) -> None:
    response = error_of(lambda: roomy.invoke(CUSTOMERS[0], Body=b'{"period": 0}'))
    assert response["Error"]["Code"] == "ModelError"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert response["OriginalStatusCode"] == 400
    assert "'period' must be from 1 to 720" in response["OriginalMessage"]
    assert response["LogStreamArn"].endswith(f"log-group:/aws/sagemaker/Endpoints/{roomy.name}")
    assert response["Error"]["Message"].startswith("Received client error (400) from model")


def test_an_archive_the_container_cannot_read_is_a_model_error(roomy: Runtime) -> None:
    response = error_of(lambda: roomy.invoke(CUSTOMERS[0], TargetModel="broken/run.tar.gz"))
    assert response["Error"]["Code"] == "ModelError"
    assert response["OriginalStatusCode"] == 400
    assert "InvalidArtifact" in response["OriginalMessage"]


def test_a_deleted_endpoint_is_not_found(
    start_runtime: Callable[..., Runtime], moto_endpoint: str
) -> None:
    runtime = start_runtime("doomed")
    runtime.invoke(CUSTOMERS[0])
    client("sagemaker", moto_endpoint).delete_endpoint(EndpointName="doomed")
    response = error_of(lambda: runtime.invoke(CUSTOMERS[0]))
    assert response["Error"]["Message"] == f"Endpoint doomed of account {ACCOUNT} not found."


# ---------------------------------------------------------------- memory and disk


def budget_for(roomy: Runtime, models: float) -> float:
    """A memory budget (MiB) that holds about ``models`` of the fleet's models."""
    roomy.invoke(CUSTOMERS[0])
    largest = max(roomy.model_bytes(CUSTOMERS[0]), 1)
    return models * largest / MiB


def test_on_507_the_least_recently_used_models_are_unloaded(
    start_runtime: Callable[..., Runtime], roomy: Runtime, fleet: Fleet
) -> None:
    # Given a container with room for three models
    tight = start_runtime("tight", memory_budget_mb=budget_for(roomy, 3.5))
    # When six models are used in turn, then the first used again
    for customer in CUSTOMERS[:6]:
        assert_forecast(tight.invoke(customer), fleet, customer, 7)
    # Then each answer was right, the container holds at most three, and the platform
    # unloaded the oldest ones to make room
    loaded = tight.container_models()
    assert len(loaded) <= 3
    assert loaded == sorted(tight.endpoint.loaded_models())
    assert Fleet.target(CUSTOMERS[5]) in loaded and Fleet.target(CUSTOMERS[0]) not in loaded
    assert tight.endpoint.stats.unloads >= 3
    # And a model used recently survives the next load, the least recent one does not
    tight.invoke(CUSTOMERS[3])
    tight.invoke(CUSTOMERS[6])
    loaded = tight.container_models()
    assert Fleet.target(CUSTOMERS[3]) in loaded and Fleet.target(CUSTOMERS[6]) in loaded
    assert Fleet.target(CUSTOMERS[4]) not in loaded
    # And an unloaded model comes back from the disk cache, not from S3
    downloads = tight.cache.downloads
    assert_forecast(tight.invoke(CUSTOMERS[0]), fleet, CUSTOMERS[0], 7)
    assert tight.cache.downloads == downloads


def test_the_disk_cache_keeps_within_its_size(
    start_runtime: Callable[..., Runtime], roomy: Runtime, fleet: Fleet
) -> None:
    # Given a disk with room for about three unpacked models
    roomy.invoke(CUSTOMERS[0])
    folder = roomy.container.models_root / roomy.cache.folder_name(Fleet.target(CUSTOMERS[0]))
    model_size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    small = start_runtime("small-disk", disk_bytes=int(3.5 * model_size))
    # When six models are used
    for customer in CUSTOMERS[:6]:
        small.invoke(customer)
    # Then at most three stay on disk, and the oldest went first
    on_disk = [p for p in small.container.models_root.iterdir() if not p.name.startswith(".")]
    assert len(on_disk) <= 3 and small.cache.used_bytes <= small.cache.capacity_bytes
    assert not small.cache.cached(Fleet.target(CUSTOMERS[0]))
    assert small.cache.deletions >= 3
    # And a model loaded in memory still answers after its files are gone
    assert_forecast(small.invoke(CUSTOMERS[0]), fleet, CUSTOMERS[0], 7)


def test_concurrent_invokes_over_more_models_than_fit_are_all_correct(
    start_runtime: Callable[..., Runtime], roomy: Runtime, fleet: Fleet
) -> None:
    # Given room for four of twelve models
    busy = start_runtime("busy", memory_budget_mb=budget_for(roomy, 4.5))
    random = np.random.default_rng(7)
    work = [
        (CUSTOMERS[int(random.integers(len(CUSTOMERS)))], int(random.choice([1, 7, 14])))
        for _ in range(320)
    ]
    outcomes: Counter[str] = Counter()

    def one(customer: str, period: int) -> None:
        for _ in range(20):
            try:
                assert_forecast(busy.invoke(customer, period), fleet, customer, period)
                outcomes["ok"] += 1
                return
            except ClientError as error:
                code = error.response["Error"]["Code"]
                outcomes[code] += 1
                # Only "not ready, retry" is an acceptable answer here.
                assert code == "ModelNotReadyException", error.response
                time.sleep(0.01)
        raise AssertionError(f"{customer} never became ready")

    # When 8 threads send them at once
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: one(*item), work))
    # Then every request got its model's forecast, and the container stayed in budget
    assert outcomes["ok"] == len(work), outcomes
    assert len(busy.container_models()) <= 4
    assert busy.endpoint.stats.unloads > 0


# ---------------------------------------------------------------- a container that dies


def test_a_dead_container_gives_503_then_the_endpoint_recovers(
    start_runtime: Callable[..., Runtime], fleet: Fleet
) -> None:
    # Given a serving endpoint whose container is replaced two seconds after it dies
    fragile = start_runtime("fragile", restart_delay=2.0)
    fragile.invoke(CUSTOMERS[0])
    pid = fragile.container.pid
    assert pid is not None
    # When the container is killed
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while fragile.container.pid == pid and time.monotonic() < deadline:
        time.sleep(0.02)
    # Then invocations get ServiceUnavailable (503) meanwhile
    response = error_of(lambda: fragile.invoke(CUSTOMERS[0]))
    assert response["Error"]["Code"] == "ServiceUnavailable"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 503
    # And once a new container answers, the model is loaded again and served
    deadline = time.monotonic() + 60
    while True:
        try:
            document = fragile.invoke(CUSTOMERS[0])
            break
        except ClientError as error:
            assert error.response["Error"]["Code"] == "ServiceUnavailable"
            assert time.monotonic() < deadline, "the container did not come back"
            time.sleep(0.1)
    assert_forecast(document, fleet, CUSTOMERS[0], 7)
    # (the watcher counts the restart once its own ping is answered, which can come a
    # moment after the invocation above)
    deadline = time.monotonic() + 10
    while fragile.container.restarts == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fragile.container.restarts == 1
    assert fragile.container.pid not in (None, pid)
    assert fragile.endpoint.stats.loads == 2
