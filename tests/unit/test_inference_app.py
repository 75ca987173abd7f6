"""The multi-model endpoint API, called in-process through ``InferenceApp.dispatch``."""

from __future__ import annotations

import json
import logging
import tarfile
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from model_helpers import chosen
from prophet import Prophet
from prophet.serialize import model_to_json

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.inference import DEFAULT_PORT
from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_inference.app import InferenceApp, Request
from fleetcast_inference.registry import LoadedModels
from fleetcast_inference.settings import (
    InferenceSettings,
    SettingsError,
    container_memory_bytes,
    model_path,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*")

RUN_ID = "q0000000902-20240601t120000"


def metadata(customer_id: str, frequency: Frequency = Frequency.DAILY) -> ModelMetadata:
    return ModelMetadata(
        **chosen(),
        customer_id=customer_id,
        frequency=frequency,
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


@pytest.fixture(scope="module")
def model_json() -> str:
    day = np.arange(120)
    history = pd.DataFrame(
        {
            "ds": pd.date_range("2022-03-01", periods=120, freq="D"),
            "y": 700
            + 90 * np.sin(2 * np.pi * day / 7)
            + np.random.default_rng(0).normal(0, 12, 120),
        }
    )
    logging.getLogger("cmdstanpy").disabled = True
    return model_to_json(Prophet(yearly_seasonality=False).fit(history))


@pytest.fixture
def settings(tmp_path: Path) -> InferenceSettings:
    return InferenceSettings(
        host="127.0.0.1",
        port=0,
        opt_ml_root=tmp_path,
        memory_budget_bytes=2**30,
        multi_model=True,
    )


@pytest.fixture
def app(settings: InferenceSettings) -> InferenceApp:
    return InferenceApp(settings)


def place_model(
    settings: InferenceSettings,
    name: str,
    model_json: str,
    customer_id: str,
    frequency: Frequency = Frequency.DAILY,
) -> str:
    """Put a customer's archive where SageMaker downloads a model; return the load url."""
    folder = settings.models_root / name / "model"
    folder.mkdir(parents=True)
    write_archive(folder / f"{customer_id}.tar.gz", model_json, metadata(customer_id, frequency))
    return f"/opt/ml/models/{name}/model"


def call(
    app: InferenceApp,
    method: str,
    target: str,
    body: object = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    path, _, query = target.partition("?")
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    lowered = {name.lower(): value for name, value in (headers or {}).items()}
    response = app.dispatch(Request(method, path, query, lowered, raw))
    assert response.content_type == "application/json"
    return response.status, json.loads(response.body)


def load(app: InferenceApp, name: str, url: str) -> tuple[int, Any]:
    return call(app, "POST", "/models", {"model_name": name, "url": url})


def test_ping_answers_healthy(app: InferenceApp) -> None:
    assert call(app, "GET", "/ping") == (200, {"status": "healthy"})


def test_load_describe_invoke_unload(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a downloaded model
    url = place_model(settings, "m1", model_json, "c-1")

    # When it is loaded, described, invoked and unloaded
    loaded = load(app, "m1", url)
    described = call(app, "GET", "/models/m1")
    invoked = call(app, "POST", "/models/m1/invoke", {"period": 7})
    unloaded = call(app, "DELETE", "/models/m1")

    # Then each succeeds with what the platform and the caller need
    assert loaded[0] == 200 and loaded[1]["customerId"] == "c-1"
    assert loaded[1]["memoryBytes"] > 0
    status, details = described
    assert status == 200
    assert details["modelName"] == "m1" and details["modelUrl"] == url
    assert (details["modelVersion"], details["dataEnd"]) == (RUN_ID, "2022-06-28")
    status, answer = invoked
    assert status == 200
    assert (answer["customer_id"], answer["model_version"]) == ("c-1", RUN_ID)
    assert [row["ds"] for row in answer["forecast"]][:2] == ["2022-06-29", "2022-06-30"]
    assert len(answer["forecast"]) == 7
    for row in answer["forecast"]:
        assert row["yhat_lower"] < row["yhat"] < row["yhat_upper"]
    assert unloaded == (200, {"modelName": "m1", "status": "unloaded"})


def test_gone_models_are_404(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a model loaded and then unloaded
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))
    call(app, "DELETE", "/models/m1")

    # When it is unloaded, described or invoked again, then each is 404
    for method, target in (("DELETE", "/models/m1"), ("GET", "/models/m1")):
        status, error = call(app, method, target)
        assert (status, error["error"]) == (404, "ModelNotFound")
    status, error = call(
        app,
        "POST",
        "/models/m1/invoke",
        {"period": 7},
        {"X-Amzn-SageMaker-Target-Model": "c-1/run.tar.gz"},
    )
    assert status == 404
    assert error["message"] == "model 'm1' (TargetModel 'c-1/run.tar.gz') is not loaded"


def test_loading_twice_is_409(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    url = place_model(settings, "m1", model_json, "c-1")
    assert load(app, "m1", url)[0] == 200
    status, error = load(app, "m1", url)
    assert (status, error["error"]) == (409, "ModelAlreadyLoaded")


def test_load_past_the_memory_budget_is_507(settings: InferenceSettings, model_json: str) -> None:
    # Given a budget that holds one model and a half
    probe = InferenceApp(settings)
    load(probe, "probe", place_model(settings, "probe", model_json, "c-0"))
    one_model = probe.registry.usage().model_bytes
    app = InferenceApp(settings, LoadedModels(budget_bytes=int(one_model * 1.5)))
    urls = [place_model(settings, f"m{i}", model_json, f"c-{i}") for i in (1, 2)]

    # When two are loaded
    first = load(app, "m1", urls[0])
    status, error = load(app, "m2", urls[1])

    # Then the second is refused with 507 and a message saying why
    assert first[0] == 200
    assert (status, error["error"]) == (507, "InsufficientMemory")
    assert "budget" in error["message"]


def test_unpacked_archive_and_archive_path_both_load(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given one model unpacked into its folder and one whose url names the archive file
    unpacked = settings.models_root / "unpacked" / "model"
    unpacked.mkdir(parents=True)
    (unpacked / "model.json").write_text(model_json)
    (unpacked / "metadata.json").write_text(metadata("c-2").model_dump_json())
    archive_url = place_model(settings, "archived", model_json, "c-3") + "/c-3.tar.gz"

    # When both are loaded, then both serve
    assert load(app, "unpacked", "/opt/ml/models/unpacked/model")[0] == 200
    assert load(app, "archived", archive_url)[0] == 200
    status, answer = call(app, "POST", "/models/unpacked/invoke", {"period": 1})
    assert (status, answer["customer_id"]) == (200, "c-2")


def test_real_paths_under_the_models_folder_load(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    place_model(settings, "m1", model_json, "c-1")
    assert load(app, "m1", str(settings.models_root / "m1" / "model"))[0] == 200


@pytest.mark.parametrize(
    ("prepare", "url", "status", "code", "message"),
    [
        (None, "/opt/ml/models/absent/model", 404, "ArtifactNotFound", "nothing at"),
        (None, "/etc/passwd", 400, "BadRequest", "absolute path under"),
        (None, "/opt/ml/models/../../../etc", 400, "BadRequest", "absolute path under"),
        (None, "models/m/model", 400, "BadRequest", "absolute path under"),
        ("empty", "/opt/ml/models/m/model", 400, "InvalidArtifact", "neither model.json"),
        ("two", "/opt/ml/models/m/model", 400, "InvalidArtifact", "2 archives"),
        (
            "garbage",
            "/opt/ml/models/m/model",
            400,
            "InvalidArtifact",
            "not a readable model archive",
        ),
        ("no-metadata", "/opt/ml/models/m/model", 400, "InvalidArtifact", "lacks metadata.json"),
        (
            "bad-metadata",
            "/opt/ml/models/m/model",
            400,
            "InvalidArtifact",
            "customer_id: Field required",
        ),
        ("bad-model", "/opt/ml/models/m/model", 400, "InvalidArtifact", "model.json is not JSON"),
        ("logistic", "/opt/ml/models/m/model", 400, "UnsupportedModel", "logistic growth"),
    ],
)
def test_unusable_artifacts_are_refused_with_the_reason(
    app: InferenceApp,
    settings: InferenceSettings,
    model_json: str,
    prepare: str | None,
    url: str,
    status: int,
    code: str,
    message: str,
) -> None:
    # Given a model folder with something wrong in it
    folder = settings.models_root / "m" / "model"
    if prepare is not None:
        folder.mkdir(parents=True)
    if prepare == "two":
        for customer in ("a", "b"):
            write_archive(folder / f"{customer}.tar.gz", model_json, metadata(customer))
    elif prepare == "garbage":
        (folder / "c.tar.gz").write_bytes(b"not gzip at all")
    elif prepare == "no-metadata":
        with tarfile.open(folder / "c.tar.gz", "w:gz") as archive:
            (folder / "model.json").write_text(model_json)
            archive.add(folder / "model.json", arcname="model.json")
        (folder / "model.json").unlink()
    elif prepare == "bad-metadata":
        (folder / "model.json").write_text(model_json)
        (folder / "metadata.json").write_text('{"run_id": "x"}')
    elif prepare == "bad-model":
        write_archive(folder / "c.tar.gz", "{not json", metadata("c"))
    elif prepare == "logistic":
        write_archive(
            folder / "c.tar.gz", model_json.replace('"linear"', '"logistic"'), metadata("c")
        )

    # When it is loaded, then the answer says what is wrong, and nothing is loaded
    answer = load(app, "m", url)
    assert answer[0] == status, answer
    assert answer[1]["error"] == code
    assert message in answer[1]["message"]
    assert app.registry.usage().models == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "not JSON"),
        (b"{}", "lacks 'period'"),
        (b'{"period": "7"}', "must be an integer"),
        (b'{"period": 400}', "from 1 to 365"),
        (b'{"period": 7, "horizon": 1}', "unknown field"),
    ],
)
def test_bad_invoke_bodies_are_400(
    app: InferenceApp, settings: InferenceSettings, model_json: str, body: bytes, message: str
) -> None:
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))
    status, error = call(app, "POST", "/models/m1/invoke", body)
    assert (status, error["error"]) == (400, "BadRequest")
    assert message in error["message"]


def test_each_model_serves_its_own_frequencys_longest_forecast(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a daily and an hourly model loaded side by side
    load(app, "daily", place_model(settings, "daily", model_json, "c-d"))
    load(app, "hourly", place_model(settings, "hourly", model_json, "c-h", Frequency.HOURLY))

    # When each is asked for its longest forecast, then each answers in its own periods
    status, daily = call(app, "POST", "/models/daily/invoke", b'{"period": 365}')
    assert status == 200 and len(daily["forecast"]) == 365
    status, hourly = call(app, "POST", "/models/hourly/invoke", b'{"period": 720}')
    assert status == 200 and len(hourly["forecast"]) == 720
    assert hourly["forecast"][0]["ds"] == "2022-06-28T01:00:00Z"

    # And a period past it is refused in the model's own unit
    status, error = call(app, "POST", "/models/daily/invoke", b'{"period": 400}')
    assert status == 400
    assert "from 1 to 365 for 'daily', a daily model (days), not 400" in error["message"]
    status, error = call(app, "POST", "/models/hourly/invoke", b'{"period": 721}')
    assert status == 400 and "from 1 to 720" in error["message"]


def test_double_encoded_body_gets_the_same_answer(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a loaded model
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))

    # When it is asked with the plain body and the public sample's double-encoded one
    plain = call(app, "POST", "/models/m1/invoke", b'{"period": 7}')
    double = call(app, "POST", "/models/m1/invoke", json.dumps('{"period": 7}').encode())

    # Then the answers are the same
    assert plain[0] == double[0] == 200
    assert plain[1] == double[1]


def test_same_request_gets_the_same_answer_after_a_reload(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    url = place_model(settings, "m1", model_json, "c-1")
    load(app, "m1", url)
    first = call(app, "POST", "/models/m1/invoke", {"period": 30})
    call(app, "DELETE", "/models/m1")
    load(app, "m1", url)
    assert call(app, "POST", "/models/m1/invoke", {"period": 30}) == first


def test_quantiles_come_beside_the_unchanged_answer_and_are_cached_apart(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a loaded model and its answer without quantiles
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))
    _, plain = call(app, "POST", "/models/m1/invoke", {"period": 7})

    # When quantiles are asked for, out of order and repeated, then again as the same set
    status, answer = call(
        app, "POST", "/models/m1/invoke", {"period": 7, "quantiles": [0.9, 0.1, 0.5, 0.10]}
    )
    again = call(app, "POST", "/models/m1/invoke", {"period": 7, "quantiles": [0.1, 0.5, 0.9]})
    described = call(app, "GET", "/models/m1")[1]

    # Then each point keeps its fields and gains the quantiles by name, in order; the plain
    # answer has no quantiles; the same set is one cached answer beside the plain one
    assert status == 200 and again == (200, answer)
    assert "quantiles" not in plain["forecast"][0] and "clipped_at_zero" not in plain
    for with_quantiles, without in zip(answer["forecast"], plain["forecast"], strict=True):
        quantiles = with_quantiles.pop("quantiles")
        assert with_quantiles == without
        assert list(quantiles) == ["0.1", "0.5", "0.9"]
        assert quantiles["0.1"] <= quantiles["0.5"] <= quantiles["0.9"]
    assert (described["invocations"], described["cachedAnswers"]) == (3, 2)


def falling_model_json() -> str:
    """A customer whose use falls towards zero: the trend carries on below it."""
    day = np.arange(120)
    history = pd.DataFrame(
        {
            "ds": pd.date_range("2022-03-01", periods=120, freq="D"),
            "y": 400 - 3.2 * day + 20 * np.sin(2 * np.pi * day / 7),
        }
    )
    logging.getLogger("cmdstanpy").disabled = True
    model = Prophet(yearly_seasonality=False, daily_seasonality=False).fit(history)
    return model_to_json(model)


def test_a_forecast_below_zero_is_clipped_and_says_how_many_values_were(
    app: InferenceApp, settings: InferenceSettings
) -> None:
    # Given a model whose trend goes below zero within 60 days
    model_json = falling_model_json()
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))
    unclipped = app.registry.status("m1").model.forecaster.forecast(60, seed=1)
    assert unclipped.yhat.min() < 0

    # When it is asked for 60 days with quantiles
    status, answer = call(app, "POST", "/models/m1/invoke", {"period": 60, "quantiles": [0.1, 0.9]})

    # Then no value is negative, and the answer counts those raised to zero
    assert status == 200
    values = [
        value
        for point in answer["forecast"]
        for value in (
            point["yhat"],
            point["yhat_lower"],
            point["yhat_upper"],
            *point["quantiles"].values(),
        )
    ]
    assert min(values) == 0.0
    assert answer["clipped_at_zero"] == sum(value == 0.0 for value in values) > 0
    assert answer["forecast"][-1]["yhat"] == 0.0


