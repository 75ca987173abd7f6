"""The forecasts a user would pick instead of fleetcast's, on the same daily series.

- **seasonal naive**: the last week of the fit window repeated;
- **stock Prophet**: ``Prophet()`` with every default, fitted on the daily series;
- **statsforecast** AutoETS, AutoTheta and AutoARIMA (season length 7), in their own
  virtual environment (:mod:`bench.accuracy.statsforecast_peers`);
- **median of the three** statsforecast models, day by day.

Each returns, per customer, the forecast of the horizon's days and the CPU seconds it took
(the fit and forecast; Prophet's CmdStan process included).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.accuracy.datasets import CustomerSplit
from bench.accuracy.metrics import SEASON
from bench.measure import cpu_seconds

ROOT = Path(__file__).resolve().parents[2]
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
STATSFORECAST_SCRIPT = Path(__file__).resolve().parent / "statsforecast_peers.py"
STATSFORECAST_MODELS = ("AutoETS", "AutoTheta", "AutoARIMA")
# The peers' one-thread CPU figures: BLAS and OpenMP keep to one core.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Forecasts:
    """One method's forecasts: customer id -> the horizon's values, and CPU per customer."""

    values: dict[str, FloatArray]
    cpu_seconds: dict[str, float]


def seasonal_naive(customers: list[CustomerSplit], horizon: int) -> Forecasts:
    values: dict[str, FloatArray] = {}
    cpu: dict[str, float] = {}
    for customer in customers:
        started = cpu_seconds()
        values[customer.customer_id] = naive_forecast(customer.daily.to_numpy(), horizon)
        cpu[customer.customer_id] = cpu_seconds() - started
    return Forecasts(values, cpu)


def naive_forecast(history: FloatArray, horizon: int, season: int = SEASON) -> FloatArray:
    last = history[-season:]
    return np.asarray(np.resize(last, horizon), dtype=np.float64)


def stock_prophet(customers: list[CustomerSplit], horizon: int) -> Forecasts:
    from prophet import Prophet

    logging.getLogger("cmdstanpy").disabled = True
    values: dict[str, FloatArray] = {}
    cpu: dict[str, float] = {}
    for customer in customers:
        history = pd.DataFrame({"ds": customer.daily.index, "y": customer.daily.to_numpy()})
        started = cpu_seconds()
        model = Prophet()
        model.fit(history)
        future = model.make_future_dataframe(periods=horizon, include_history=False)
        forecast = model.predict(future)
        cpu[customer.customer_id] = cpu_seconds() - started
        values[customer.customer_id] = forecast["yhat"].to_numpy(np.float64)
    return Forecasts(values, cpu)


def statsforecast_models(
    customers: list[CustomerSplit], horizon: int, models: tuple[str, ...]
) -> dict[str, Forecasts]:
    if not PEERS_PYTHON.exists():
        raise FileNotFoundError(
            f"{PEERS_PYTHON} is missing: `make install` creates it (requirements/peers.lock.txt)"
        )
    with tempfile.TemporaryDirectory(prefix="fleetcast-peers-") as folder:
        series = Path(folder) / "series.parquet"
        output = Path(folder) / "forecasts.parquet"
        pq.write_table(
            pa.table(
                {
                    "unique_id": [c.customer_id for c in customers for _ in c.daily.index],
                    "ds": pa.array(
                        np.concatenate([c.daily.index.to_numpy("datetime64[s]") for c in customers])
                    ),
                    "y": np.concatenate([c.daily.to_numpy(np.float64) for c in customers]),
                }
            ),
            series,
        )
        subprocess.run(
            [
                str(PEERS_PYTHON),
                str(STATSFORECAST_SCRIPT),
                str(series),
                str(output),
                "--horizon",
                str(horizon),
                "--models",
                ",".join(models),
            ],
            check=True,
            env={**os.environ, **ONE_THREAD},
        )
        frame = pq.read_table(output).to_pandas()
    result: dict[str, Forecasts] = {}
    for model, rows in frame.groupby("model", sort=False):
        values: dict[str, FloatArray] = {}
        cpu: dict[str, float] = {}
        for customer_id, part in rows.groupby("unique_id", sort=False):
            part = part.sort_values("step")
            values[str(customer_id)] = part["yhat"].to_numpy(np.float64)
            cpu[str(customer_id)] = float(part["cpu_seconds"].iloc[0])
        result[str(model)] = Forecasts(values, cpu)
    return result


def median_of(members: list[Forecasts]) -> Forecasts:
    """Day by day, the median of the members' forecasts; CPU is theirs added up."""
    ids = set.intersection(*(set(m.values) for m in members))
    return Forecasts(
        values={i: np.median(np.vstack([m.values[i] for m in members]), axis=0) for i in ids},
        cpu_seconds={i: sum(m.cpu_seconds[i] for m in members) for i in ids},
    )


def inputs_digest(customers: list[CustomerSplit], horizon: int, models: tuple[str, ...]) -> str:
    """What the peers' forecasts depend on (the daily series, the horizon, the models),
    hashed: the key of a cached set of their forecasts."""
    digest = hashlib.sha256(f"{horizon}|{','.join(models)}".encode())
    for customer in customers:
        digest.update(customer.customer_id.encode())
        digest.update(customer.daily.index.to_numpy("datetime64[s]").tobytes())
        digest.update(customer.daily.to_numpy(np.float64).tobytes())
    return digest.hexdigest()[:16]


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
