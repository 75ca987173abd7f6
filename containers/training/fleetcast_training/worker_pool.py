"""The worker processes that train a shard's customers: one per CPU, forked from the
parent after it has trained one customer itself, so each starts with Prophet imported and
that customer's shape template made, and fed in small batches.

Each worker notes the customer it is training in its scratch directory: when one dies
(killed when out of memory, say) and breaks the pool, :meth:`WorkerPool.run` says which
customers were in flight, and the job (:func:`fleetcast_training.job.train_customers`)
decides what to retry.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import math
import multiprocessing
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from fleetcast_forecasters import families
from fleetcast_training.calendars import CustomerCalendars
from fleetcast_training.customer_training import CustomerReport, CustomerTrainer
from fleetcast_training.fleet import FleetForecast
from fleetcast_training.grid_fit import ShapeTemplates
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.progress import Progress
from fleetcast_training.shard_results import ShardResults
from fleetcast_training.stan_backend import silence_stan_logging

# A batch is the unit handed to a worker: big enough that inter-process traffic is
# negligible and that its export forecasts, made one after another at its end, find the
# CPU's caches warm (CustomerTrainer.train_batch); small enough (about 0.4 s of work at
# ~12 ms a customer) to keep every worker busy at the end.
MAX_BATCH = 32
BATCHES_PER_WORKER = 4
# Hourly models: the numpy families' recursions take a Python step per period whatever a
# batch's size (over their span, candidates.FIT_SEASONS: 16 weeks of hours and the
# backtest's, most of a small batch's CPU), so a shard is spread over the workers once, in
# batches as large as it allows.
HOURLY_BATCHES_PER_WORKER = 1


@dataclass(frozen=True)
class CustomerFile:
    """A customer's series as :func:`fleetcast_training.job.plan_shard` found it; ``size``
    (bytes) orders the batches, largest first."""

    customer_id: str
    path: Path
    size: int


def batch_size(customers: int, workers: int, hourly: bool = False) -> int:
    per_worker = HOURLY_BATCHES_PER_WORKER if hourly else BATCHES_PER_WORKER
    return max(1, min(MAX_BATCH, math.ceil(customers / (workers * per_worker))))


class WorkerPool:
    """Worker processes for one ``run`` at a time, each with a scratch directory where it
    notes the customer it is training, so a crash can be traced to its customer."""

    def __init__(
        self,
        hyperparameters: Hyperparameters,
        checkpoint_dir: Path,
        parent: Path | None,
        calendars: CustomerCalendars | None = None,
        run_last_period: np.datetime64 | None = None,
        fleet: Mapping[str, FleetForecast] | None = None,
    ):
        self._hyperparameters = hyperparameters
        self._calendars = calendars
        # The fleet family's forecasts, made before the workers fork (they inherit them).
        self._fleet = fleet
        self._run_last_period = run_last_period
        self._checkpoint_dir = checkpoint_dir
        self._root = Path(tempfile.mkdtemp(prefix="fleetcast-training-", dir=parent))
        self._shapes = ShapeTemplates()
        _import_before_fork()

    def warm_up(self, customer: CustomerFile) -> None:
        """Fit ``customer``'s Prophet model in this process, for the shape template the
        workers of every later ``run`` inherit (they fork from here); the customer is
        trained in a worker like the others. (Training it here, alone, cost a batch's
        numpy recursions for one customer: 0.4 s for two years of hours.)"""
        scratch = Path(tempfile.mkdtemp(prefix="parent-", dir=self._root))
        trainer = CustomerTrainer(
            self._hyperparameters,
            self._checkpoint_dir,
            scratch,
            self._calendars,
            self._shapes,
            run_last_period=self._run_last_period,
            fleet=self._fleet,
        )
        with threadpool_limits(limits=1):
            trainer.prepare(customer.customer_id, customer.path)

    def run(
        self,
        customers: list[CustomerFile],
        workers: int,
        batch_size: int,
        reports: ShardResults,
        progress: Progress,
    ) -> set[str] | None:
        """Add a report per finished customer to ``reports``. Return None when all
        finished, else the customers whose worker was training them when the pool broke."""
        scratch = Path(tempfile.mkdtemp(prefix="pool-", dir=self._root))
        batches = [customers[i : i + batch_size] for i in range(0, len(customers), batch_size)]
        broken = False
        # fork: workers start in milliseconds with Prophet already imported (spawn would
        # import it again in each). The parent has no threads of its own to fork.
        with (
            _heap_frozen(),
            ProcessPoolExecutor(
                max_workers=min(workers, len(batches)),
                mp_context=multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(
                    self._hyperparameters,
                    self._checkpoint_dir,
                    scratch,
                    self._calendars,
                    self._shapes,
                    self._run_last_period,
                    self._fleet,
                ),
            ) as executor,
        ):
            # No list of the futures is kept here: as_completed lets go of each one it
            # yields, so a finished batch's reports are freed once they are added.
            futures = (
                executor.submit(_train_batch, [(c.customer_id, c.path) for c in batch])
                for batch in batches
            )
            for future in as_completed(futures):
                try:
                    batch_reports: list[CustomerReport] = future.result()
                except BrokenProcessPool:
                    broken = True  # every unfinished future says so; keep the finished ones
                    continue
                for report in batch_reports:
                    reports.add(report)
                progress.advance(len(batch_reports))
        in_flight = {marker.read_text() for marker in scratch.glob(f"*/{_TRAINING_MARKER}")} - {""}
        shutil.rmtree(scratch, ignore_errors=True)
        return {c for c in in_flight if c not in reports} if broken else None

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)


def _import_before_fork() -> None:
    """What each worker's first batch would otherwise import for itself, once per job
    and worker: every serving family (the export compiles each model it archives; the
    serving side imports them on first use) and ISA-L (the archives' gzip). Imported here
    the workers inherit them: 10-15 ms of CPU per worker and job without compiled
    bytecode, a quarter of a millisecond a customer at 120 customers on 2 workers."""
    for kind in families.known_kinds():
        families.family(kind)
    importlib.import_module("isal.igzip")


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """The parent's objects left out of garbage collections while workers fork from it: a
    worker's collections would otherwise touch, and so copy, every page of the parent's
    heap (``gc.freeze``'s documented use)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


_TRAINING_MARKER = "training"
_trainer: CustomerTrainer | None = None
_marker: Path | None = None


def _start_worker(
    hyperparameters: Hyperparameters,
    checkpoint_dir: Path,
    pool_dir: Path,
    calendars: CustomerCalendars | None = None,
    shapes: ShapeTemplates | None = None,
    run_last_period: np.datetime64 | None = None,
    fleet: Mapping[str, FleetForecast] | None = None,
) -> None:
    global _trainer, _marker
    silence_stan_logging()
    # One BLAS thread per worker: the job already runs a worker per CPU, and the fits'
    # small matrix products on a pool of BLAS threads that spin-wait cost more CPU than
    # the products (60 ms of 105 ms per customer on 2 cores). The image sets
    # OPENBLAS_NUM_THREADS=1, and the local stack and make bench run a job with the image's
    # ENV; a job run anywhere else (a test) may not.
    threadpool_limits(limits=1)
    scratch = Path(tempfile.mkdtemp(prefix="worker-", dir=pool_dir))
    _marker = scratch / _TRAINING_MARKER
    _trainer = CustomerTrainer(
        hyperparameters,
        checkpoint_dir,
        scratch,
        calendars,
        shapes,
        run_last_period=run_last_period,
        fleet=fleet,
    )


def _train_batch(batch: list[tuple[str, Path]]) -> list[CustomerReport]:
    assert _trainer is not None and _marker is not None, "the worker initializer did not run"
    reports = _trainer.train_batch(batch, _marker.write_text)
    _marker.write_text("")
    return reports
