"""Measure the training container on this machine (not shipped in the image).

    .venv/bin/python bench/training_fits.py --customers 50 --days 730

Prints the median time of one Prophet fit (stock backend and ours), how much of it is
fixed overhead rather than optimisation, and customers per second for:

- ``straightforward``: a sequential loop doing our per-customer work the obvious way
  (stock Prophet, predict with uncertainty samples, refit, archive);
- ``aws-sample``: the public sample's loop (one fit per customer, multiplicative, no
  seasonalities, no scoring, no refit);
- ``fleetcast``: this container's job, ``workers=1`` and ``workers=N``, and with the
  sample's model and a single fit (``sample-like``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_to_json

from fleetcast_common.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_common.training_manifest import CustomerOutcome
from fleetcast_training.contract import OPT_ML_ENV, TrainingEnvironment
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.job import run_job
from fleetcast_training.stan_backend import ScratchStanBackend, silence_stan_logging

RUN_ID = "20240101t000000-0123456789"
# The public sample's model and work: no seasonalities, one fit (still scored, here).
SAMPLE_LIKE = {
    "seasonality_mode": "multiplicative",
    "yearly_seasonality": "false",
    "weekly_seasonality": "false",
    "daily_seasonality": "false",
    "refit_full_history": "false",
}


def synthetic_history(seed: int, days: int) -> pd.DataFrame:
    """Level, trend, yearly and weekly waves and noise, all varying by customer."""
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    y = (
        rng.uniform(300, 1000)
        + rng.uniform(-0.2, 0.2) * t
        + rng.uniform(50, 150) * np.sin(2 * np.pi * t / 365.25 + rng.uniform(0, 6))
        + rng.uniform(10, 80) * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 6))
        + rng.normal(0, rng.uniform(5, 40), days)
    )
    ds = pd.date_range("2023-01-01", periods=days, freq="D")
    return pd.DataFrame({"ds": ds, "y": y.round(3)})


def write_shard(root: Path, customers: int, days: int, hyperparameters: dict[str, str]) -> Path:
    config = root / "input" / "config"
    channel = root / "input" / "data" / "train"
    config.mkdir(parents=True)
    channel.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps({"run_id": RUN_ID, **hyperparameters}))
    for index in range(customers):
        frame = synthetic_history(index, days)
        frame.assign(ds=frame["ds"].dt.strftime("%Y-%m-%d")).to_csv(
            channel / f"c{index:05d}.csv", index=False
        )
    return channel


def per_fit(days: int, samples: int) -> None:
    """Median fit time of each variant, taking turns on every series so that load from
    elsewhere on the machine falls on all of them alike."""
    frames = [synthetic_history(1000 + i, days) for i in range(samples)]
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-") as scratch:
        _time_fits(frames, days, ScratchStanBackend(Path(scratch)))


def _time_fits(frames: list[pd.DataFrame], days: int, backend: ScratchStanBackend) -> None:
    def fit(frame: pd.DataFrame, ours: bool, **kwargs: object) -> None:
        model = Prophet()
        if ours:
            model.stan_backend = backend
        model.fit(frame, **kwargs)

    # iter=1 keeps every fixed cost (preprocessing, data files, process start, reading the
    # result) and drops the optimisation itself.
    variants = {
        ("stock", "total"): lambda f: fit(f, ours=False),
        ("stock", "fixed"): lambda f: fit(f, ours=False, iter=1),
        ("fleetcast", "total"): lambda f: fit(f, ours=True),
        ("fleetcast", "fixed"): lambda f: fit(f, ours=True, iter=1),
    }
    timings: dict[tuple[str, str], list[float]] = {key: [] for key in variants}
    for index, frame in enumerate(frames):
        for key, action in variants.items():
            started = time.perf_counter()
            action(frame)
            if index:  # the first round warms caches
                timings[key].append(time.perf_counter() - started)
    for name in ("stock", "fleetcast"):
        total = statistics.median(timings[name, "total"]) * 1000
        fixed = statistics.median(timings[name, "fixed"]) * 1000
        print(
            f"fit {days} days, {name:9}: median {total:5.1f} ms, fixed overhead "
            f"{fixed:5.1f} ms ({fixed / total:.0%}), optimisation {total - fixed:5.1f} ms"
        )


def straightforward(channel: Path, out: Path, holdout: int) -> None:
    for path in sorted(channel.glob("*.csv")):
        history = pd.read_csv(path, parse_dates=["ds"])
        scored = Prophet().fit(history.iloc[:-holdout])
        forecast = scored.predict(history.iloc[-holdout:][["ds"]])["yhat"].to_numpy()
        actual = history["y"].iloc[-holdout:].to_numpy()
        error = float(np.abs(forecast - actual).mean())
        served = Prophet().fit(history)
        metadata = ModelMetadata(
            customer_id=path.stem,
            run_id=RUN_ID,
            trained_at=datetime.now(UTC),
            data_start=history["ds"].iloc[0].date(),
            data_end=history["ds"].iloc[-1].date(),
            rows=len(history),
            metrics=HoldoutMetrics(
                holdout_days=holdout, smape=0.0, mae=error, naive_smape=0.0, naive_mae=0.0
            ),
            library_versions={},
        )
        write_archive(out / f"{path.stem}.tar.gz", model_to_json(served), metadata)


def aws_sample(channel: Path, out: Path, holdout: int) -> None:
    for path in sorted(channel.glob("*.csv")):
        history = pd.read_csv(path, parse_dates=["ds"])
        model = Prophet(
            seasonality_mode="multiplicative",
            yearly_seasonality=False,
            weekly_seasonality=False,
            daily_seasonality=False,
        ).fit(history.iloc[:-holdout])
        (out / f"{path.stem}.json").write_text(model_to_json(model))


def cpu_seconds() -> float:
    """CPU time of this process and every child it has waited for (CmdStan, workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def report(name: str, customers: int, elapsed: float, cpu: float) -> None:
    print(
        f"{name:22}: {customers / elapsed:5.2f} customers/s ({elapsed:5.1f} s), "
        f"{cpu / customers * 1000:4.0f} ms CPU per customer"
    )


def throughput(customers: int, days: int, workers: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-") as scratch:
        root = Path(scratch)
        channel = write_shard(root / "shard", customers, days, {})
        for name, loop in (("straightforward", straightforward), ("aws-sample", aws_sample)):
            out = root / name
            out.mkdir()
            started, cpu = time.perf_counter(), cpu_seconds()
            loop(channel, out, 7)
            report(name, customers, time.perf_counter() - started, cpu_seconds() - cpu)
        configurations = [(f"workers={n}", {"workers": str(n)}) for n in workers]
        configurations.append(
            (f"sample-like workers={workers[-1]}", SAMPLE_LIKE | {"workers": str(workers[-1])})
        )
        for name, hyperparameters in configurations:
            opt_ml = root / name.replace(" ", "-")
            write_shard(opt_ml, 0, days, hyperparameters)
            (opt_ml / "input" / "data" / "train").rmdir()
            (opt_ml / "input" / "data" / "train").symlink_to(channel)
            os.environ[OPT_ML_ENV] = str(opt_ml)
            environment = TrainingEnvironment.load()
            started, cpu = time.perf_counter(), cpu_seconds()
            result = run_job(environment, Hyperparameters.parse(environment.hyperparameters))
            elapsed = time.perf_counter() - started
            assert result.count(CustomerOutcome.TRAINED) == customers
            report(f"fleetcast {name}", customers, elapsed, cpu_seconds() - cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--fit-samples", type=int, default=21)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, len(os.sched_getaffinity(0))])
    options = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    silence_stan_logging()
    logging.getLogger("prophet").setLevel(logging.ERROR)
    per_fit(options.days, options.fit_samples)
    throughput(options.customers, options.days, options.workers)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
