"""One training instance's job: every customer file of its shard, in parallel, resumable.

The parent process plans the shard, hands customers to one worker process per CPU
(:mod:`fleetcast_training.worker_pool`) in small batches (largest files first, so no
worker is left with a long one at the end), logs progress, and writes the manifest.
Workers fit, score and archive each customer into the checkpoint directory, which
SageMaker syncs to S3 as it fills; after a spot interruption the restarted job finds
those archives there and keeps them.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from fleetcast_contracts.files import PARTIAL_SUFFIX
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.layout import CUSTOMER_FILE_SUFFIX, customer_id_from_file_name
from fleetcast_contracts.shards import SHARD_SUFFIX
from fleetcast_contracts.training import (
    CALENDARS_CHANNEL,
    FLEET_CHANNEL,
    METRIC_FITS_CMDSTAN,
    METRIC_FITS_IN_PROCESS,
    METRIC_MEDIAN_MAE,
    METRIC_MEDIAN_NAIVE_SMAPE,
    METRIC_MEDIAN_SMAPE,
    METRIC_MODELS_FAILED,
    METRIC_MODELS_PER_SECOND,
    METRIC_MODELS_RESUMED,
    METRIC_MODELS_TRAINED,
    TRAIN_CHANNEL,
    metric_line,
)
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_training import fleet
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.customer_training import CustomerReport
from fleetcast_training.environment import TrainingEnvironment
from fleetcast_training.export import ShardExport
from fleetcast_training.failures import FailureKind, JobFailure, summarise_failures
from fleetcast_training.fleet import FleetForecast
from fleetcast_training.history import read_series
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.parts import unpack_parts
from fleetcast_training.progress import Progress
from fleetcast_training.shard_results import ShardResults
from fleetcast_training.stan_backend import IN_PROCESS, scratch_parent
from fleetcast_training.worker_pool import CustomerFile, WorkerPool, batch_size

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    results: ShardResults
    seconds: float
    required_rows: int
    # CPU time of the forecast export alone: the workers' forecasts and the parts written
    # here (0 without an export).
    export_cpu_seconds: float = 0.0

    def count(self, outcome: CustomerOutcome) -> int:
        return self.results.count(outcome)

    @property
    def all_failed(self) -> str | None:
        """When the shard had customers and none produced a model, a summary of why. The
        instance still succeeds: each customer's reason is in the manifest, and another
        instance's models must not be lost with this one's."""
        total = len(self.results)
        failed = sorted(self.results.failures, key=lambda failure: failure[1].customer_id)
        if not total or len(failed) < total:
            return None
        return summarise_failures(
            [kind for kind, _ in failed],
            [f"{result.customer_id}: {result.reason}" for _, result in failed],
            total=total,
            min_rows=self.required_rows,
        )

    def metric_lines(self) -> list[str]:
        """stdout lines for the job's MetricDefinitions (contracts.training.METRIC_DEFINITIONS)."""
        trained = self.count(CustomerOutcome.TRAINED)
        lines = [
            metric_line(METRIC_MODELS_TRAINED, trained),
            metric_line(METRIC_MODELS_RESUMED, self.count(CustomerOutcome.RESUMED)),
            metric_line(METRIC_MODELS_FAILED, self.count(CustomerOutcome.FAILED)),
        ]
        medians = self.results.median_errors()
        if medians is not None:
            smape, naive_smape, mae = medians
            lines += [
                metric_line(METRIC_MEDIAN_SMAPE, smape),
                metric_line(METRIC_MEDIAN_NAIVE_SMAPE, naive_smape),
                metric_line(METRIC_MEDIAN_MAE, mae),
            ]
        if trained and self.seconds > 0:
            lines.append(metric_line(METRIC_MODELS_PER_SECOND, trained / self.seconds))
        fits = self.results.fit_methods()
        in_process = fits.pop(IN_PROCESS, 0)
        lines += [
            metric_line(METRIC_FITS_IN_PROCESS, in_process),
            metric_line(METRIC_FITS_CMDSTAN, sum(fits.values())),
        ]
        return lines


