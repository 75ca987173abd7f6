"""Row 2: training, fleetcast's job on one instance vs the sample's sequential loop.

Same work on both sides: for each customer, a fit on all but the last week, that week's
point forecast, a refit on the whole history, the archive. Same data (processing's
customer files), same Prophet settings (fleetcast's defaults as its training resolves
them), checked: the served models' fitted parameters and the holdout errors must match.

fleetcast runs ``run_job`` as the container does, one worker process per core; the
baseline is :func:`bench.baselines.sequential_training`. Customers are split into
repetitions of equal size, each trained by both sides in turn.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from bench.baselines import (
    SequentialCustomer,
    new_prophet,
    read_sample_model,
    sequential_training,
)
from bench.measure import (
    Row,
    compare,
    cpu_seconds,
    percentile,
    ratio_at_least,
    timed,
)
from fleetcast_common.model_archive import read_archive
from fleetcast_common.training_manifest import CustomerOutcome, CustomerResult
from fleetcast_training.contract import TrainingEnvironment
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.job import run_job
from fleetcast_training.stan_backend import ScratchStanBackend

RUN_ID = "20240101t000000-0123456789"
# Prophet's MAP fit stops on L-BFGS tolerances; both sides run the same program on the
# same data from the same start, so their parameters should agree far closer than this.
PARAMETER_TOLERANCE = 1e-6
FITTED_PARAMETERS = ("k", "m", "delta", "beta", "sigma_obs")


@dataclass(frozen=True)
class TrainingSizes:
    customers: int
    repetitions: int
    # Series timed fit by fit for the fixed-overhead share.
    overhead_samples: int


@dataclass(frozen=True)
class FleetcastRun:
    seconds: float
    cpu_seconds: float
    workers: int
    results: list[CustomerResult]
    archives: list[Path]


@dataclass(frozen=True)
class SequentialRun:
    seconds: float
    cpu_seconds: float
    customers: list[SequentialCustomer]


def pick_customers(train_folder: Path, count: int) -> list[Path]:
    """``count`` customer files spread evenly over the sorted list."""
    files = sorted(train_folder.glob("*.csv"))
    if count >= len(files):
        return files
    return [files[int(index)] for index in np.linspace(0, len(files) - 1, count).round()]


def fleetcast_training(customer_files: list[Path], root: Path) -> FleetcastRun:
    """The training container's job with ``root`` as /opt/ml and these files as its shard."""
    channel = root / "input/data/train"
    channel.mkdir(parents=True)
    for path in customer_files:
        (channel / path.name).symlink_to(path)
    config = root / "input/config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps({"run_id": RUN_ID}))
    environment = TrainingEnvironment.load(root)
    hyperparameters = Hyperparameters.parse(environment.hyperparameters)
    cpu = cpu_seconds()
    result = None

    def train() -> None:
        nonlocal result
        result = run_job(environment, hyperparameters)

    seconds = timed(train)
    assert result is not None
    trained = [r for r in result.manifest.customers if r.outcome is CustomerOutcome.TRAINED]
    if len(trained) != len(customer_files):
        raise AssertionError(f"fleetcast trained {len(trained)} of {len(customer_files)}")
    return FleetcastRun(
        seconds=seconds,
        cpu_seconds=cpu_seconds() - cpu,
        workers=hyperparameters.worker_count(environment.cpus),
        results=trained,
        archives=sorted(environment.checkpoint_dir.glob("*.tar.gz")),
    )


def check_same_models(ours: FleetcastRun, theirs: list[SequentialCustomer]) -> float:
    """Largest relative difference in fitted parameters or holdout error; raises past
    :data:`PARAMETER_TOLERANCE`."""
    archives = {path.name.removesuffix(".tar.gz"): path for path in ours.archives}
    worst = 0.0
    for customer in theirs:
        model_json, metadata = read_archive(archives[customer.customer_id])
        mine, other = json.loads(model_json), json.loads(read_sample_model(customer.archive))
        pairs = [
            (np.asarray(mine["params"][p]), np.asarray(other["params"][p]))
            for p in FITTED_PARAMETERS
        ]
        pairs.append((np.asarray(metadata.metrics.mae), np.asarray(customer.holdout_mae)))
        for a, b in pairs:
            if a.shape != b.shape:
                raise AssertionError(f"{customer.customer_id}: parameter shapes differ")
            scale = np.maximum(np.abs(b), 1e-3)
            worst = max(worst, float((np.abs(a - b) / scale).max(initial=0.0)))
    if worst > PARAMETER_TOLERANCE:
        raise AssertionError(f"fitted parameters differ by up to {worst:.2g} (relative)")
    return worst


def fit_cpu_ms(fit: Callable[[], object]) -> float:
    started = cpu_seconds()
    fit()
    return (cpu_seconds() - started) * 1000


def fixed_overhead(customer_files: list[Path]) -> dict[str, float]:
    """Median CPU ms (this process and CmdStan's) of one full-history fit and of its fixed
    part, stock backend and ours.

    ``iter=1`` keeps every fixed cost of a fit (Prophet's preprocessing, the data files,
    starting CmdStan, reading its output) and drops the optimisation. CPU time rather
    than wall time: other load on the machine would otherwise count as overhead. The
    first series warms caches and is not counted.
    """
    histories = [pd.read_csv(path, parse_dates=["ds"]) for path in customer_files]
    timings: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-") as scratch:
        backend = ScratchStanBackend(Path(scratch))

        def fit(history: pd.DataFrame, ours: bool, **arguments: object) -> None:
            model = new_prophet()
            if ours:
                model.stan_backend = backend
            model.fit(history, **arguments)

        for index, history in enumerate(histories):
            for name, ours in (("stock", False), ("fleetcast", True)):
                total = fit_cpu_ms(partial(fit, history, ours))
                fixed = fit_cpu_ms(partial(fit, history, ours, iter=1))
                if index:
                    timings.setdefault(f"{name}_total", []).append(total)
                    timings.setdefault(f"{name}_fixed", []).append(fixed)
    return {name: statistics.median(values) for name, values in timings.items()}


