"""Row 3: the inference container, fleetcast's handler vs the sample's.

Both handlers sit behind the container's own HTTP server (threads, keep-alive) on
127.0.0.1, each in this process with its client, and get the same requests: the sample's
double-encoded ``{"period": 7}``. They load the same archives, the ones row 2 trained,
from local disk (``POST /models``, the cold load). fleetcast caches each answer (the same
request always gets the same forecast); its first answer per model is computed, and is
reported separately. The check: for every model, fleetcast's forecast equals Prophet's
own ``yhat``, and its intervals equal Prophet's given the same random seed.
"""

from __future__ import annotations

import gc
import http.client
import json
import multiprocessing
import os
import random
import threading
import tracemalloc
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from prophet.serialize import model_from_json

from bench.baselines import SampleHandlerApp, load_sample_model, sample_request_body
from bench.measure import (
    Row,
    at_most,
    compare,
    percentiles_per_round,
    resident_bytes,
    single,
    taking_turns,
    timed,
)
from fleetcast_contracts.model_archive import read_archive
from fleetcast_forecasters.forecast import simulated_periods
from fleetcast_forecasters.prophet_compile import compile_model
from fleetcast_forecasters.prophet_forecaster import forecast_seed
from fleetcast_inference.app import InferenceApp, build_served_model
from fleetcast_inference.protocol import render_forecast
from fleetcast_inference.registry import LoadedModels, ServedModel
from fleetcast_inference.server import InferenceServer
from fleetcast_inference.settings import InferenceSettings

MIB = 2**20
PERIOD = 7
# Prophet's own forecast and fleetcast's agree to rounding in the last digits.
FORECAST_TOLERANCE = 1e-9


@dataclass(frozen=True)
class ServingSizes:
    models: int
    baseline_models: int
    warm_requests: int  # fleetcast, per round
    baseline_requests: int  # per round
    rounds: int
    memory_models: int
    baseline_memory_models: int


def write_fleet(opt_ml: Path, archives: list[Path], count: int) -> list[str]:
    """``count`` TargetModels as SageMaker lays them out, cycling through ``archives``."""
    names = []
    for index in range(count):
        name = f"m{index:05d}"
        folder = opt_ml / "models" / name / "model"
        folder.mkdir(parents=True)
        source = archives[index % len(archives)]
        os.link(source, folder / source.name)
        names.append(name)
    return names


def model_url(name: str) -> str:
    return f"/opt/ml/models/{name}/model"


class Client:
    """One keep-alive connection to a server on 127.0.0.1."""

    def __init__(self, port: int) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port)

    def post(self, path: str, body: bytes) -> bytes:
        self.connection.request("POST", path, body=body)
        response = self.connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise AssertionError(f"POST {path}: {response.status} {payload[:200]!r}")
        return payload

    def load(self, name: str) -> float:
        body = json.dumps({"model_name": name, "url": model_url(name)}).encode()
        return timed(lambda: self.post("/models", body)) * 1000

    def invoke(self, name: str, period: int = PERIOD) -> float:
        body = sample_request_body(period)
        return timed(lambda: self.post(f"/models/{name}/invoke", body)) * 1000

    def close(self) -> None:
        self.connection.close()


@contextmanager
def serving(app: InferenceApp) -> Iterator[Client]:
    server = InferenceServer(app.settings, app)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    client = Client(server.port)
    try:
        yield client
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def check_forecasts(ours: Client, theirs: Client, opt_ml: Path, names: list[str]) -> str:
    """fleetcast's answers against the sample handler's (Prophet's ``yhat``), and its
    intervals against Prophet's with the same seed."""
    worst = 0.0
    for name in names:
        mine = json.loads(ours.post(f"/models/{name}/invoke", sample_request_body(PERIOD)))
        other = json.loads(
            json.loads(theirs.post(f"/models/{name}/invoke", sample_request_body(PERIOD)))
        )
        their_dates = [
            pd.Timestamp(ms, unit="ms").strftime("%Y-%m-%d") for ms in other["ds"].values()
        ]
        if [row["ds"] for row in mine["forecast"]] != their_dates:
            raise AssertionError(f"{name}: forecast dates differ")
        worst = max(
            worst, _relative([r["yhat"] for r in mine["forecast"]], list(other["yhat"].values()))
        )

        archive = next((opt_ml / "models" / name / "model").glob("*.tar.gz"))
        model_json, metadata = read_archive(archive)
        seed = forecast_seed(metadata.run_id)
        forecast = compile_model(model_json, metadata.frequency).forecast(PERIOD, seed)
        prophet = model_from_json(model_json)
        np.random.seed(seed)  # Prophet draws its uncertainty samples from numpy's global state
        # fleetcast's days are the first of a forecast of simulated_periods (a day's
        # interval the same whatever the period asked for)
        theirs_seeded = prophet.predict(
            prophet.make_future_dataframe(simulated_periods(PERIOD), include_history=False)
        ).iloc[:PERIOD]
        assert forecast.yhat_lower is not None and forecast.yhat_upper is not None
        worst = max(
            worst,
            _relative(forecast.yhat_lower.tolist(), theirs_seeded["yhat_lower"].tolist()),
            _relative(forecast.yhat_upper.tolist(), theirs_seeded["yhat_upper"].tolist()),
        )
    if worst > FORECAST_TOLERANCE:
        raise AssertionError(f"forecasts differ from Prophet's by up to {worst:.2g} (relative)")
    return (
        f"{len(names)} models: yhat equal to Prophet's predict, intervals equal to Prophet's "
        f"with the same seed (max rel. diff {worst:.1g})"
    )


