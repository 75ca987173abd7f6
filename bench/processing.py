"""Row 1: processing an upload into each customer's training input, fleetcast vs the pandas
group-by.

Both read the same uncompressed CSV. The baseline writes a ``{customer_id}.csv`` per
customer (daily totals, ``ds,y``); fleetcast writes its training parts and history shards
(``fleetcast_contracts.shards``); every customer's days and totals are compared.
fleetcast also validates every row, checks duplicates and writes the rejected-rows
report; the baseline does none of that. Every run is a fresh interpreter, as a processing
container is, started by this process; the two sides take turns on the same file.
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from bench.baselines import pandas_split
from bench.measure import (
    Row,
    Target,
    compare,
    peak_resident_bytes,
    ratio_at_least,
    reset_peak_resident,
    resident_bytes,
    taking_turns,
    timed,
)
from fleetcast.datagen import write_readings
from fleetcast_contracts.processing import ProcessingPaths
from fleetcast_processing.job import JobSettings, run

MIB = 2**20


@dataclass(frozen=True)
class ProcessingSizes:
    customers: int
    days: int
    # The large file has this many readings per customer-day: ``larger`` times the rows.
    larger: int
    repetitions: int
    large_repetitions: int


@dataclass(frozen=True)
class UploadFile:
    label: str
    path: Path
    rows: int


def write_uploads(folder: Path, sizes: ProcessingSizes) -> tuple[UploadFile, UploadFile]:
    daily = folder / "readings-daily.csv"
    larger = folder / f"readings-{sizes.larger}x.csv"
    rows = write_readings(daily, customers=sizes.customers, days=sizes.days)
    large_rows = write_readings(
        larger, customers=sizes.customers, days=sizes.days, readings_per_day=sizes.larger
    )
    return (
        UploadFile(f"{sizes.customers} customers x {sizes.days} days", daily, rows),
        UploadFile(f"{sizes.larger}x file, {sizes.larger} readings a day", larger, large_rows),
    )


def fleetcast_processing(upload: Path, root: Path) -> Path:
    """Run the processing job on ``upload`` with ``root`` as /opt/ml; return its train folder."""
    shutil.rmtree(root, ignore_errors=True)
    paths = ProcessingPaths.under(root)
    run(upload, JobSettings(paths=paths))
    return paths.train_output


def baseline_processing(upload: Path, folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    pandas_split(upload, folder)
    return folder


def check_same_files(ours: Path, theirs: Path) -> str:
    """Every customer of our training parts has the baseline file's days and totals (to
    float rounding), and no customer is missing on either side."""
    parts = customer_frames(ours)
    names = sorted(f"{customer_id}.csv" for customer_id in parts)
    if names != sorted(path.name for path in theirs.glob("*.csv")):
        raise AssertionError(f"different customers in {ours} and {theirs}")
    worst = 0.0
    for name in names:
        mine, other = parts[name.removesuffix(".csv")], pd.read_csv(theirs / name)
        if not mine["ds"].dt.strftime("%Y-%m-%d").reset_index(drop=True).equals(other["ds"]):
            raise AssertionError(f"{name}: different days")
        difference = np.abs(mine["y"].to_numpy() - other["y"].to_numpy())
        scale = np.maximum(np.abs(other["y"].to_numpy()), 1.0)
        worst = max(worst, float((difference / scale).max(initial=0.0)))
    if worst > 1e-9:
        raise AssertionError(f"daily totals differ by up to {worst:.2g} (relative)")
    return f"{len(names)} customers, same days, totals equal (max rel. diff {worst:.1g})"


def customer_frames(train_output: Path) -> dict[str, pd.DataFrame]:
    """Each customer's ``ds``, ``y`` in the training parts of ``train_output``."""
    table = pq.read_table(sorted(train_output.glob("*.parquet")))
    frame = table.to_pandas()
    return {
        str(customer_id): rows[["ds", "y"]].reset_index(drop=True)
        for customer_id, rows in frame.groupby("customer_id", sort=True)
    }