def run_job(environment: TrainingEnvironment, hyperparameters: Hyperparameters) -> JobResult:
    """Train this instance's shard and write its manifest; raise :class:`JobFailure` only
    for a fault of the instance itself (no training data, say). Customers that fail are
    recorded in the manifest with their reasons, even when all of them fail."""
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="fleetcast-job-"))
    try:
        return _run_job(environment, hyperparameters, started, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_job(
    environment: TrainingEnvironment,
    hyperparameters: Hyperparameters,
    started: float,
    scratch: Path,
) -> JobResult:
    host = environment.current_host
    customers, rejected, run_last_period = plan_shard(
        environment.channel_dir(TRAIN_CHANNEL), len(environment.hosts), scratch / "parts"
    )
    calendars = CustomerCalendars.load(
        environment.channel_dir(CALENDARS_CHANNEL), hyperparameters.default_holiday_country
    )
    # (unpacked only for a model the fleet family is a candidate of)
    teachers = (
        fleet_teachers(
            environment.channel_dir(FLEET_CHANNEL),
            scratch / "teachers",
            {c.customer_id for c in customers},
        )
        if fleet_learns(hyperparameters)
        else []
    )
    checkpoint_dir = environment.checkpoint_dir
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    _remove_partial_files(checkpoint_dir)

    workers = max(1, min(hyperparameters.worker_count(environment.cpus), len(customers)))
    logger.info(
        "%s: training %d customers (%d more rejected by name) with %d worker process(es); "
        "%s models, candidates %s",
        host,
        len(customers),
        len(rejected),
        workers,
        hyperparameters.frequency.adjective,
        ", ".join(hyperparameters.candidates),
    )
    if hyperparameters.required_rows > hyperparameters.min_rows:
        logger.info(
            "customers need at least %d rows (min_rows=%d is too few to hold out %d days)",
            hyperparameters.required_rows,
            hyperparameters.min_rows,
            hyperparameters.holdout_days,
        )
    export = (
        ShardExport(scratch / "export", hyperparameters.run_id)
        if hyperparameters.forecast_export_days
        else None
    )
    results = ShardResults(hyperparameters.run_id, host, environment.hosts, export)
    for report in rejected:
        results.add(report)
    progress = Progress(host, total=len(customers) + len(rejected), directory=checkpoint_dir)
    progress.advance(len(rejected))
    train_customers(
        customers,
        hyperparameters,
        checkpoint_dir,
        workers,
        progress,
        results,
        calendars,
        run_last_period,
        teachers,
    )

    export_cpu_seconds = 0.0
    if export is not None:
        export_cpu_seconds = write_exports(export, checkpoint_dir, host, results)
    logger.info("%s: %s", host, describe_fits(results.fit_methods()))
    # Pages, summary, then the manifest: a manifest in the checkpoints means the rest is
    # there too (the export as well, written above).
    results.write_manifest(checkpoint_dir, environment.model_dir)
    return JobResult(
        results=results,
        seconds=time.perf_counter() - started,
        required_rows=hyperparameters.required_rows,
        export_cpu_seconds=export_cpu_seconds,
    )


def write_exports(
    export: ShardExport, checkpoint_dir: Path, host: str, results: ShardResults
) -> float:
    """The shard's forecast parts and accuracy part, before the manifest: a run whose
    manifests are all there has all its exports too. Returns the CPU seconds the export
    took: its forecasts in the workers and these parts."""
    started = time.thread_time()
    parts, _ = export.write(checkpoint_dir, host)
    cpu_seconds = time.thread_time() - started + results.export_cpu_seconds
    unexported = export.unexported
    logger.info(
        "%s: exported %d customers' forecasts in %d part(s), %.1f s of CPU%s",
        host,
        export.exported,
        len(parts),
        cpu_seconds,
        f"; none for {len(unexported)}: {', '.join(unexported[:5])}" if unexported else "",
    )
    return cpu_seconds


def describe_fits(fits: dict[str, int]) -> str:
    """How many Prophet fits ran in-process, how many in CmdStan and why."""
    fits = dict(fits)
    in_process = fits.pop(IN_PROCESS, 0)
    fallbacks = "".join(f", {count} {method}" for method, count in sorted(fits.items()))
    return f"Prophet fits: {in_process} {IN_PROCESS}{fallbacks}"


def plan_shard(
    channel_dir: Path, hosts: int, unpack_to: Path
) -> tuple[list[CustomerFile], list[CustomerReport], np.datetime64 | None]:
    """The customers of this instance's training parts, unpacked into ``unpack_to``, a
    FAILED report for every entry that cannot be used, and the run's last period as the
    parts say it (contracts.shards.RUN_LAST_PERIOD_KEY; None: no part says).

    Besides parts, a ``{customer_id}.csv`` per customer (runs processed before parts) is
    still read. Any other name, and any invalid customer id in a part, is never used as a
    path; it is reported under its (shortened) name.
    """
    if not channel_dir.is_dir():
        raise JobFailure(
            f"no training data: the '{TRAIN_CHANNEL}' channel directory {channel_dir} is missing"
        )
    customers: list[CustomerFile] = []
    rejected: list[CustomerReport] = []
    parts: list[Path] = []
    for entry in sorted(channel_dir.iterdir()):
        customer_id = customer_id_from_file_name(entry.name, CUSTOMER_FILE_SUFFIX)
        if entry.is_file() and entry.name.endswith(SHARD_SUFFIX):
            parts.append(entry)
        elif customer_id is not None and entry.is_file():
            customers.append(CustomerFile(customer_id, entry, entry.stat().st_size))
        else:
            shown = entry.name if len(entry.name) <= 80 else entry.name[:77] + "..."
            rejected.append(
                CustomerReport.failed(
                    shown,
                    FailureKind.INVALID_FILE_NAME,
                    f"{shown!r} is not a training part (part-NNNNN{SHARD_SUFFIX}) or a "
                    f"customer file ({{customer_id}}{CUSTOMER_FILE_SUFFIX} with 1 to 64 "
                    "letters, digits, '_' or '-')",
                )
            )
    unpacked = unpack_parts(parts, unpack_to)
    known = {c.customer_id for c in customers}
    for customer_id, (path, rows) in sorted(unpacked.series.items()):
        if customer_id in known:
            unpacked.problems.append((customer_id, "has a part's rows and a file of its own"))
            continue
        # Rows x 16 bytes: the size of the CSV it replaces orders batches the same way.
        customers.append(CustomerFile(customer_id, path, rows * 16))
    twice = {name for name, _ in unpacked.problems} & known
    customers = [c for c in customers if c.customer_id not in twice]
    for name, problem in unpacked.problems:
        kind = (
            FailureKind.UNREADABLE if name.endswith(SHARD_SUFFIX) else FailureKind.INVALID_FILE_NAME
        )
        rejected.append(CustomerReport.failed(name, kind, f"{name!r} {problem}"))
    if not customers and not rejected and hosts == 1:
        raise JobFailure(
            f"no training data: the '{TRAIN_CHANNEL}' channel has no files "
            f"(expected part-NNNNN{SHARD_SUFFIX})"
        )
    if not customers and not rejected:
        # ShardedByS3Key gives an instance nothing when there are more instances than parts.
        logger.warning("this instance's shard is empty: nothing to train")
    return customers, rejected, unpacked.run_last_period


def fleet_teachers(channel_dir: Path, unpack_to: Path, own: set[str]) -> list[CustomerFile]:
    """The stored customers processing sent for the fleet family to learn from beyond
    the shard's own (contracts.training.FLEET_CHANNEL), unpacked; none when the run has
    no such channel (a run processed before it) or nothing in it can be read."""
    if not channel_dir.is_dir():
        return []
    unpacked = unpack_parts(sorted(channel_dir.glob(f"*{SHARD_SUFFIX}")), unpack_to)
    for name, problem in unpacked.problems:
        logger.warning("a fleet teachers' file %s %s: the fleet learns without it", name, problem)
    return [
        CustomerFile(customer_id, path, rows * 16)
        for customer_id, (path, rows) in sorted(unpacked.series.items())
        if customer_id not in own
    ]


def _fitting(customers: list[CustomerFile]) -> list[CustomerFile]:
    """The customers with at least one period to fit (a customer whose series cannot be
    read is left to its own fit to say what is wrong with it). Their histories are read
    again, one at a time, as the fleet learns: a shard's are never all held at once."""
    found: list[CustomerFile] = []
    for customer in customers:
        with contextlib.suppress(Exception):
            if len(read_series(customer.path).for_fitting()):
                found.append(customer)
    return found


def fleet_learns(hyperparameters: Hyperparameters) -> bool:
    """The fleet family is a candidate of this model."""
    return fleet.KIND in hyperparameters.candidates


def learn_fleet(
    customers: list[CustomerFile],
    hyperparameters: Hyperparameters,
    calendars: CustomerCalendars,
    teachers: list[CustomerFile] | None = None,
) -> dict[str, FleetForecast]:
    """The fleet family's forecasts of the shard's customers (fleetcast_training.fleet),
    learnt from them and the stored ``teachers``, when it is a candidate of a daily model;
    none when it cannot learn (it is one candidate: the others are fitted whatever
    happens to it)."""
    if not fleet_learns(hyperparameters):
        return {}
    usable = _fitting(customers)
    extra = _fitting(teachers or [])
    learners = usable + extra
    try:
        # (fleet.learn's trees fit on one thread: their samples are tens of thousands,
        # and LightGBM's OpenMP threads, spinning while they wait for each other, cost
        # more CPU than they save: a 120-customer shard's fleet took 19 to 79 ms of CPU
        # a customer on 2 shared cores with 2 threads, 10 to 16 with one, its import
        # included; the fit is a second or two of the job's wall time)
        with threadpool_limits(limits=1):
            return fleet.learn(
                [c.customer_id for c in usable],
                (read_series(c.path).for_fitting() for c in learners),
                [calendars.of(c.customer_id) for c in learners],
                hyperparameters.backtest_periods,
                hyperparameters.backtest_windows,
                teachers=len(extra),
                frequency=hyperparameters.frequency,
            )
    except Exception:
        logger.warning("the fleet family could not learn: it is left out", exc_info=True)
        return {}


def train_customers(
    customers: list[CustomerFile],
    hyperparameters: Hyperparameters,
    checkpoint_dir: Path,
    workers: int,
    progress: Progress,
    reports: ShardResults,
    calendars: CustomerCalendars | None = None,
    run_last_period: np.datetime64 | None = None,
    teachers: list[CustomerFile] | None = None,
) -> None:
    """Train every customer, adding its report to ``reports``; never lets one customer
    stop the others.

    A worker process that dies (killed when out of memory, say) breaks the whole pool and
    takes its batch with it. The customers then in flight become suspects and the rest
    continue in a new pool; the suspects are retried last, one at a time in a pool of one,
    so only a customer that kills its worker on its own is recorded as failed.
    """
    if not customers:
        return
    fleet_forecasts = learn_fleet(
        customers, hyperparameters, calendars or CustomerCalendars(), teachers
    )
    pool = WorkerPool(
        hyperparameters,
        checkpoint_dir,
        scratch_parent(workers),
        calendars,
        run_last_period,
        fleet_forecasts,
    )
    try:
        queue = sorted(customers, key=lambda c: (-c.size, c.customer_id))
        # Prophet fits one customer of typical size here first: the workers fork after it
        # and start with its model shape's template instead of each paying Prophet's
        # preprocessing for it (fleetcast_training.grid_fit).
        pool.warm_up(queue[len(queue) // 2])
        suspects: list[CustomerFile] = []
        while queue:
            size = batch_size(len(queue), workers, hyperparameters.frequency is Frequency.HOURLY)
            in_flight = pool.run(queue, workers, size, reports, progress)
            unfinished = [c for c in queue if c.customer_id not in reports]
            if in_flight is None:
                break
            logger.warning("a worker process died while training %s", ", ".join(sorted(in_flight)))
            suspects += [c for c in unfinished if c.customer_id in in_flight]
            queue = [c for c in unfinished if c.customer_id not in in_flight]
            if not in_flight:
                # Died between customers (in start-up, say): nobody to blame, nothing learnt.
                suspects += queue
                queue = []
        while suspects:
            in_flight = pool.run(suspects, 1, 1, reports, progress)
            if in_flight is None:
                break
            # Alone in the pool, the customer in flight is the one that killed its worker.
            # With none in flight the worker dies starting up: retrying would never end.
            culprits = in_flight or {
                c.customer_id for c in suspects if c.customer_id not in reports
            }
            for customer_id in sorted(culprits):
                reports.add(
                    CustomerReport.failed(
                        customer_id,
                        FailureKind.WORKER_DIED,
                        "the worker process died while training this customer alone "
                        "(out of memory?)",
                    )
                )
            progress.advance(len(culprits))
            suspects = [c for c in suspects if c.customer_id not in reports]
    finally:
        pool.close()


def _remove_partial_files(checkpoint_dir: Path) -> None:
    """Half-written archives and manifests from an interrupted attempt; never valid."""
    for partial in checkpoint_dir.rglob(f"*{PARTIAL_SUFFIX}"):
        partial.unlink(missing_ok=True)
