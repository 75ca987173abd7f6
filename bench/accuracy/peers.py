"""The forecasts a user would pick instead of fleetcast's, on the same daily series.

- **seasonal naive**: the last week of the fit window repeated; its 80% interval from its
  own in-sample errors (the 0.1 and 0.9 quantiles of y[t] - y[t - 7k] for a step k weeks
  ahead);
- **stock Prophet**: ``Prophet()`` with every default, fitted on the daily series (its
  interval is 80% by default);
- **statsforecast** AutoETS, AutoTheta and AutoARIMA (season length 7, ``level=[80]``), in
  their own virtual environment (:mod:`bench.accuracy.statsforecast_peers`);
- **median of the three** statsforecast models, day by day (their bounds too);
- **mlforecast**: LightGBM across the set's customers (:mod:`bench.accuracy.mlforecast_peers`),
  in statsforecast's environment;
- **AutoGluon-TimeSeries** ``medium_quality``: its ensemble and each base model
  (:mod:`bench.accuracy.autogluon_peers`), in an environment of its own that only
  ``make accuracy`` installs.

Each returns, per customer, the forecast of the horizon's days, its quantiles where the
method has them (0.1 and 0.9: the 80% interval; 0.5 where it has a median) and the CPU
seconds it took (the fit and forecast; Prophet's CmdStan process included; for the models
fitted across the fleet, their CPU divided by the customers).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pickle
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.accuracy.datasets import DAILY, CustomerSplit, Frequency
from bench.accuracy.metrics import LOWER, MEDIAN, SEASON, UPPER
from bench.accuracy.peer_rows import QUANTILE_COLUMNS
from bench.measure import cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
AUTOGLUON_PYTHON = ROOT / ".venv-autogluon" / "bin" / "python"
STATSFORECAST_MODELS = ("AutoETS", "AutoTheta", "AutoARIMA")
# The peers' one-thread CPU figures: BLAS and OpenMP keep to one core.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# AutoGluon's pretrained members (Chronos-2, Toto) cannot download their weights here:
# offline, the hub says so at once and AutoGluon skips them.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# The hourly part's statsforecast models fit each series' last 6 weeks of hours: on 12
# weeks MSTL, AutoETS and AutoTheta took 4 s of CPU a customer together (AutoETS, season
# 24, 2.4 s), on a whole year about four times that.
HOURLY_STATS_HISTORY = 6 * 168
# AutoGluon's fit time limit on each set in the hourly part (seconds), and at each of its
# rolling origins: about 70 s of a 2-core machine's wall clock a fit.
HOURLY_AUTOGLUON_TIME_LIMIT = 120
# What a cached set of forecasts holds; a new shape is a new key.
CACHE_VERSION = "2"

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Forecasts:
    """One method's forecasts: customer id -> the horizon's values, and CPU per customer;
    ``quantiles``: level -> customer id -> the horizon's quantile (the 80% interval's 0.1
    and 0.9, and 0.5 where the method has a median)."""

    values: dict[str, FloatArray]
    cpu_seconds: dict[str, float]
    quantiles: dict[float, dict[str, FloatArray]] = field(default_factory=dict)

    def customer_quantiles(self, customer_id: str) -> dict[float, FloatArray]:
        """The customer's 0.1, 0.5 and 0.9 quantiles, the point forecast standing in for a
        missing median; empty without an interval."""
        found = {q: v[customer_id] for q, v in self.quantiles.items() if customer_id in v}
        if LOWER not in found or UPPER not in found or customer_id not in self.values:
            return {}
        found.setdefault(MEDIAN, self.values[customer_id])
        return found

    def first(self, periods: int) -> Forecasts:
        """The same forecasts cut to their first ``periods`` (the day ahead of 720 hours)."""
        return Forecasts(
            {c: v[:periods] for c, v in self.values.items()},
            self.cpu_seconds,
            {q: {c: v[:periods] for c, v in by.items()} for q, by in self.quantiles.items()},
        )


def seasonal_naive(customers: list[CustomerSplit], horizon: int, season: int = SEASON) -> Forecasts:
    """The last ``season`` periods repeated (a week of days; a day or a week of hours)."""
    values: dict[str, FloatArray] = {}
    lower: dict[str, FloatArray] = {}
    upper: dict[str, FloatArray] = {}
    cpu: dict[str, float] = {}
    for customer in customers:
        started = cpu_seconds()
        history = customer.series.to_numpy(np.float64)
        values[customer.customer_id] = naive_forecast(history, horizon, season)
        lower[customer.customer_id], upper[customer.customer_id] = naive_interval(
            history, horizon, season
        )
        cpu[customer.customer_id] = cpu_seconds() - started
    return Forecasts(values, cpu, {LOWER: lower, UPPER: upper})


def naive_forecast(history: FloatArray, horizon: int, season: int = SEASON) -> FloatArray:
    last = history[-season:]
    return np.asarray(np.resize(last, horizon), dtype=np.float64)


def naive_interval(
    history: FloatArray, horizon: int, season: int = SEASON
) -> tuple[FloatArray, FloatArray]:
    """Seasonal naive's 80% interval: a step k seasons ahead gets the forecast plus the 0.1
    and 0.9 quantiles of the history's own k-season differences (NaN where it is too short)."""
    forecast = naive_forecast(history, horizon, season)
    lower = np.full(horizon, math.nan)
    upper = np.full(horizon, math.nan)
    for step in range(horizon):
        lag = (step // season + 1) * season
        if history.size > lag:
            errors = history[lag:] - history[:-lag]
            low, high = np.quantile(errors, [LOWER, UPPER])
            lower[step], upper[step] = forecast[step] + low, forecast[step] + high
    return lower, upper


def stock_prophet(customers: list[CustomerSplit], horizon: int) -> Forecasts:
    from prophet import Prophet

    logging.getLogger("cmdstanpy").disabled = True
    values: dict[str, FloatArray] = {}
    lower: dict[str, FloatArray] = {}
    upper: dict[str, FloatArray] = {}
    cpu: dict[str, float] = {}
    for customer in customers:
        history = pd.DataFrame({"ds": customer.series.index, "y": customer.series.to_numpy()})
        started = cpu_seconds()
        model = Prophet()
        model.fit(history)
        future = model.make_future_dataframe(periods=horizon, include_history=False)
        forecast = model.predict(future)
        cpu[customer.customer_id] = cpu_seconds() - started
        values[customer.customer_id] = forecast["yhat"].to_numpy(np.float64)
        # Prophet's default interval_width is 0.8.
        lower[customer.customer_id] = forecast["yhat_lower"].to_numpy(np.float64)
        upper[customer.customer_id] = forecast["yhat_upper"].to_numpy(np.float64)
    return Forecasts(values, cpu, {LOWER: lower, UPPER: upper})


def series_table(customers: list[CustomerSplit]) -> pa.Table:
    """The customers' daily series as the long frame every peer library takes
    (``unique_id, ds, y``; AutoGluon's ``item_id, timestamp, target`` by its own names)."""
    return pa.table(
        {
            "unique_id": [c.customer_id for c in customers for _ in c.series.index],
            "ds": pa.array(
                np.concatenate([c.series.index.to_numpy("datetime64[s]") for c in customers])
            ),
            "y": np.concatenate([c.series.to_numpy(np.float64) for c in customers]),
        }
    )


def forecasts_from_rows(frame: pd.DataFrame) -> dict[str, Forecasts]:
    """A peer script's rows (:mod:`bench.accuracy.peer_rows`) as each model's Forecasts; a
    quantile is kept for a customer when the model gave it on every step."""
    result: dict[str, Forecasts] = {}
    for model, rows in frame.groupby("model", sort=False):
        values: dict[str, FloatArray] = {}
        cpu: dict[str, float] = {}
        quantiles: dict[float, dict[str, FloatArray]] = {}
        for customer_id, part in rows.groupby("unique_id", sort=False):
            part = part.sort_values("step")
            values[str(customer_id)] = part["yhat"].to_numpy(np.float64)
            cpu[str(customer_id)] = float(part["cpu_seconds"].iloc[0])
            for column, level in QUANTILE_COLUMNS.items():
                if column in part and part[column].notna().all():
                    quantiles.setdefault(level, {})[str(customer_id)] = part[column].to_numpy(
                        np.float64
                    )
        result[str(model)] = Forecasts(values, cpu, quantiles)
    return result


def run_peer_script(
    python: Path,
    module: str,
    customers: list[CustomerSplit],
    horizon: int,
    *arguments: str,
    environment: dict[str, str] | None = None,
    processes: int = 1,
) -> dict[str, Forecasts]:
    """``python -m module SERIES OUT --horizon H ARGUMENTS`` from the repository's root,
    the customers' series in, every model's forecasts out; ``processes``: so many at once,
    each on its share of the customers (per-series models, timed per series, so their CPU
    figures do not change)."""
    if not python.exists():
        raise FileNotFoundError(f"{python} is missing: `make accuracy` installs it")
    shares = [customers[index::processes] for index in range(processes)]
    with tempfile.TemporaryDirectory(prefix="fleetcast-peers-") as folder:
        running = []
        for index, share in enumerate(s for s in shares if s):
            series = Path(folder) / f"series-{index}.parquet"
            output = Path(folder) / f"forecasts-{index}.parquet"
            pq.write_table(series_table(share), series)
            command = [str(python), "-m", module, str(series), str(output)]
            process = subprocess.Popen(
                [*command, "--horizon", str(horizon), *arguments],
                cwd=ROOT,
                env={**os.environ, **ONE_THREAD, **(environment or {})},
            )
            running.append((process, output))
        for process, _ in running:
            if process.wait() != 0:
                raise subprocess.CalledProcessError(process.returncode, process.args)
        frame = pd.concat([pq.read_table(o).to_pandas() for _, o in running], ignore_index=True)
    return forecasts_from_rows(frame)


def statsforecast_models(
    customers: list[CustomerSplit],
    horizon: int,
    models: tuple[str, ...],
    frequency: Frequency = DAILY,
    history: int | None = None,
    processes: int = 1,
) -> dict[str, Forecasts]:
    """``history``: each series' last so many periods only (the hourly peers');
    ``processes``: so many scripts at once, each on its share of the customers."""
    return run_peer_script(
        PEERS_PYTHON,
        "bench.accuracy.statsforecast_peers",
        customers,
        horizon,
        "--models",
        ",".join(models),
        "--frequency",
        frequency.alias,
        *(["--history", str(history)] if history else []),
        processes=processes,
    )


def mlforecast_lightgbm(
    customers: list[CustomerSplit], horizon: int, frequency: Frequency = DAILY
) -> dict[str, Forecasts]:
    return run_peer_script(
        PEERS_PYTHON,
        "bench.accuracy.mlforecast_peers",
        customers,
        horizon,
        "--frequency",
        frequency.alias,
    )


def autogluon_available() -> bool:
    return AUTOGLUON_PYTHON.exists()


def autogluon_models(
    customers: list[CustomerSplit],
    horizon: int,
    leaderboard: Path | None = None,
    frequency: Frequency = DAILY,
    time_limit: int | None = None,
) -> dict[str, Forecasts]:
    """AutoGluon's ensemble and base models (``.venv-autogluon``, which make accuracy
    installs); ``leaderboard``: where its leaderboard and fit CPU go as JSON;
    ``time_limit``: the fit's seconds (AutoGluon's ``time_limit``; none by default)."""
    return run_peer_script(
        AUTOGLUON_PYTHON,
        "bench.accuracy.autogluon_peers",
        customers,
        horizon,
        "--frequency",
        frequency.alias,
        *(["--leaderboard", str(leaderboard)] if leaderboard else []),
        *(["--time-limit", str(time_limit)] if time_limit else []),
        environment=OFFLINE,
    )


def median_of(members: list[Forecasts]) -> Forecasts:
    """Day by day, the median of the members' forecasts, and of their interval's bounds
    where every member has them; CPU is theirs added up."""
    ids = set.intersection(*(set(m.values) for m in members))

    def median(arrays: list[FloatArray]) -> FloatArray:
        return np.asarray(np.median(np.vstack(arrays), axis=0), dtype=np.float64)

    quantiles: dict[float, dict[str, FloatArray]] = {}
    for level in (LOWER, UPPER):
        with_level = [i for i in ids if all(i in m.quantiles.get(level, {}) for m in members)]
        quantiles[level] = {i: median([m.quantiles[level][i] for m in members]) for i in with_level}
    return Forecasts(
        values={i: median([m.values[i] for m in members]) for i in ids},
        cpu_seconds={i: sum(m.cpu_seconds[i] for m in members) for i in ids},
        quantiles=quantiles,
    )


def inputs_digest(customers: list[CustomerSplit], horizon: int, models: tuple[str, ...]) -> str:
    """What the peers' forecasts depend on (the series, the horizon, the models), hashed:
    the key of a cached set of their forecasts."""
    digest = hashlib.sha256(f"{CACHE_VERSION}|{horizon}|{','.join(models)}".encode())
    for customer in customers:
        digest.update(customer.customer_id.encode())
        digest.update(customer.series.index.to_numpy("datetime64[s]").tobytes())
        digest.update(customer.series.to_numpy(np.float64).tobytes())
    return digest.hexdigest()[:16]


def cache_path(
    folder: Path | None,
    name: str,
    customers: list[CustomerSplit],
    horizon: int,
    models: tuple[str, ...],
) -> Path | None:
    """Where a cached set of the peers' forecasts named ``name`` is kept in ``folder`` (the
    run's --peers-cache; None without one): the name and :func:`inputs_digest`'s key."""
    if folder is None:
        return None
    return folder / f"{name}-{inputs_digest(customers, horizon, models)}.pickle"


def load_cached(path: Path) -> dict[str, Forecasts] | None:
    if not path.is_file():
        return None
    with path.open("rb") as file:
        found: dict[str, Forecasts] = pickle.load(file)
    return found


def store_cached(path: Path, forecasts: dict[str, Forecasts]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:
        pickle.dump(forecasts, file)


# The cached sets of peers' forecasts this run read from --peers-cache (daily and hourly
# alike): the README's run line says so.
READ_FROM_CACHE: set[str] = set()


def cached_or_computed(
    cache: Path | None,
    with_autogluon: bool,
    compute: Callable[[], dict[str, Forecasts]],
    run_autogluon: Callable[[Path], dict[str, Forecasts]],
) -> tuple[dict[str, Forecasts], dict[str, object] | None]:
    """The peers' forecasts: from ``cache`` when it holds them (its name then added to
    :data:`READ_FROM_CACHE`), else ``compute``'s and, when ``with_autogluon``,
    ``run_autogluon``'s (given where to write its leaderboard), then stored in ``cache``;
    and AutoGluon's leaderboard (or why it did not run). The daily and the hourly parts of
    make accuracy both run so."""
    autogluon: dict[str, object] | None = (
        None if with_autogluon else {"skipped": "not asked for: --no-autogluon or --smoke"}
    )
    found = load_cached(cache) if cache else None
    if cache and found is not None:
        READ_FROM_CACHE.add(cache.name)
        leaderboard = cache.with_suffix(".json")
        if with_autogluon and leaderboard.exists():
            autogluon = json.loads(leaderboard.read_text())
        return found, autogluon
    forecasts = compute()
    if with_autogluon:
        with tempfile.TemporaryDirectory(prefix="fleetcast-autogluon-") as folder:
            leaderboard = Path(folder) / "leaderboard.json"
            forecasts.update(run_autogluon(leaderboard))
            autogluon = json.loads(leaderboard.read_text())
    if cache:
        store_cached(cache, forecasts)
        if autogluon and with_autogluon:
            cache.with_suffix(".json").write_text(json.dumps(autogluon))
    return forecasts, autogluon