def training_rows(
    train_folder: Path, scratch: Path, sizes: TrainingSizes
) -> tuple[list[Row], list[Path]]:
    """Row 2, and the archives fleetcast trained (serving loads them)."""
    customers = pick_customers(train_folder, sizes.customers)
    slices = [
        list(part) for part in np.array_split(np.array(customers, dtype=object), sizes.repetitions)
    ]
    ours: list[FleetcastRun] = []
    theirs: list[SequentialRun] = []
    worst = 0.0
    for repetition, files in enumerate(slices):

        def run_ours(files: list[Path] = files, repetition: int = repetition) -> None:
            ours.append(fleetcast_training(files, scratch / f"fleetcast-{repetition}"))

        def run_theirs(files: list[Path] = files, repetition: int = repetition) -> None:
            cpu = cpu_seconds()
            done: list[SequentialCustomer] = []
            seconds = timed(
                lambda: done.extend(sequential_training(files, scratch / f"baseline-{repetition}"))
            )
            theirs.append(SequentialRun(seconds, cpu_seconds() - cpu, done))

        for side in (run_theirs, run_ours) if repetition % 2 else (run_ours, run_theirs):
            side()
        worst = max(worst, check_same_models(ours[-1], theirs[-1].customers))

    per_slice = [len(files) for files in slices]
    check = (
        f"{sum(per_slice)} customers: served models' parameters and holdout MAE equal "
        f"(max rel. diff {worst:.1g})"
    )
    workers = ours[0].workers
    rows = [
        compare(
            "training: models/s, same work, one instance",
            "models/s",
            [n / run.seconds for n, run in zip(per_slice, ours, strict=True)],
            [n / run.seconds for n, run in zip(per_slice, theirs, strict=True)],
            higher_is_better=True,
            target=ratio_at_least(2, "≥ 2x (stretch 3x)"),
            detail=f"{sum(per_slice)} of the customers (2 years daily) in {sizes.repetitions} "
            f"slices; per customer a holdout fit, its point forecast, a full-history refit "
            f"and the archive, on both sides; fleetcast {workers} worker processes, "
            "baseline one loop",
            check=check,
        ),
        compare(
            "training: CPU time per model",
            "ms",
            [run.cpu_seconds / n * 1000 for n, run in zip(per_slice, ours, strict=True)],
            [run.cpu_seconds / n * 1000 for n, run in zip(per_slice, theirs, strict=True)],
            higher_is_better=False,
            detail="user + system time of the process and all it started (workers, CmdStan), "
            "per customer; less sensitive to other load on the machine than wall time",
        ),
    ]
    ours_each = [r.fit_seconds * 1000 for run in ours for r in run.results if r.fit_seconds]
    theirs_each = [c.seconds * 1000 for run in theirs for c in run.customers]
    distribution = {
        f"{side}_p{int(share * 100)}_ms": percentile(values, share)
        for side, values in (("fleetcast", ours_each), ("baseline", theirs_each))
        for share in (0.1, 0.5, 0.9, 0.99)
    }
    rows.append(
        compare(
            "training: time per model (p50)",
            "ms",
            [
                percentile([r.fit_seconds * 1000 for r in run.results if r.fit_seconds], 0.5)
                for run in ours
            ],
            [percentile([c.seconds * 1000 for c in run.customers], 0.5) for run in theirs],
            higher_is_better=False,
            detail="per customer: read, two fits, forecast, archive; fleetcast "
            f"p10/p90/p99 {distribution['fleetcast_p10_ms']:.0f}/"
            f"{distribution['fleetcast_p90_ms']:.0f}/{distribution['fleetcast_p99_ms']:.0f} ms "
            f"(with {workers} workers sharing the cores), baseline "
            f"{distribution['baseline_p10_ms']:.0f}/{distribution['baseline_p90_ms']:.0f}/"
            f"{distribution['baseline_p99_ms']:.0f} ms",
            figures=distribution,
        )
    )
    busy = [
        sum(r.fit_seconds or 0.0 for r in run.results) / (run.workers * run.seconds) for run in ours
    ]
    fits = fixed_overhead(customers[: sizes.overhead_samples + 1])
    rows.append(
        compare(
            "training: fixed overhead share of a fit",
            "%",
            [100 * fits["fleetcast_fixed"] / fits["fleetcast_total"]],
            [100 * fits["stock_fixed"] / fits["stock_total"]],
            higher_is_better=False,
            detail=f"CPU time of one full-history fit: fleetcast {fits['fleetcast_total']:.0f} ms "
            f"of which {fits['fleetcast_fixed']:.0f} ms fixed (Prophet's preprocessing, data "
            f"files, CmdStan start), stock backend {fits['stock_total']:.0f} ms of which "
            f"{fits['stock_fixed']:.0f} ms; job overhead "
            f"(pool start, scheduling, idle tail): workers busy {100 * statistics.median(busy):.0f}% "
            "of the job",
            figures={**fits, "fleetcast_workers_busy": statistics.median(busy)},
        )
    )
    return rows, [path for run in ours for path in run.archives]
