"""Measure the inference container on this machine (not shipped in the image).

    .venv/bin/python bench/inference_serving.py --models 1000 --requests 3000

Fits one 2-year daily model (Prophet's defaults, as training fits them) and prints:

- the public sample's per-request cost: ``model_from_json`` and ``predict`` (1000 samples);
- cold load: reading and compiling the archive from disk, in-process and over HTTP;
- invoke over HTTP keep-alive on 127.0.0.1, period 7: the first answer per model
  (computed) and warm answers (cached), p50 and p99; client and server share this
  process, so the numbers include the client's own time;
- memory per model for ``--models`` loaded models: the container's accounting, what
  ``tracemalloc`` saw allocated, and the growth of the process's resident set.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import logging
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_json

from fleetcast_common.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_inference.app import build_served_model
from fleetcast_inference.contract import InferenceSettings
from fleetcast_inference.forecaster import forecast_seed
from fleetcast_inference.protocol import render_forecast
from fleetcast_inference.registry import ModelRegistry, ServedModel
from fleetcast_inference.server import InferenceServer

RUN_ID = "20240101t000000-0123456789"


def two_year_model() -> str:
    day = np.arange(730)
    rng = np.random.default_rng(0)
    y = 750 + 0.2 * day + 150 * np.sin(2 * np.pi * day / 365.25) + 60 * np.sin(2 * np.pi * day / 7)
    history = pd.DataFrame(
        {"ds": pd.date_range("2022-01-01", periods=730), "y": y + rng.normal(0, 15, 730)}
    )
    logging.getLogger("cmdstanpy").disabled = True
    return model_to_json(Prophet().fit(history))


def write_fleet(opt_ml: Path, model_json: str, count: int) -> list[str]:
    names = []
    for index in range(count):
        name = f"m{index:05d}"
        folder = opt_ml / "models" / name / "model"
        folder.mkdir(parents=True)
        metadata = ModelMetadata(
            customer_id=f"c-{index:05d}",
            run_id=RUN_ID,
            trained_at=datetime.now(UTC),
            data_start=date(2022, 1, 1),
            data_end=date(2023, 12, 31),
            rows=730,
            metrics=HoldoutMetrics(holdout_days=7, smape=0.1, mae=1, naive_smape=0.2, naive_mae=2),
            library_versions={},
        )
        write_archive(folder / f"c-{index:05d}.tar.gz", model_json, metadata)
        names.append(name)
    return names


def timings(action: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - started)
    return seconds


def report(label: str, seconds: list[float]) -> None:
    ms = np.array(seconds) * 1000
    print(
        f"{label:<44} p50 {np.percentile(ms, 50):7.3f} ms   p99 {np.percentile(ms, 99):7.3f} ms"
        f"   (n={len(ms)})"
    )


def resident_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * 4096


def answer(model: ServedModel, period: int = 7) -> bytes:
    seed = forecast_seed(model.customer_id, model.model_version, period)
    return render_forecast(model, model.forecaster.forecast(period, seed))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()

    model_json = two_year_model()
    print(f"model.json of a 2-year daily model: {len(model_json)} bytes")
    with tempfile.TemporaryDirectory() as scratch:
        opt_ml = Path(scratch)
        names = write_fleet(opt_ml, model_json, args.models)
        settings = InferenceSettings("127.0.0.1", 0, opt_ml, 2**31, True)
        folder = settings.models_root / names[0] / "model"
        url = f"/opt/ml/models/{names[0]}/model"

        def prophet_request() -> None:
            model = model_from_json(model_json)
            model.predict(model.make_future_dataframe(periods=7, include_history=False))

        report("public sample: model_from_json + predict(7)", timings(prophet_request, 50))
        report(
            "cold load in-process (read + compile)",
            timings(lambda: build_served_model("x", url, folder), 300),
        )
        served = build_served_model("x", url, folder)
        report("first answer in-process, period 7", timings(lambda: answer(served), 300))
        report("first answer in-process, period 365", timings(lambda: answer(served, 365), 20))

        measure_http(settings, names[: min(200, len(names))], args.requests)
        measure_memory(names, settings)


def measure_http(settings: InferenceSettings, names: list[str], requests: int) -> None:
    server = InferenceServer(settings)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port)

    def timed(path: str, body: dict[str, object]) -> float:
        started = time.perf_counter()
        connection.request("POST", path, body=json.dumps(body).encode())
        response = connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        return time.perf_counter() - started

    try:
        report(
            "cold load over HTTP (POST /models)",
            [
                timed("/models", {"model_name": name, "url": f"/opt/ml/models/{name}/model"})
                for name in names
            ],
        )
        report(
            "first invoke over HTTP, period 7",
            [timed(f"/models/{name}/invoke", {"period": 7}) for name in names],
        )
        picks = np.random.default_rng(1).choice(names, size=requests)
        report(
            "warm invoke over HTTP, period 7",
            [timed(f"/models/{name}/invoke", {"period": 7}) for name in picks],
        )
    finally:
        connection.close()
        server.shutdown()
        server.server_close()


def measure_memory(names: list[str], settings: InferenceSettings) -> None:
    registry = ModelRegistry(budget_bytes=2**31)

    def load(name: str) -> None:
        path = settings.models_root / name / "model"
        registry.load(name, lambda: build_served_model(name, f"/opt/ml/models/{name}/model", path))

    load(names[0])
    registry.answer(names[0], 7, answer)
    gc.collect()
    rss_before = resident_bytes()
    tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0]
    for name in names[1:]:
        load(name)
    gc.collect()
    traced_models = tracemalloc.get_traced_memory()[0]
    for name in names[1:]:
        registry.answer(name, 7, answer)
    gc.collect()
    traced_answers = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    rss_after = resident_bytes()
    usage = registry.usage()
    count = len(names) - 1
    print(f"{usage.models} models loaded, each with its period-7 answer cached:")
    print(f"  accounted per model       {usage.model_bytes / usage.models:9.0f} bytes")
    print(f"  tracemalloc per model     {(traced_models - traced_before) / count:9.0f} bytes")
    print(f"  accounted per answer      {usage.cache_bytes / usage.cached_answers:9.0f} bytes")
    print(f"  tracemalloc per answer    {(traced_answers - traced_models) / count:9.0f} bytes")
    print(f"  resident set growth       {(rss_after - rss_before) / count:9.0f} bytes per model")
    print(f"  process resident set      {rss_after / 2**20:9.1f} MiB (includes Prophet, pandas)")


if __name__ == "__main__":
    main()
