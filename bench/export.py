"""Row 2b: what the run's forecast export and accuracy table add to training.

The same training job on the same customers, with the export on (the default 30 days)
and off (``forecast_export_days=0``), in turns (off/on, then on/off) so that other load
on the machine weighs on both alike. Both backtest on 30-day windows: with the export off
a job's backtest horizon is ``holdout_days`` (7 by default), so the side without it sets
``holdout_days=30``; otherwise the row would count a shorter backtest as the export's
saving. With the export on, each worker compiles the model
it has just fitted into the serving forecaster, draws the interval as the endpoint would,
and the job writes the Parquet parts at its end; the holdout measures (WAPE, RMSE, MASE)
are computed either way and cost microseconds. Reported: the extra CPU time (user +
system of the job and its workers, less sensitive to the machine's other load than wall
time) and the wall time, each as a share of the run's without the export; and the export's
own CPU time as the job measures it, as a share of the rest of the same run's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from bench.measure import Row, at_most, single
from bench.training import FleetcastRun, fleetcast_training, pick_customers
from fleetcast_training.run_exports import EXPORTS_DIR, FORECASTS


@dataclass(frozen=True)
class ExportSizes:
    customers: int
    repetitions: int


def export_rows(train_folder: Path, scratch: Path, sizes: ExportSizes) -> list[Row]:
    customers = pick_customers(train_folder, sizes.customers)
    runs: dict[str, list[FleetcastRun]] = {"on": [], "off": []}
    for repetition in range(sizes.repetitions):
        order = ("off", "on") if repetition % 2 == 0 else ("on", "off")
        for side in order:
            settings = (
                {"forecast_export_days": "30"}
                if side == "on"
                else {"forecast_export_days": "0", "holdout_days": "30"}
            )
            root = scratch / f"export-{side}-{repetition}"
            runs[side].append(fleetcast_training(customers, root, settings))
            if side == "on":
                exported = _exported_customers(root / "checkpoints")
                if exported != len(customers):
                    raise AssertionError(
                        f"the export has {exported} customers of {len(customers)} trained"
                    )
    # The job's time with the export as a share of its time without: 110% is the budget.
    # (A share, not a difference: at small sizes noise makes a difference negative.)
    cpu = [
        100 * on.cpu_seconds / off.cpu_seconds
        for on, off in zip(runs["on"], runs["off"], strict=True)
    ]
    wall = [100 * on.seconds / off.seconds for on, off in zip(runs["on"], runs["off"], strict=True)]
    # The same share from within each run with the export: its own code, timed by the job,
    # against the rest of that run's CPU. Free of the drift between two runs; blind to
    # what the export costs the rest indirectly (caches, memory).
    attributed = statistics.median(
        100 * on.cpu_seconds / (on.cpu_seconds - on.export_cpu_seconds) for on in runs["on"]
    )
    seconds = {
        f"{side}_{measure}": statistics.median(getattr(run, attribute) for run in runs[side])
        for side in ("on", "off")
        for measure, attribute in (("seconds", "seconds"), ("cpu_seconds", "cpu_seconds"))
    }
    return [
        single(
            "training: CPU with the forecast export + accuracy",
            "% of without",
            cpu,
            higher_is_better=False,
            target=at_most(110, "%"),
            detail=f"{len(customers)} customers (2 years daily), one instance, the job with "
            f"a 30-day export against forecast_export_days=0 (both backtesting 30-day "
            f"windows: holdout_days=30 without the export), in turns: CPU "
            f"{seconds['on_cpu_seconds']:.1f} s vs {seconds['off_cpu_seconds']:.1f} s, "
            f"wall {seconds['on_seconds']:.1f} s vs {seconds['off_seconds']:.1f} s "
            f"(wall {statistics.median(wall):.0f}% of without); the export's own code, timed "
            f"inside each job with it: {attributed:.0f}% of the rest of that job's CPU",
            check=f"every trained customer in the export ({len(customers)}), once",
            figures={
                **seconds,
                "wall_percent_of_without": statistics.median(wall),
                "attributed_percent_of_without": attributed,
            },
        )
    ]


def _exported_customers(checkpoints: Path) -> int:
    parts = sorted((checkpoints / EXPORTS_DIR / FORECASTS).glob("*.parquet"))
    ids: set[str] = set()
    for part in parts:
        ids.update(pq.read_table(part, columns=["customer_id"]).column(0).to_pylist())
    return len(ids)
