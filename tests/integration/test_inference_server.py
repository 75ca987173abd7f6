"""The inference container over real HTTP on 127.0.0.1, as SageMaker's platform drives it."""

from __future__ import annotations

import http.client
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from model_helpers import chosen
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_json

from fleetcast_contracts.holiday_calendar import (
    HolidayCalendar,
    calendar_years,
    holiday_dates,
    holidays_frame,
)
from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_forecasters.forecast import simulated_periods
from fleetcast_forecasters.prophet_forecaster import forecast_seed
from fleetcast_inference import app as app_module
from fleetcast_inference.registry import ServedModel
from fleetcast_inference.server import InferenceServer
from fleetcast_inference.settings import InferenceSettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]

MODELS = 30
BASE_MODELS = 3
PERIODS = (1, 7, 14)
RUN_ID = "q0000000902-20240601t120000"
TARGET_MODEL = "X-Amzn-SageMaker-Target-Model"


@dataclass(frozen=True)
class Fleet:
    """Model folders laid out as SageMaker downloads them, and Prophet's own yhat."""

    opt_ml: Path
    names: list[str]
    customer_of: dict[str, str]
    # Prophet.predict's yhat for the first max(PERIODS) dates, by model name.
    yhat_of: dict[str, list[float]]
    # The fitted model (Prophet's JSON), by model name.
    model_json_of: dict[str, str]

    def url(self, name: str) -> str:
        return f"/opt/ml/models/{name}/model"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    # Three fitted models shared round-robin by thirty customers: enough to tell
    # customers apart without thirty fits.
    opt_ml = tmp_path_factory.mktemp("opt_ml")
    logging.getLogger("cmdstanpy").disabled = True
    day = np.arange(120)
    base_jsons, base_yhat = [], []
    for base in range(BASE_MODELS):
        noise = np.random.default_rng(base).normal(0, 10, day.size)
        y = 500 + 100 * base + 60 * np.sin(2 * np.pi * day / 7 + base) + noise
        history = pd.DataFrame({"ds": pd.date_range("2022-03-01", periods=day.size), "y": y})
        model = Prophet(yearly_seasonality=False).fit(history)
        future = model.make_future_dataframe(periods=max(PERIODS), include_history=False)
        base_yhat.append(model.predict(future)["yhat"].tolist())
        base_jsons.append(model_to_json(model))
    names, customer_of, yhat_of, model_json_of = [], {}, {}, {}
    for index in range(MODELS):
        name, customer = f"m{index:02d}", f"c-{index:02d}"
        folder = opt_ml / "models" / name / "model"
        folder.mkdir(parents=True)
        write_archive(
            folder / f"{customer}.tar.gz", base_jsons[index % BASE_MODELS], metadata(customer)
        )
        names.append(name)
        customer_of[name] = customer
        yhat_of[name] = base_yhat[index % BASE_MODELS]
        model_json_of[name] = base_jsons[index % BASE_MODELS]
    garbage = opt_ml / "models" / "garbage" / "model"
    garbage.mkdir(parents=True)
    (garbage / "c-x.tar.gz").write_bytes(b"this is not a gzip file")
    return Fleet(opt_ml, names, customer_of, yhat_of, model_json_of)


def metadata(customer_id: str) -> ModelMetadata:
    return ModelMetadata(
        **chosen(),
        customer_id=customer_id,
        run_id=RUN_ID,
        trained_at=datetime(2024, 6, 1, 12, tzinfo=UTC),
        data_start=date(2022, 3, 1),
        data_end=date(2022, 6, 28),
        rows=120,
        metrics=HoldoutMetrics(
            windows=2, holdout_days=7, smape=0.1, mae=10, naive_smape=0.2, naive_mae=20
        ),
        library_versions={"prophet": "1.5.0"},
    )


