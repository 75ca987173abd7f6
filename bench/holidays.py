"""Training throughput with holidays vs without, on the same customers.

``python -m bench.holidays [--customers 1000]``: two years of daily use per customer (a
weekly cycle, dips on US public holidays), trained by the training container's
``run_job`` on this machine, one worker process per core, as the container runs:

- without holidays (no calendars channel, no default country);
- every customer with US holidays (Prophet's ``add_country_holidays``);
- every customer with Bavaria's holidays (a ``holidays=`` frame);
- without holidays again, to show the run-to-run spread on a shared machine.

Prints one line per variant (seconds, models per second, CPU ms per model, fits by
method, median holdout sMAPE) and writes them as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from fleetcast_contracts.holiday_calendar import holiday_dates
from fleetcast_contracts.training import CALENDARS_FILE
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_training.environment import TrainingEnvironment
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.job import run_job

RUN_ID = "q0000000900-20240101t000000"
VARIANTS = (("none", None), ("US", ("US", "")), ("DE-BY", ("DE", "BY")), ("none again", None))


def write_customers(folder: Path, customers: int) -> list[Path]:
    folder.mkdir(parents=True)
    dates = pd.date_range("2023-01-01", "2024-12-31", freq="D")
    days = {d for d, _ in holiday_dates("US", None, (2023, 2024))}
    holiday = np.array([stamp.date() in days for stamp in dates])
    rng = np.random.default_rng(0)
    paths = []
    for index in range(customers):
        level = rng.uniform(100, 900)
        y = level * (1 + 0.2 * np.sin(2 * np.pi * np.arange(dates.size) / 7 + rng.uniform(0, 6)))
        y = np.where(holiday, 0.7 * y, y) + rng.normal(0, 0.03 * level, dates.size)
        path = folder / f"c{index:05d}.csv"
        pd.DataFrame({"ds": dates.strftime("%Y-%m-%d"), "y": y.round(3)}).to_csv(path, index=False)
        paths.append(path)
    return paths


def train(files: list[Path], root: Path, calendar: tuple[str, str] | None) -> dict[str, object]:
    channel = root / "input/data/train"
    channel.mkdir(parents=True)
    for path in files:
        (channel / path.name).symlink_to(path)
    if calendar is not None:
        calendars = root / "input/data/calendars"
        calendars.mkdir(parents=True)
        rows = "".join(f"{path.stem},{calendar[0]},{calendar[1]}\n" for path in files)
        (calendars / CALENDARS_FILE).write_text("customer_id,country,subdivision\n" + rows)
    config = root / "input/config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps({"run_id": RUN_ID}))
    environment = TrainingEnvironment.load(root)
    started, cpu = time.perf_counter(), _cpu_seconds()
    result = run_job(environment, Hyperparameters.parse(environment.hyperparameters))
    seconds, cpu = time.perf_counter() - started, _cpu_seconds() - cpu
    trained = [r for r in result.results.customers() if r.outcome is CustomerOutcome.TRAINED]
    methods: Counter[str] = Counter()
    for customer in trained:
        methods.update(customer.fit_methods or {})
    return {
        "customers": len(trained),
        "seconds": round(seconds, 2),
        "models_per_second": round(len(trained) / seconds, 2),
        # CPU of this process and its finished worker processes: the figure a shared
        # machine's load does not move much.
        "cpu_ms_per_model": round(1000 * cpu / len(trained), 1),
        "fit_methods": dict(methods),
        "median_smape": round(statistics.median(r.metrics.smape for r in trained if r.metrics), 4),
    }


def _cpu_seconds() -> float:
    own, workers = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.holidays", description=__doc__)
    parser.add_argument("--customers", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-holidays-") as scratch:
        files = write_customers(Path(scratch) / "customers", args.customers)
        for index, (name, calendar) in enumerate(VARIANTS):
            results[name] = train(files, Path(scratch) / f"run-{index}", calendar)
            print(name, results[name], flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
