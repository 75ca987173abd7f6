"""The benchmark suite: every row, then the table, JSON and chart (``python -m bench``).

    .venv/bin/python -m bench                 # the full suite (make bench), a few minutes
    .venv/bin/python -m bench --smoke         # tiny sizes, checks only (make bench-smoke)

Rows, each against the public sample's way of doing it (bench/baselines.py):

1. processing (bench/processing.py): rows/s for the daily file and a file with ten times
   the rows, and how memory grows between them;
2. training (bench/training.py): models/s on one instance doing the same work, CPU time,
   the per-model time distribution and the share of a fit that is overhead, and (from
   make accuracy's results, bench/autogluon_cpu.py) CPU per customer against AutoGluon;
3. serving in the container (bench/serving.py): warm p50/p99, computed answers, cold
   load, memory for 1000 models;
4. and 5. the local stack (bench/pipeline.py): ``make demo``'s stage times, then the API's
   throughput and latency at concurrency 1, 8 and 32.

Every row's outputs are checked (identical daily totals, fitted parameters, forecasts);
a failed check stops the suite with an error. Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bench.autogluon_cpu import autogluon_cpu_rows
from bench.export import ExportSizes, export_rows
from bench.hourly import HourlySizes, hourly_rows
from bench.measure import Machine, Row
from bench.pipeline import PipelineSizes, pipeline_rows
from bench.processing import (
    ProcessingSizes,
    customer_files_for_training,
    processing_rows,
)
from bench.report import (
    draw_chart,
    print_table,
    readme_section,
    update_readme,
    write_results,
)
from bench.serving import ServingSizes, family_rows, hourly_serving_rows, serving_rows
from bench.training import TrainingSizes, training_rows
from fleetcast_training.stan_backend import silence_stan_logging

BENCH_DIR = Path(__file__).resolve().parent
ACCURACY_RESULTS = BENCH_DIR / "accuracy-results.json"


@dataclass(frozen=True)
class SuiteSizes:
    processing: ProcessingSizes
    training: TrainingSizes
    export: ExportSizes
    hourly: HourlySizes
    serving: ServingSizes
    pipeline: PipelineSizes


FULL = SuiteSizes(
    processing=ProcessingSizes(
        customers=1000, days=730, larger=10, repetitions=3, large_repetitions=2
    ),
    # Training every one of the 1000 customers on both sides would take ~10 minutes here:
    # an even sample of them, the same customers on both sides, in four slices of 120 (a
    # job's own start-up, a few tenths of a second of CPU, is then spread as it is on an
    # instance that trains thousands, not over a few dozen).
    training=TrainingSizes(customers=480, repetitions=4, overhead_samples=8),
    # Issue 15's budget is stated at 1000 customers: all of them, with and without, four
    # pairs (two readings gave 104% to 117% for the same code on this shared machine).
    export=ExportSizes(customers=1000, repetitions=4),
    # Each hourly customer is ~20 times a daily one's work: 40 of them, twice.
    hourly=HourlySizes(customers=40, repetitions=2),
    serving=ServingSizes(
        models=200,
        baseline_models=20,
        warm_requests=1000,
        baseline_requests=30,
        rounds=3,
        memory_models=1001,
        baseline_memory_models=201,
    ),
    pipeline=PipelineSizes(
        customers=1000,
        days=730,
        instances=2,
        api_customers=50,
        api_requests=300,
        api_rounds=3,
        endpoint_targets=20,
    ),
)

SMOKE = SuiteSizes(
    processing=ProcessingSizes(
        customers=12, days=400, larger=3, repetitions=1, large_repetitions=1
    ),
    training=TrainingSizes(customers=4, repetitions=2, overhead_samples=1),
    export=ExportSizes(customers=4, repetitions=2),
    hourly=HourlySizes(customers=2, repetitions=1),
    serving=ServingSizes(
        models=4,
        baseline_models=2,
        warm_requests=20,
        baseline_requests=2,
        rounds=2,
        memory_models=40,
        baseline_memory_models=12,
    ),
    pipeline=PipelineSizes(
        customers=3,
        days=400,
        instances=1,
        api_customers=3,
        api_requests=6,
        api_rounds=1,
        endpoint_targets=2,
    ),
)


def check_rows(rows: list[Row]) -> None:
    """Every row is complete and consistent: the smoke run's assertion on the output."""
    if not rows:
        raise AssertionError("no rows")
    for row in rows:
        if not row.name or not row.unit or row.repetitions < 1:
            raise AssertionError(f"incomplete row: {row}")
        for value in (row.fleetcast, row.baseline, row.ratio, row.spread):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise AssertionError(
                    f"{row.name}: figure {value} is not a finite, non-negative number"
                )
        if row.fleetcast is None:
            raise AssertionError(f"{row.name}: no figure for fleetcast")
        if (row.baseline is None) != (row.ratio is None):
            raise AssertionError(f"{row.name}: a ratio needs a baseline and the reverse")
        if row.target is not None and row.met is None:
            raise AssertionError(f"{row.name}: has a target but no verdict")
        if row.ratio is not None and row.repetitions == 1:
            assert row.baseline is not None
            expected = (
                row.fleetcast / row.baseline
                if row.higher_is_better
                else row.baseline / row.fleetcast
            )
            if not math.isclose(row.ratio, expected, rel_tol=1e-9):
                raise AssertionError(f"{row.name}: ratio {row.ratio} is not {expected}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the suite works")
    parser.add_argument("--results", type=Path, help="where to write the rows as JSON")
    parser.add_argument("--chart", type=Path, help="where to draw the PNG chart")
    parser.add_argument("--readme", type=Path, help="README whose Measured section to replace")
    parser.add_argument("--skip-stack", action="store_true", help="leave out rows 4 and 5")
    parser.add_argument(
        "--training-only",
        action="store_true",
        help="row 2 alone, on customer files the processing job writes unmeasured",
    )
    parser.add_argument(
        "--hourly-only", action="store_true", help="row 2c (hourly models' training) alone"
    )
    return parser