class Client:
    """One keep-alive connection, as the platform holds them."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def send(
        self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        raw = (
            body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
        )
        self.connection.request(
            method, path, body=raw, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = self.connection.getresponse()
        payload = response.read()
        assert response.getheader("Content-Type") == "application/json"
        return response.status, json.loads(payload)

    def load(self, fleet: Fleet, name: str) -> tuple[int, Any]:
        return self.send("POST", "/models", {"model_name": name, "url": fleet.url(name)})

    def invoke(self, name: str, body: object) -> tuple[int, Any]:
        return self.send("POST", f"/models/{name}/invoke", body, {TARGET_MODEL: f"{name}.tar.gz"})

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def start_server(fleet: Fleet) -> Iterator[Callable[..., int]]:
    """Start a container server in a thread on an ephemeral port; stop it afterwards."""
    servers: list[tuple[InferenceServer, threading.Thread]] = []

    def start(budget_bytes: int = 2**30) -> int:
        settings = InferenceSettings(
            host="127.0.0.1",
            port=0,
            opt_ml_root=fleet.opt_ml,
            memory_budget_bytes=budget_bytes,
            multi_model=True,
        )
        server = InferenceServer(settings)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        servers.append((server, thread))
        return server.port

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def model_bytes(fleet: Fleet) -> int:
    """What one of the fleet's models accounts for once loaded."""
    settings = InferenceSettings("127.0.0.1", 0, fleet.opt_ml, 2**30, True)
    path = settings.models_root / fleet.names[0] / "model"
    return app_module.build_served_model("probe", fleet.url(fleet.names[0]), path).memory_bytes


def assert_forecast(fleet: Fleet, name: str, period: int, answer: dict[str, Any]) -> None:
    assert (answer["customer_id"], answer["model_version"]) == (fleet.customer_of[name], RUN_ID)
    rows = answer["forecast"]
    assert len(rows) == period
    assert rows[0]["ds"] == "2022-06-29"
    np.testing.assert_allclose(
        [row["yhat"] for row in rows], fleet.yhat_of[name][:period], atol=1e-6
    )
    for row in rows:
        assert row["yhat_lower"] < row["yhat"] < row["yhat_upper"]


def test_every_route_answers_with_its_status(
    fleet: Fleet, start_server: Callable[..., int]
) -> None:
    client = Client(start_server())
    name = fleet.names[0]
    try:
        # Health, then a load and a second load of the same name
        assert client.send("GET", "/ping") == (200, {"status": "healthy"})
        assert client.load(fleet, name)[0] == 200
        assert client.load(fleet, name)[0] == 409

        # Loads that cannot succeed say why
        status, error = client.send("POST", "/models", b"{not json")
        assert (status, error["error"]) == (400, "BadRequest")
        status, error = client.load(fleet, "absent")
        assert (status, error["error"]) == (404, "ArtifactNotFound")
        status, error = client.load(fleet, "garbage")
        assert (status, error["error"]) == (400, "InvalidArtifact")
        assert "not a readable model archive" in error["message"]

        # Describe a loaded and an unknown model
        status, details = client.send("GET", f"/models/{name}")
        assert (status, details["modelUrl"]) == (200, fleet.url(name))
        assert client.send("GET", "/models/absent")[0] == 404

        # Invoke: Prophet's numbers; the sample's double-encoded body; bad bodies; unknown model
        status, answer = client.invoke(name, {"period": 7})
        assert status == 200
        assert_forecast(fleet, name, 7, answer)
        assert client.invoke(name, json.dumps('{"period": 7}').encode()) == (200, answer)
        for body, message in (
            (b"period=7", "not JSON"),
            ({"days": 7}, "unknown field 'days'"),
            ({}, "lacks 'period'"),
            ({"period": "7"}, "must be an integer"),
            ({"period": 0}, "from 1 to 720"),
            ({"period": 400}, "from 1 to 365 for"),
        ):
            status, error = client.invoke(name, body)
            assert (status, error["error"]) == (400, "BadRequest")
            assert message in error["message"]
        status, error = client.invoke("absent", {"period": 7})
        assert (status, error["error"]) == (404, "ModelNotFound")

        # Unload, twice
        assert client.send("DELETE", f"/models/{name}")[0] == 200
        assert client.send("DELETE", f"/models/{name}")[0] == 404
        assert client.invoke(name, {"period": 7})[0] == 404
        assert client.send("POST", "/ping")[0] == 405
    finally:
        client.close()

    # Methods http.server itself refuses get a JSON error too
    client = Client(client.connection.port)
    try:
        status, error = client.send("BREW", "/ping")
        assert (status, error["error"]) == (501, "NotImplemented")
        assert "BREW" in error["message"]
    finally:
        client.close()