def test_names_with_slashes_route_encoded_or_not(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given a model loaded under a TargetModel-like name
    url = place_model(settings, "slashed", model_json, "c-1")
    assert load(app, "c-1/run.tar.gz", url)[0] == 200

    # When it is addressed with the slash escaped and plain, then both reach it
    assert call(app, "GET", "/models/c-1%2Frun.tar.gz")[0] == 200
    assert call(app, "POST", "/models/c-1%2Frun.tar.gz/invoke", {"period": 2})[0] == 200
    assert call(app, "POST", "/models/c-1/run.tar.gz/invoke", {"period": 2})[0] == 200


def test_invocations_route_takes_the_model_from_the_header(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))
    header = {"X-Amzn-SageMaker-Target-Model": "m1"}
    status, answer = call(app, "POST", "/invocations", {"period": 3}, header)
    assert (status, len(answer["forecast"])) == (200, 3)
    status, error = call(app, "POST", "/invocations", {"period": 3})
    assert (status, error["error"]) == (400, "BadRequest")


def test_listing_pages_through_every_model(
    app: InferenceApp, settings: InferenceSettings, model_json: str
) -> None:
    # Given five loaded models
    for index in range(5):
        load(app, f"m{index}", place_model(settings, f"m{index}", model_json, f"c-{index}"))

    # When they are listed two at a time, following nextPageToken
    pages = []
    target = "/models?limit=2"
    while True:
        status, page = call(app, "GET", target)
        assert status == 200
        pages.append(page)
        if "nextPageToken" not in page:
            break
        target = f"/models?limit=2&next_page_token={page['nextPageToken']}"

    # Then three pages hold each model once, with its url
    names = [model["modelName"] for page in pages for model in page["models"]]
    assert names == [f"m{index}" for index in range(5)]
    assert [len(page["models"]) for page in pages] == [2, 2, 1]
    assert pages[0]["models"][0]["modelUrl"] == "/opt/ml/models/m0/model"