def _write_outputs(rows: list[Row], machine: Machine, options: argparse.Namespace) -> None:
    """The rows as JSON, their chart and the README's section, where asked for."""
    if options.results:
        write_results(rows, options.results)
    if options.chart:
        draw_chart(rows, machine, options.chart)
    if options.readme:
        chart = options.chart or BENCH_DIR / "results.png"
        results = options.results or BENCH_DIR / "results.json"
        root = options.readme.resolve().parent
        update_readme(
            options.readme,
            readme_section(
                rows,
                machine,
                str(chart.resolve().relative_to(root)),
                str(results.resolve().relative_to(root)),
            ),
        )


def main() -> int:
    options = _parser().parse_args()
    sizes = SMOKE if options.smoke else FULL
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    silence_stan_logging()
    # Wide enough for the table when the output is a file or a pipe (make, CI logs).
    console = Console(width=None if sys.stdout.isatty() else 200)
    machine = Machine.describe()
    began = time.perf_counter()
    rows: list[Row] = []
    durations: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="fleetcast-bench-") as folder:
        scratch = Path(folder)
        started = time.perf_counter()
        if options.hourly_only:
            with console.status("rows 2c and 3c: hourly models"):
                rows, hourly = hourly_rows(scratch / "hourly", sizes.hourly)
                rows += hourly_serving_rows(hourly, scratch / "hourly", sizes.serving)
            print_table(rows, machine, console)
            for row in rows:
                console.print(f"- {row.name}: {row.detail} Check: {row.check}")
            return 0
        if options.training_only:
            with console.status("row 2: training"):
                customer_files = customer_files_for_training(scratch, sizes.processing)
                rows, _, _ = training_rows(customer_files, scratch / "training", sizes.training)
            with console.status("row 2b: the forecast export's share of training"):
                rows += export_rows(customer_files, scratch / "export", sizes.export)
            with console.status("row 2c: hourly models"):
                rows += hourly_rows(scratch / "hourly", sizes.hourly)[0]
            rows += autogluon_cpu_rows(ACCURACY_RESULTS)
            print_table(rows, machine, console)
            for row in rows:
                console.print(
                    f"- {row.name}: {row.detail}" + (f" Check: {row.check}" if row.check else "")
                )
            return 0
        with console.status("row 1: processing"):
            processing, customer_files = processing_rows(scratch / "processing", sizes.processing)
        rows += processing
        durations["processing"] = time.perf_counter() - started
        with console.status("row 2: training"):
            training, served, archives = training_rows(
                customer_files, scratch / "training", sizes.training
            )
        rows += training
        with console.status("row 2b: the forecast export's share of training"):
            rows += export_rows(customer_files, scratch / "export", sizes.export)
        with console.status("row 2c: hourly models"):
            hourly_training, hourly = hourly_rows(scratch / "hourly", sizes.hourly)
        rows += hourly_training
        rows += autogluon_cpu_rows(ACCURACY_RESULTS)
        durations["training"] = time.perf_counter() - started - sum(durations.values())
        with console.status("row 3: serving in the container"):
            rows += serving_rows(archives, scratch / "serving", sizes.serving)
            rows += family_rows(served, scratch / "families", sizes.serving)
            rows += hourly_serving_rows(hourly, scratch / "hourly-serving", sizes.serving)
        durations["serving"] = time.perf_counter() - started - sum(durations.values())
        if not options.skip_stack:
            with console.status("rows 4 and 5: the pipeline and its API on the local stack"):
                rows += pipeline_rows(scratch / "pipeline", sizes.pipeline)
            durations["local stack"] = time.perf_counter() - started - sum(durations.values())
    check_rows(rows)
    print_table(rows, machine, console)
    console.print(
        f"[dim]suite took {time.perf_counter() - began:.0f} s: "
        + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in durations.items())
        + "[/]"
    )
    _write_outputs(rows, machine, options)
    return 0