def test_quantiles_over_http_are_prophets_and_nothing_is_below_zero(
    fleet: Fleet, start_server: Callable[..., int], tmp_path: Path
) -> None:
    # Given a served model, and Prophet's own predictive samples under the seed the
    # container uses for this run (the customer and the period are no part of it)
    client = Client(start_server())
    name, period = fleet.names[2], 14
    prophet = model_from_json(fleet.model_json_of[name])
    # (the first `period` days of Prophet's forecast of simulated_periods: a day's draws
    # are the same whatever the period)
    future = prophet.make_future_dataframe(periods=simulated_periods(period), include_history=False)
    np.random.seed(forecast_seed(RUN_ID))
    samples = prophet.predictive_samples(future)["yhat"][:period]
    # ... and a customer whose use falls so fast its trend goes below zero
    day = np.arange(120)
    falling = pd.DataFrame(
        {
            "ds": pd.date_range("2022-03-01", periods=day.size),
            "y": 400 - 3.2 * day + 20 * np.sin(2 * np.pi * day / 7),
        }
    )
    falling_json = model_to_json(
        Prophet(yearly_seasonality=False, daily_seasonality=False).fit(falling)
    )
    folder = fleet.opt_ml / "models" / "falling" / "model"
    folder.mkdir(parents=True, exist_ok=True)
    write_archive(folder / "c-falling.tar.gz", falling_json, metadata("c-falling"))
    try:
        assert client.load(fleet, name)[0] == 200
        assert client.load(fleet, "falling")[0] == 200

        # When quantiles are asked for, and the same without them
        status, answer = client.invoke(name, {"period": period, "quantiles": [0.9, 0.1, 0.5]})
        plain = client.invoke(name, {"period": period})[1]
        falling_status, falling_answer = client.invoke(
            "falling", {"period": 60, "quantiles": [0.05, 0.95]}
        )
        refused = client.invoke(name, {"period": 7, "quantiles": [0.5, 1.5]})
    finally:
        client.close()

    # Then the quantiles are numpy's of Prophet's samples, the rest is the plain answer
    assert status == 200
    assert_forecast(fleet, name, period, answer)
    got = np.array(
        [[row["quantiles"][key] for key in ("0.1", "0.5", "0.9")] for row in answer["forecast"]]
    )
    np.testing.assert_allclose(got, np.quantile(samples, [0.1, 0.5, 0.9], axis=1).T, atol=1e-6)
    for row in answer["forecast"]:
        del row["quantiles"]
    assert answer == plain
    # ... the falling customer's forecast stops at zero and says how many values did
    assert falling_status == 200
    values = [
        value
        for row in falling_answer["forecast"]
        for value in (row["yhat"], row["yhat_lower"], row["yhat_upper"], *row["quantiles"].values())
    ]
    assert min(values) == 0.0 and falling_answer["clipped_at_zero"] == values.count(0.0) > 0
    # ... and a quantile outside (0, 1) is a 400 that names it
    assert refused[0] == 400
    assert "'quantiles'[1] must be between 0 and 1" in refused[1]["message"]