def customer_files(train_output: Path, folder: Path) -> Path:
    """The training parts as one ``{customer_id}.csv`` per customer in ``folder``: what the
    sequential baseline of row 2 reads."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for customer_id, frame in customer_frames(train_output).items():
        frame.to_csv(folder / f"{customer_id}.csv", index=False, date_format="%Y-%m-%d")
    return folder


@dataclass(frozen=True)
class JobRun:
    seconds: float
    # Resident memory the job added at its peak.
    peak_bytes: int


def _run_job(kind: str, upload: str, output: str) -> JobRun:
    logging.disable(logging.INFO)
    before = resident_bytes()
    reset_peak_resident()
    job = fleetcast_processing if kind == "fleetcast" else baseline_processing
    seconds = timed(partial(job, Path(upload), Path(output)))
    return JobRun(seconds, peak_resident_bytes() - before)


def fresh_job(kind: str, upload: Path, output: Path) -> JobRun:
    """One job in a fresh interpreter, as a processing container runs it once: its time
    (without the interpreter's start) and its peak memory (which a process that has run
    other jobs would understate: Arrow's allocator keeps what it frees)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as fresh:
        return fresh.submit(_run_job, kind, str(upload), str(output)).result()


def run_both(
    upload: UploadFile, ours_root: Path, theirs_root: Path, repetitions: int
) -> tuple[list[JobRun], list[JobRun]]:
    return taking_turns(
        repetitions,
        lambda _: fresh_job("fleetcast", upload.path, ours_root),
        lambda _: fresh_job("baseline", upload.path, theirs_root),
    )


def customer_files_for_training(folder: Path, sizes: ProcessingSizes) -> Path:
    """The folder of customer files row 2 trains on, without measuring row 1."""
    daily = folder / "readings-daily.csv"
    write_readings(daily, customers=sizes.customers, days=sizes.days)
    return customer_files(fleetcast_processing(daily, folder / "fleetcast"), folder / "customers")


def processing_rows(folder: Path, sizes: ProcessingSizes) -> tuple[list[Row], Path]:
    """Row 1, and the folder of customer files (daily upload) that training then uses."""
    daily, large = write_uploads(folder / "uploads", sizes)
    ours_root, theirs_root = folder / "fleetcast", folder / "baseline"
    rows = []
    peak: dict[tuple[str, str], float] = {}
    for upload, repetitions in ((daily, sizes.repetitions), (large, sizes.large_repetitions)):
        ours, theirs = run_both(upload, ours_root, theirs_root, repetitions)
        check = check_same_files(ours_root / "processing/output/train", theirs_root)
        peak["fleetcast", upload.label] = statistics.median(run.peak_bytes for run in ours)
        peak["baseline", upload.label] = statistics.median(run.peak_bytes for run in theirs)
        rows.append(
            compare(
                f"processing: {upload.label}",
                "rows/s",
                [upload.rows / run.seconds for run in ours],
                [upload.rows / run.seconds for run in theirs],
                higher_is_better=True,
                target=ratio_at_least(3),
                detail=f"{upload.rows:,} rows, {upload.path.stat().st_size / MIB:.1f} MiB of CSV; "
                "each run a fresh process, timed without the interpreter's start; fleetcast "
                "also validates every row, finds duplicates, writes the rejected-rows report "
                "and a history copy of each file",
                check=check,
            )
        )
    growth = {
        kind: peak[kind, large.label] / peak[kind, daily.label]
        for kind in ("fleetcast", "baseline")
    }
    rows.append(
        compare(
            f"processing: memory, {sizes.larger}x rows vs daily file",
            "x memory",
            [growth["fleetcast"]],
            [growth["baseline"]],
            higher_is_better=False,
            target=Target("at_most", sizes.larger, f"< {sizes.larger}x"),
            detail="peak resident memory the job adds (median of the runs above): "
            f"fleetcast {peak['fleetcast', daily.label] / MIB:.0f} → "
            f"{peak['fleetcast', large.label] / MIB:.0f} MiB, pandas "
            f"{peak['baseline', daily.label] / MIB:.0f} → "
            f"{peak['baseline', large.label] / MIB:.0f} MiB",
            figures={
                f"{kind}_{size}_mib": peak[kind, upload.label] / MIB
                for kind in ("fleetcast", "baseline")
                for size, upload in (("daily", daily), ("large", large))
            },
        )
    )
    train_output = fleetcast_processing(daily.path, ours_root)
    return rows, customer_files(train_output, folder / "customers")