def _relative(ours: list[float], theirs: list[float]) -> float:
    a, b = np.asarray(ours), np.asarray(theirs)
    if a.shape != b.shape:
        raise AssertionError("forecast lengths differ")
    return float((np.abs(a - b) / np.maximum(np.abs(b), 1.0)).max(initial=0.0))


def _fleet_memory(kind: str, opt_ml: str, names: list[str]) -> dict[str, float]:
    """In a fresh interpreter: memory per loaded model (fleetcast: with its period-7
    answer cached), as Python's allocator traced it and as the resident set grew.

    The traced figure is the row's: the resident set's growth understates whatever
    reuses memory freed earlier (the sample's warm-up predict frees tens of MB). The
    first model warms lazy imports and is not counted."""
    root = Path(opt_ml)
    registry = LoadedModels(budget_bytes=2**31)
    sample_models = {}

    def answer(model: ServedModel) -> bytes:
        seed = forecast_seed(model.model_version)
        return render_forecast(model, model.forecaster.forecast(PERIOD, seed))

    def load(name: str) -> None:
        path = root / "models" / name / "model"
        if kind == "fleetcast":
            registry.load(name, lambda: build_served_model(name, model_url(name), path))
            registry.answer(name, PERIOD, answer)
        else:
            sample_models[name] = load_sample_model(path)

    load(names[0])
    if kind != "fleetcast":
        sample_models[names[0]].predict(sample_models[names[0]].make_future_dataframe(PERIOD))
    gc.collect()
    before = resident_bytes()
    tracemalloc.start()
    for name in names[1:]:
        load(name)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    counted = len(names) - 1
    usage = registry.usage()
    return {
        "traced_per_model": traced / counted,
        "resident_per_model": (resident_bytes() - before) / counted,
        "accounted_per_model": (usage.model_bytes + usage.cache_bytes) / max(usage.models, 1),
    }


def fleet_memory(kind: str, opt_ml: Path, names: list[str]) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as fresh:
        return fresh.submit(_fleet_memory, kind, str(opt_ml), names).result()


def serving_rows(archives: list[Path], scratch: Path, sizes: ServingSizes) -> list[Row]:
    opt_ml = scratch / "serving"
    names = write_fleet(opt_ml, archives, max(sizes.models, sizes.memory_models))
    measured = _measure_serving(opt_ml, names, sizes)

    def p(samples: list[list[float]], share: float) -> list[float]:
        return [percentiles_per_round(round_samples, 1, share)[0] for round_samples in samples]

    requests_note = (
        f"{sizes.rounds} rounds of {sizes.warm_requests} requests (fleetcast, over "
        f"{sizes.models} models) and {sizes.baseline_requests} (sample handler, over "
        f"{sizes.baseline_models} models), HTTP keep-alive on 127.0.0.1, client in the same process"
    )
    return [
        compare(
            "serving: warm forecast, period 7 (p50)",
            "ms",
            p(measured.warm_ours, 0.5),
            p(measured.warm_theirs, 0.5),
            higher_is_better=False,
            target=at_most(2, "ms"),
            detail=f"{requests_note}; fleetcast answers from its cache, the sample handler "
            "predicts every time",
            check=measured.check,
        ),
        compare(
            "serving: warm forecast, period 7 (p99)",
            "ms",
            p(measured.warm_ours, 0.99),
            p(measured.warm_theirs, 0.99),
            higher_is_better=False,
            target=at_most(10, "ms"),
            detail=requests_note,
        ),
        compare(
            "serving: computed forecast, not cached (p50)",
            "ms",
            percentiles_per_round(measured.first_answers, sizes.rounds, 0.5),
            p(measured.warm_theirs, 0.5),
            higher_is_better=False,
            detail=f"fleetcast's first answer for each of {sizes.models} models (closed form, "
            "1000 uncertainty samples), vs the sample's make_future_dataframe + predict",
        ),
        compare(
            "serving: cold load from local disk (p50)",
            "ms",
            percentiles_per_round(measured.cold_ours, sizes.rounds, 0.5),
            percentiles_per_round(measured.cold_theirs, sizes.rounds, 0.5),
            higher_is_better=False,
            target=at_most(30, "ms"),
            detail=f"POST /models, archive on local disk: read, unpack, compile ({sizes.models} "
            f"models) vs read, unpack, model_from_json ({sizes.baseline_models} models)",
        ),
        _memory_row(opt_ml, names, sizes),
    ]