def test_models_with_holidays_are_served_with_prophets_holidays(
    fleet: Fleet, start_server: Callable[..., int]
) -> None:
    # Given two customers' models with a 30% dip on public holidays, one fitted with
    # Prophet's US holidays and one with California's frame (a subdivision), written as
    # training writes archives, with the calendar in their metadata
    logging.getLogger("cmdstanpy").disabled = True
    history_days, start = 500, date(2023, 1, 1)
    ds = pd.date_range(start, periods=history_days)
    day = np.arange(history_days)
    customers = {"c-us": HolidayCalendar.of("US"), "c-california": HolidayCalendar.of("US", "CA")}
    expected = {}
    for customer, calendar in customers.items():
        dips = {d for d, _ in holiday_dates("US", calendar.subdivision, range(2023, 2025))}
        y = 600 + 80 * np.sin(2 * np.pi * day / 7) + np.random.default_rng(7).normal(0, 9, day.size)
        y[[d.date() in dips for d in ds]] *= 0.7
        end = ds[-1].date()
        if calendar.subdivision is None:
            prophet = Prophet(yearly_seasonality=False).add_country_holidays(calendar.country)
        else:
            frame = holidays_frame(calendar, calendar_years(start, end))
            prophet = Prophet(yearly_seasonality=False, holidays=frame)
        model_json = model_to_json(prophet.fit(pd.DataFrame({"ds": ds, "y": y})))
        folder = fleet.opt_ml / "models" / customer / "model"
        folder.mkdir(parents=True, exist_ok=True)
        write_archive(
            folder / f"{customer}.tar.gz",
            model_json,
            metadata(customer).model_copy(
                update={"data_start": start, "data_end": end, "holiday_calendar": calendar}
            ),
        )
        model = model_from_json(model_json)
        future = model.make_future_dataframe(periods=365, include_history=False)
        np.random.seed(forecast_seed(RUN_ID))
        expected[customer] = model.predict(future)

    # When both are loaded and asked for a year, which reaches into 2025, unseen in training
    client = Client(start_server())
    try:
        answers = {}
        for customer in customers:
            assert (
                client.send(
                    "POST", "/models", {"model_name": customer, "url": fleet.url(customer)}
                )[0]
                == 200
            )
            status, answers[customer] = client.invoke(customer, {"period": 365})
            assert status == 200
    finally:
        client.close()

    # Then every value is Prophet's, holidays included, and the holidays move the forecast
    for customer, answer in answers.items():
        rows, prophet_rows = answer["forecast"], expected[customer]
        assert rows[-1]["ds"].startswith("2025-")
        assert [row["ds"] for row in rows] == prophet_rows["ds"].dt.strftime("%Y-%m-%d").tolist()
        for column in ("yhat", "yhat_lower", "yhat_upper"):
            np.testing.assert_allclose(
                [row[column] for row in rows], prophet_rows[column], atol=1e-6
            )
        assert prophet_rows["holidays"].min() < -50
    # ... and California's own holiday is in its forecast only
    chavez = expected["c-california"]["ds"] == "2025-03-31"
    assert expected["c-california"].loc[chavez, "holidays"].iloc[0] < -50
    assert expected["c-us"].loc[chavez, "holidays"].iloc[0] == 0


def test_load_past_the_budget_is_507_until_a_model_is_unloaded(
    fleet: Fleet, start_server: Callable[..., int], model_bytes: int
) -> None:
    # Given a container whose budget holds two models
    client = Client(start_server(budget_bytes=int(model_bytes * 2.5)))
    first, second, third = fleet.names[:3]
    try:
        assert client.load(fleet, first)[0] == 200
        assert client.load(fleet, second)[0] == 200

        # When a third loads, then it is 507 until one is unloaded
        status, error = client.load(fleet, third)
        assert (status, error["error"]) == (507, "InsufficientMemory")
        assert client.send("DELETE", f"/models/{first}")[0] == 200
        assert client.load(fleet, third)[0] == 200
    finally:
        client.close()


def test_list_pages_follow_next_page_token(fleet: Fleet, start_server: Callable[..., int]) -> None:
    client = Client(start_server())
    try:
        # Given five loaded models
        for name in fleet.names[:5]:
            assert client.load(fleet, name)[0] == 200

        # When listed two at a time
        names, sizes, target = [], [], "/models?limit=2"
        while target:
            status, page = client.send("GET", target)
            assert status == 200
            names += [model["modelName"] for model in page["models"]]
            sizes.append(len(page["models"]))
            token = page.get("nextPageToken")
            target = f"/models?limit=2&next_page_token={token}" if token else ""

        # Then every model appears once, and a bad limit is refused
        assert names == fleet.names[:5]
        assert sizes == [2, 2, 1]
        assert client.send("GET", "/models?limit=zero")[0] == 400
    finally:
        client.close()


def test_ping_answers_while_a_load_is_in_progress(
    fleet: Fleet, start_server: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a load held mid-build
    release = threading.Event()
    building = threading.Event()
    real_build = app_module.build_served_model

    def held_build(name: str, url: str, path: Path) -> ServedModel:
        building.set()
        release.wait(timeout=30)
        return real_build(name, url, path)

    monkeypatch.setattr(app_module, "build_served_model", held_build)
    port = start_server()
    loader, pinger = Client(port), Client(port)
    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(loader.load(fleet, fleet.names[0])[0]))
    thread.start()
    try:
        assert building.wait(timeout=30)

        # When the platform pings and lists, then both answer while the load waits
        assert pinger.send("GET", "/ping")[0] == 200
        assert pinger.send("GET", "/models") == (200, {"models": []})
        assert not outcome
    finally:
        release.set()
        thread.join(timeout=30)
        loader.close()
        pinger.close()
    assert outcome == [200]


