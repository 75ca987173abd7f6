"""Row 2c: the CPU time per customer of an hourly model of two years (ModelFrequency=H).

The training container's job as it runs on SageMaker (``run_job``, one worker process
per core), with ``frequency=H`` and its other hyperparameters at their defaults (a week
held out, the 30-day forecast export: 720 hours), on customers of two years of hourly
readings: 17,520 rows each, 24 times the daily series of row 2. Reported per customer,
user + system time of the job and its workers; row 2's daily budget (10 ms) is shown
beside it, as the figure an hourly fleet's cost scales from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.measure import Row, single
from bench.training import CPU_BUDGET_MS, fleetcast_training
from fleetcast_contracts.families import CANDIDATE_KINDS
from fleetcast_contracts.model_archive import read_archive

HOURS = 2 * 365 * 24
# The larger job's customers, in times the row's.
LARGER = 4


@dataclass(frozen=True)
class HourlySizes:
    customers: int
    repetitions: int


def hourly_customer_files(folder: Path, customers: int, seed: int = 7) -> list[Path]:
    """Customer files as processing writes them for ModelFrequency=H (``ds,y``, one row an
    hour): a daily and a weekly cycle, a yearly swing, noise."""
    folder.mkdir(parents=True, exist_ok=True)
    stamps = pd.date_range("2022-01-01", periods=HOURS, freq="h")
    hours, days = stamps.hour.to_numpy(), np.arange(HOURS) / 24
    rng = np.random.default_rng(seed)
    files = []
    for index in range(customers):
        base = rng.uniform(0.5, 2.0)
        use = base * (
            1
            + 0.4 * np.cos(2 * np.pi * (hours - rng.integers(17, 21)) / 24)
            + 0.15 * np.sin(2 * np.pi * days / 365.25 + rng.uniform(0, 2 * np.pi))
            - 0.1 * (stamps.day_of_week.to_numpy() >= 5)
        ) + rng.normal(0, 0.05 * base, HOURS)
        path = folder / f"hourly-{index}.csv"
        pd.DataFrame({"ds": stamps.strftime("%Y-%m-%d %H:%M:%S"), "y": use.round(4)}).to_csv(
            path, index=False
        )
        files.append(path)
    return files


def hourly_rows(scratch: Path, sizes: HourlySizes) -> tuple[list[Row], list[Path]]:
    """Row 2c, and the archives of its last run (row 3c serves them)."""
    # (the row's customers are the larger job's first: the same seed draws them in turn)
    larger = hourly_customer_files(scratch / "customers", LARGER * sizes.customers)
    files = larger[: sizes.customers]
    runs = [
        fleetcast_training(files, scratch / f"run-{repetition}", {"frequency": "H"})
        for repetition in range(sizes.repetitions)
    ]
    # A job of four times the customers: its fixed CPU (the fleet family's trees) shared
    # by more of them, as in a shard of a fleet.
    larger_run = fleetcast_training(larger, scratch / "run-larger", {"frequency": "H"})
    larger_ms = larger_run.cpu_seconds / len(larger) * 1000
    # The row's job with Prophet named too: an hourly model's default candidates leave it
    # out (fleetcast_contracts.families), a stack that names it pays this.
    every_family = fleetcast_training(
        files,
        scratch / "run-every-family",
        {"frequency": "H", "candidates": ",".join(CANDIDATE_KINDS)},
    )
    every_family_ms = every_family.cpu_seconds / len(files) * 1000
    served = {read_archive(path.read_bytes())[1].frequency for run in runs for path in run.archives}
    if {frequency.lower() for frequency in served} != {"h"}:
        raise AssertionError(f"hourly customers were served models of frequency {served}")
    per_customer_ms = [run.cpu_seconds / len(files) * 1000 for run in runs]
    wall_ms = [run.seconds / len(files) * 1000 for run in runs]
    median = float(np.median(per_customer_ms))
    return [
        single(
            "training: CPU per hourly model, 2 years",
            "ms",
            per_customer_ms,
            higher_is_better=False,
            detail=f"{len(files)} customers of {HOURS:,} hourly rows (ModelFrequency=H), the "
            "training job with its default hyperparameters (a week held out, the 30-day "
            "export: 720 hours; the candidates an hourly model's default: every family but "
            f"Prophet) and {runs[0].workers} worker processes; user + system time "
            f"per customer, {median / CPU_BUDGET_MS:.0f}x the daily model's "
            f"{CPU_BUDGET_MS:.0f} ms budget "
            f"(row 2); wall time per customer {np.median(wall_ms):.0f} ms; in a job of "
            f"{len(larger)} customers {larger_ms:.0f} ms a customer (a job's fixed CPU, the "
            "fleet family's trees, shared by more); with Prophet named too (ModelCandidates "
            f"listing every family) {every_family_ms:.0f} ms a customer",
            check=f"every customer trained, each served model hourly ({len(files)} archives a run)",
            figures={
                "daily_budget_ms": CPU_BUDGET_MS,
                "hours": float(HOURS),
                "larger_job_ms": larger_ms,
                "larger_job_customers": float(len(larger)),
                "every_family_ms": every_family_ms,
            },
        )
    ], runs[-1].archives