@dataclass(frozen=True)
class _ServingTimes:
    """Milliseconds each side took: loads, fleetcast's first answers, the warm rounds."""

    cold_ours: list[float]
    cold_theirs: list[float]
    first_answers: list[float]
    warm_ours: list[list[float]]
    warm_theirs: list[list[float]]
    check: str


def _measure_serving(opt_ml: Path, names: list[str], sizes: ServingSizes) -> _ServingTimes:
    """Both servers on the same fleet: cold loads, then warm requests taking turns."""
    settings = InferenceSettings("127.0.0.1", 0, opt_ml, 2**31, True)
    picker = random.Random(7)
    with serving(InferenceApp(settings)) as ours, serving(SampleHandlerApp(settings)) as theirs:
        cold_ours, cold_theirs = [], []
        for index, name in enumerate(names[: max(sizes.models, sizes.baseline_models)]):
            if index < sizes.models:
                cold_ours.append(ours.load(name))
            if index < sizes.baseline_models:
                cold_theirs.append(theirs.load(name))
        first_answers = [ours.invoke(name) for name in names[: sizes.models]]

        def warm_ours(_: int) -> list[float]:
            return [
                ours.invoke(picker.choice(names[: sizes.models]))
                for _ in range(sizes.warm_requests)
            ]

        def warm_theirs(_: int) -> list[float]:
            return [
                theirs.invoke(picker.choice(names[: sizes.baseline_models]))
                for _ in range(sizes.baseline_requests)
            ]

        warm_rounds_ours, warm_rounds_theirs = taking_turns(sizes.rounds, warm_ours, warm_theirs)
        check = check_forecasts(ours, theirs, opt_ml, names[: sizes.baseline_models])
    return _ServingTimes(
        cold_ours, cold_theirs, first_answers, warm_rounds_ours, warm_rounds_theirs, check
    )


def _memory_row(opt_ml: Path, names: list[str], sizes: ServingSizes) -> Row:
    memory = {
        "fleetcast": fleet_memory("fleetcast", opt_ml, names[: sizes.memory_models]),
        "baseline": fleet_memory("baseline", opt_ml, names[: sizes.baseline_memory_models]),
    }
    per_thousand = {
        kind: figures["traced_per_model"] * 1000 / MIB for kind, figures in memory.items()
    }
    return compare(
        "serving: memory for 1000 loaded models",
        "MiB",
        [per_thousand["fleetcast"]],
        [per_thousand["baseline"]],
        higher_is_better=False,
        target=at_most(1024, "MiB"),
        detail=f"memory the loaded models hold (tracemalloc) per model x 1000, in a fresh "
        f"process: fleetcast {sizes.memory_models - 1} models, each with an answer cached: "
        f"{memory['fleetcast']['traced_per_model'] / 1024:.0f} KiB per model (resident set "
        f"growth {memory['fleetcast']['resident_per_model'] / 1024:.0f} KiB, the container's "
        f"own accounting {memory['fleetcast']['accounted_per_model'] / 1024:.0f} KiB); "
        f"sample handler {sizes.baseline_memory_models - 1} models: "
        f"{memory['baseline']['traced_per_model'] / 1024:.0f} KiB per model (resident set "
        f"growth {memory['baseline']['resident_per_model'] / 1024:.0f} KiB)",
        figures={
            f"{kind}_{figure}_kib": value / 1024
            for kind, figures in memory.items()
            for figure, value in figures.items()
        },
    )