class PlatformLru:
    """The platform's view of which loaded model was used least recently."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._order: OrderedDict[str, None] = OrderedDict()

    def touch(self, name: str) -> None:
        with self._lock:
            self._order[name] = None
            self._order.move_to_end(name)

    def take_oldest(self, keep: str) -> str | None:
        with self._lock:
            for name in self._order:
                if name != keep:
                    del self._order[name]
                    return name
        return None


def test_concurrent_traffic_with_platform_style_unloading(
    fleet: Fleet, start_server: Callable[..., int], model_bytes: int
) -> None:
    # Given a container whose budget holds about ten of the thirty models
    port = start_server(budget_bytes=int(model_bytes * 10.5))
    lru = PlatformLru()
    statuses: list[int] = []
    answers: dict[tuple[str, int], Any] = {}
    failures: list[str] = []
    record = threading.Lock()

    def ensure_loaded(client: Client, name: str) -> None:
        for _ in range(200):
            status, body = client.load(fleet, name)
            with record:
                statuses.append(status)
            if status in (200, 409):
                lru.touch(name)
                return
            assert status == 507, body
            victim = lru.take_oldest(keep=name)
            if victim is None:
                time.sleep(0.002)
                continue
            status, body = client.send("DELETE", f"/models/{victim}")
            with record:
                statuses.append(status)
            assert status in (200, 404), body
        raise AssertionError(f"{name} never loaded")

    def invoke(client: Client, name: str, period: int) -> Any:
        for _ in range(200):
            status, body = client.invoke(name, {"period": period})
            with record:
                statuses.append(status)
            if status == 200:
                lru.touch(name)
                return body
            assert status == 404, body
            ensure_loaded(client, name)
        raise AssertionError(f"{name} never answered")

    def traffic(worker: int) -> None:
        client = Client(port)
        chooser = random.Random(worker)
        try:
            for _ in range(50):
                name, period = chooser.choice(fleet.names), chooser.choice(PERIODS)
                answer = invoke(client, name, period)
                assert_forecast(fleet, name, period, answer)
                with record:
                    # The same request gets the same answer, across loads and unloads.
                    assert answers.setdefault((name, period), answer) == answer
        except AssertionError as error:
            failures.append(f"worker {worker}: {error}")
        finally:
            client.close()

    # When eight workers send fifty invokes each over thirty models
    workers = [threading.Thread(target=traffic, args=(worker,)) for worker in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)

    # Then every answer was right and the only errors were the protocol's own
    assert failures == []
    assert statuses.count(200) >= 400
    assert set(statuses) <= {200, 404, 409, 507}
    assert 507 in statuses
    client = Client(port)
    try:
        status, listing = client.send("GET", "/models?limit=1000")
    finally:
        client.close()
    assert status == 200 and 1 <= len(listing["models"]) <= 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_command_uses_the_contract_environment(fleet: Fleet) -> None:
    # Given the container's command started with the local stack's environment
    port = free_port()
    environment = os.environ | {
        "SAGEMAKER_BIND_TO_PORT": str(port),
        "FLEETCAST_BIND_HOST": "127.0.0.1",
        "FLEETCAST_OPT_ML": str(fleet.opt_ml),
        "FLEETCAST_MEMORY_BUDGET_MB": "64",
        "SAGEMAKER_MULTI_MODEL": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "fleetcast_inference", "serve"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = None
        for _ in range(300):
            try:
                client = Client(port)
                if client.send("GET", "/ping")[0] == 200:
                    break
            except OSError:
                client = None
                time.sleep(0.05)
        assert client is not None, "the server never answered /ping"

        # When a model is loaded and invoked the way SageMaker does
        name = fleet.names[1]
        assert client.load(fleet, name)[0] == 200
        status, answer = client.invoke(name, {"period": 7})
        client.close()

        # Then it answers, and stops cleanly on SIGTERM
        assert status == 200
        assert_forecast(fleet, name, 7, answer)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        _, stderr = process.communicate(timeout=30)
    assert f"listening on 127.0.0.1:{port}" in stderr
    assert "Traceback" not in stderr