def test_bad_list_query_is_400(app: InferenceApp) -> None:
    status, error = call(app, "GET", "/models?limit=0")
    assert (status, error["error"]) == (400, "BadRequest")


@pytest.mark.parametrize(
    ("method", "target", "status", "code"),
    [
        ("POST", "/ping", 405, "MethodNotAllowed"),
        ("DELETE", "/models", 405, "MethodNotAllowed"),
        ("GET", "/models/m1/invoke", 405, "MethodNotAllowed"),
        ("POST", "/models/m1", 405, "MethodNotAllowed"),
        ("GET", "/", 404, "NotFound"),
        ("GET", "/models/", 404, "NotFound"),
    ],
)
def test_unknown_routes_and_methods(
    app: InferenceApp, method: str, target: str, status: int, code: str
) -> None:
    answer = call(app, method, target)
    assert (answer[0], answer[1]["error"]) == (status, code)


def test_unexpected_failures_are_500_without_internals(
    app: InferenceApp, settings: InferenceSettings, model_json: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a loaded model whose answer fails unexpectedly
    load(app, "m1", place_model(settings, "m1", model_json, "c-1"))

    def fail(*args: object) -> bytes:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(app.registry, "answer", fail)

    # When it is invoked, then the caller gets a JSON 500 that does not leak the failure
    status, error = call(app, "POST", "/models/m1/invoke", {"period": 7})
    assert (status, error["error"]) == (500, "InternalFailure")
    assert "secret" not in error["message"] and "Traceback" not in error["message"]


def test_settings_come_from_the_contract_environment(tmp_path: Path) -> None:
    # When settings are read from a local stack's environment
    settings = InferenceSettings.from_environ(
        {
            "SAGEMAKER_BIND_TO_PORT": "9001",
            "FLEETCAST_BIND_HOST": "127.0.0.1",
            "FLEETCAST_OPT_ML": str(tmp_path),
            "FLEETCAST_MEMORY_BUDGET_MB": "0.5",
            "SAGEMAKER_MULTI_MODEL": "TRUE",
        }
    )

    # Then each variable lands where it belongs
    assert (settings.host, settings.port) == ("127.0.0.1", 9001)
    assert settings.models_root == tmp_path / "models"
    assert settings.memory_budget_bytes == 512 * 1024
    assert settings.multi_model


def test_settings_defaults_are_sagemakers() -> None:
    settings = InferenceSettings.from_environ({})
    assert (settings.host, settings.port) == ("0.0.0.0", DEFAULT_PORT)
    assert settings.models_root == Path("/opt/ml/models")
    assert 0 < settings.memory_budget_bytes < container_memory_bytes()


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SAGEMAKER_BIND_TO_PORT": "http"}, "not a port number"),
        ({"SAGEMAKER_BIND_TO_PORT": "70000"}, "between 0 and 65535"),
        ({"FLEETCAST_MEMORY_BUDGET_MB": "lots"}, "not a number of MiB"),
        ({"FLEETCAST_MEMORY_BUDGET_MB": "0"}, "more than 0"),
    ],
)
def test_unusable_settings_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        InferenceSettings.from_environ(environ)


def test_model_urls_map_under_the_opt_ml_root(settings: InferenceSettings) -> None:
    root = settings.models_root
    assert model_path("/opt/ml/models/m1/model", settings) == root / "m1" / "model"
    assert model_path(f"{root}/m1/model/c.tar.gz", settings) == root / "m1" / "model" / "c.tar.gz"
    assert model_path("/opt/ml/models", settings) is None
    assert model_path("/opt/ml/models/../input", settings) is None
    assert model_path("relative/model", settings) is None