def family_rows(archives: list[Path], scratch: Path, sizes: ServingSizes) -> list[Row]:
    """Warm forecasts of each family's models as training served them (its default
    candidates): every family's answer goes through the endpoint's one cache, so each must
    stay as fast as Prophet's."""
    by_kind: dict[str, list[Path]] = {}
    for path in archives:
        by_kind.setdefault(read_archive(path)[1].model_kind, []).append(path)
    rows = []
    picker = random.Random(11)
    for kind, paths in sorted(by_kind.items()):
        opt_ml = scratch / kind
        names = write_fleet(opt_ml, paths, min(len(paths), sizes.models))
        settings = InferenceSettings("127.0.0.1", 0, opt_ml, 2**31, True)
        with serving(InferenceApp(settings)) as ours:
            for name in names:
                ours.load(name)
                ours.invoke(name)  # computed once, then answered from the cache
            rounds = _warm_rounds(ours, names, sizes, picker, PERIOD)
        rows.append(
            single(
                f"serving: warm forecast, period 7, {kind} (p50)",
                "ms",
                _medians(rounds),
                higher_is_better=False,
                target=at_most(0.5, "ms"),
                detail=f"{sizes.rounds} rounds of {sizes.warm_requests} requests over the "
                f"{len(names)} {kind} models training served (of {len(archives)}), HTTP "
                "keep-alive on 127.0.0.1",
            )
        )
    return rows


def _warm_rounds(
    client: Client, names: list[str], sizes: ServingSizes, picker: random.Random, period: int
) -> list[list[float]]:
    """``sizes.rounds`` rounds of ``sizes.warm_requests`` forecasts of ``period`` from
    models of ``names`` drawn at random (milliseconds each)."""
    return [
        [client.invoke(picker.choice(names), period) for _ in range(sizes.warm_requests)]
        for _ in range(sizes.rounds)
    ]


def _medians(rounds: list[list[float]]) -> list[float]:
    """Each round's median."""
    return [percentiles_per_round(samples, 1, 0.5)[0] for samples in rounds]


# issue 42: an hourly customer is forecast up to 30 days of hours ahead.
HOURLY_PERIOD = 720


def hourly_serving_rows(archives: list[Path], scratch: Path, sizes: ServingSizes) -> list[Row]:
    """Row 3c: 720-hour forecasts of the hourly models row 2c trained (every family it
    served), through the container's HTTP server: the first answer per model, computed,
    then warm answers from the endpoint's cache."""
    opt_ml = scratch / "hourly-serving"
    names = write_fleet(opt_ml, archives, len(archives))
    kinds = sorted({read_archive(path)[1].model_kind for path in archives})
    picker = random.Random(13)
    settings = InferenceSettings("127.0.0.1", 0, opt_ml, 2**31, True)
    with serving(InferenceApp(settings)) as ours:
        for name in names:
            ours.load(name)
        first = [ours.invoke(name, HOURLY_PERIOD) for name in names]
        answer = json.loads(
            ours.post(f"/models/{names[0]}/invoke", sample_request_body(HOURLY_PERIOD))
        )
        rounds = _warm_rounds(ours, names, sizes, picker, HOURLY_PERIOD)
    if len(answer["forecast"]) != HOURLY_PERIOD:
        raise AssertionError(f"a {HOURLY_PERIOD}-hour forecast had {len(answer['forecast'])} rows")
    over = f"{len(names)} hourly models ({', '.join(kinds)})"
    return [
        single(
            f"serving: warm forecast, hourly, period {HOURLY_PERIOD} (p50)",
            "ms",
            _medians(rounds),
            higher_is_better=False,
            target=at_most(1, "ms"),
            detail=f"{sizes.rounds} rounds of {sizes.warm_requests} requests over the {over} "
            f"row 2c trained, {HOURLY_PERIOD} hours each, HTTP keep-alive on 127.0.0.1",
            check=f"a {HOURLY_PERIOD}-row forecast",
        ),
        single(
            f"serving: computed forecast, hourly, period {HOURLY_PERIOD} (p50)",
            "ms",
            percentiles_per_round(first, sizes.rounds, 0.5),
            higher_is_better=False,
            detail=f"each of the {over}' first answer (not cached), {HOURLY_PERIOD} hours",
        ),
    ]
