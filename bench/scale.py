"""``make scale``: a whole fleet end to end on the local stack, measured and checked.

Generates ``--customers`` x ``--days`` of daily readings, uploads them, and follows the
run through processing, training and registration; then uploads one new day for
``--incremental`` of the customers and checks that exactly those are retrained, each on
its whole history; then asks the forecast API for a sample of customers. It prints and
writes (``--results``, JSON) the stage times, the S3 requests by kind per customer, the
peak memory of each process of the stack, and each function's longest invocation against
its timeout.

Exit code 1 when any customer is lost (processed but not live), when a forecast fails, or
when a function came within ``--margin`` (25%) of its timeout.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from fleetcast import datagen
from fleetcast.demo import follow_with_progress
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.serving_cli import API_KEY_ENV, API_URL_ENV, ForecastApi, ServingError
from fleetcast.status import RunStatus, run_ids, wait_for_new_run
from fleetcast_contracts import layout
from fleetcast_contracts.stages import PROCESSING, TRAINING

FIRST_DAY = date(2022, 1, 1)
GIB = 2**30
# Per-customer work happens in the jobs and the chunks: the rest of a run is fixed.
TIMEOUT_MARGIN = 0.25
console = Console()


# -- what the stack did -----------------------------------------------------------------


class S3Requests:
    """Counts the AWS requests moto answers, S3's by method and by what the key is, and
    the objects the local stack writes in process in SageMaker's place (checkpoints,
    outputs), which on AWS are PUT requests too."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def wrap(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        def counted(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            kind = _kind(environ)
            if kind is not None:
                self._count(kind)
            return app(environ, start_response)

        return counted

    def written(self, method: str, bucket: str, key: str) -> None:
        """A ``Gateway.observe_s3_writes`` observer."""
        self._count(_kind_of(method, f"/{bucket}/{key}", ""))

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.counts)


def _kind(environ: dict[str, Any]) -> str | None:
    """``"PUT models/"`` and the like for an S3 request (path-style), None for others."""
    if "/s3/aws4_request" not in environ.get("HTTP_AUTHORIZATION", ""):
        return None
    return _kind_of(
        environ.get("REQUEST_METHOD", "?"),
        environ.get("PATH_INFO", "/"),
        environ.get("QUERY_STRING", ""),
    )


def _kind_of(method: str, path: str, query: str) -> str:
    parts = path.lstrip("/").split("/")
    key = parts[1:] if len(parts) > 1 else []
    if not key or key == [""]:
        listing = "LIST" if method == "GET" and "list-type" in query else method
        return f"{listing} (bucket)"
    if key[0] == layout.RUNS_PREFIX.rstrip("/") and len(key) > 2:
        where = f"runs/*/{key[2]}/"
    else:
        where = f"{key[0]}/"
    return f"{method} {where}"


@dataclass
class MemoryPeaks:
    """Peak resident memory (RSS) of each process in this process's tree, and of all of
    them at once, sampled every ``interval`` seconds. All at once is the sum of their
    proportional set sizes (PSS): pages shared by processes (a forkserver's children share
    its imports, the training workers their parent's) counted once, not once each as a
    sum of RSS would.

    A process's PSS costs the kernel a walk of its pages (a round of the stack's 14
    processes took 45 ms of CPU at 40,000 customers: 9% of a core every half second, taken
    from the stack it measures on a 2-core machine); its RSS costs nothing. So each round
    reads every RSS, and the PSS only where the tree may be at a new peak: while the RSS
    total is below the one of the round that set the peak and its shares have not moved
    (``repss`` seconds at most), the PSS total is taken to be below the peak too."""

    interval: float = 0.5
    # A round's PSS is read at least this often, whatever the RSS says.
    repss: float = 5.0
    by_process: dict[str, int] = field(default_factory=dict)
    tree: int = 0
    # At the moment of ``tree``: each kind of process's share (PSS, summed over its kind).
    at_peak: dict[str, int] = field(default_factory=dict)
    # The RSS total of the round that read the PSS last with the tree at its peak.
    _rss_at_peak: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="memory-peaks")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        me = psutil.Process()
        last_pss = 0.0
        while not self._stop.wait(self.interval):
            resident: list[tuple[psutil.Process, str, int]] = []
            for process in [me, *me.children(recursive=True)]:
                try:
                    rss = process.memory_info().rss
                    cmdline = process.cmdline()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if not cmdline:
                    continue  # a child that has exited and not yet been waited for
                label = _label(cmdline)
                self.by_process[label] = max(self.by_process.get(label, 0), rss)
                resident.append((process, label, rss))
            rss_total = sum(rss for _, _, rss in resident)
            now = time.monotonic()
            if rss_total <= self._rss_at_peak and now - last_pss < self.repss:
                continue
            last_pss = now
            shares: dict[str, int] = {}
            for process, label, _ in resident:
                try:
                    shares[label] = shares.get(label, 0) + process.memory_full_info().pss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            if sum(shares.values()) > self.tree:
                self.tree, self.at_peak = sum(shares.values()), shares
                self._rss_at_peak = rss_total


def _label(cmdline: Sequence[str]) -> str:
    """What a process of the stack is, from its command line."""
    text = " ".join(cmdline)
    for marker, label in (
        ("fleetcast_processing", "processing container"),
        ("fleetcast_training", "training container"),
        ("fleetcast_inference", "inference container"),
        ("multiprocessing.spawn", "function worker"),
        ("multiprocessing.forkserver", "forkserver and the function workers it forks"),
        ("multiprocessing.resource_tracker", "multiprocessing resource tracker"),
    ):
        if marker in text:
            return label
    return "local stack (moto, runner, this script)" if "bench" in text else text[:60]


# -- the run ----------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    seconds: float
    detail: str


@dataclass
class Results:
    customers: int
    days: int
    instances: int
    stages: list[Stage] = field(default_factory=list)
    s3_requests: dict[str, int] = field(default_factory=dict)
    s3_requests_per_customer: dict[str, float] = field(default_factory=dict)
    peak_memory_mib: dict[str, float] = field(default_factory=dict)
    peak_memory_tree_mib: float = 0.0
    # What the whole stack's peak was made of: each kind of process's PSS then, summed.
    peak_memory_tree_by_kind_mib: dict[str, float] = field(default_factory=dict)
    functions: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def run_once(
    stack: EmbeddedStack, data: Path, key: str, expected: int, results: Results, label: str
) -> RunStatus:
    """Upload ``data`` and follow its run to the end, adding its stages to ``results``."""
    assert stack.info is not None
    sagemaker = stack.client("sagemaker")
    known = run_ids(stack.info.job_name_prefix, sagemaker)
    started = time.perf_counter()
    stack.client("s3").upload_file(str(data), stack.info.raw_bucket, key)
    run_id = wait_for_new_run(stack.info.job_name_prefix, sagemaker, known)
    # At 100k customers a run takes an hour on two cores before the training engine lands.
    status = follow_with_progress(stack, run_id, console, expected, timeout=6 * 3600)
    results.stages += [
        Stage(
            f"{label}: processing",
            status.job(PROCESSING).seconds or 0.0,
            f"{status.rows_read or 0:,} rows, {status.customers_processed or 0:,} customers",
        ),
        Stage(
            f"{label}: training",
            status.job(TRAINING).seconds or 0.0,
            f"{status.job(TRAINING).instances} instances, {status.customers_trained or 0:,} trained, "
            f"{status.customers_failed or 0} failed",
        ),
        Stage(
            f"{label}: whole run",
            time.perf_counter() - started,
            f"{status.customers_registered:,} live of {status.customers_decided:,} decided, "
            f"registration {status.registration}",
        ),
    ]
    if not status.completed:
        results.problems.append(f"{label}: the run did not complete: {status.failure}")
    if status.customers_processed != expected:
        results.problems.append(
            f"{label}: {expected:,} customers uploaded, {status.customers_processed} processed"
        )
    # Every customer processed is trained or failed with a reason, and every one trained
    # is decided (live, or kept back by the quality gate, saying so): none is lost.
    processed = status.customers_processed or 0
    trained, failed = status.customers_trained or 0, status.customers_failed or 0
    lost = status.customers_lost or 0
    if lost or processed != trained + failed + lost or status.customers_decided != trained:
        results.problems.append(
            f"{label}: {processed:,} processed, {trained:,} trained, {failed:,} failed, "
            f"{lost:,} lost, {status.customers_decided:,} decided"
        )
    return status


def check_incremental(
    stack: EmbeddedStack, run_id: str, touched: list[str], results: Results
) -> None:
    """The incremental run trained exactly ``touched``, each on its whole stored history."""
    assert stack.info is not None
    s3, bucket = stack.client("s3"), stack.info.artifacts_bucket
    trained: Counter[str] = Counter()
    for key in _keys(s3, bucket, layout.train_prefix(run_id)):
        table = _parquet(s3, bucket, key, ["customer_id"])
        trained.update(table.column("customer_id").to_pylist())
    if set(trained) != set(touched):
        results.problems.append(
            f"incremental: trained {len(trained):,} customers, uploaded {len(touched):,}"
        )
    stored: Counter[str] = Counter()
    wanted = pa.array(touched, pa.string())
    for key in _keys(s3, bucket, layout.HISTORY_PREFIX):
        ids = _parquet(s3, bucket, key, ["customer_id"]).column("customer_id")
        stored.update(ids.filter(pc.is_in(ids, value_set=wanted)).to_pylist())
    short = [c for c in touched if trained[c] != stored[c]]
    if short:
        results.problems.append(
            f"incremental: {len(short)} customers trained on other than their whole history, "
            f"e.g. {short[0]}: {trained[short[0]]} rows of {stored[short[0]]}"
        )


def _keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", []) if o["Key"].endswith(".parquet")]
    return keys


def _parquet(s3: Any, bucket: str, key: str, columns: list[str]) -> Any:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body), columns=columns)


def sample_forecasts(stack: EmbeddedStack, customers: list[str], results: Results) -> None:
    assert stack.info is not None
    api = ForecastApi(stack.info.extra[API_URL_ENV], stack.info.extra[API_KEY_ENV])
    started, failed = time.perf_counter(), []
    for customer_id in customers:
        try:
            forecast = api.forecast(customer_id, 7)
            if len(forecast["forecast"]) != 7:
                failed.append(f"{customer_id}: {len(forecast['forecast'])} days")
        except ServingError as error:
            failed.append(f"{customer_id}: {error}")
    results.stages.append(
        Stage(
            "forecasts through the API",
            time.perf_counter() - started,
            f"{len(customers) - len(failed)} of {len(customers)} customers answered",
        )
    )
    if failed:
        results.problems.append(f"forecasts: {len(failed)} failed, e.g. {failed[0]}")


def function_report(stack: EmbeddedStack, results: Results, margin: float) -> None:
    for logical_id, function in sorted(stack.functions.items()):
        calls = function.invocations
        results.functions[logical_id] = {
            "invocations": calls.count,
            "longest_seconds": round(calls.longest, 3),
            "timeout_seconds": function.timeout,
            "share_of_timeout": round(calls.longest / function.timeout, 3),
        }
        if calls.longest > (1 - margin) * function.timeout:
            results.problems.append(
                f"{logical_id}: longest invocation {calls.longest:.1f} s, within "
                f"{margin:.0%} of its {function.timeout:.0f} s timeout"
            )


def show(results: Results) -> None:
    stages = Table(
        title=f"fleetcast scale run: {results.customers:,} customers x {results.days} days"
    )
    for column in ("stage", "seconds", "detail"):
        stages.add_column(column, justify="right" if column == "seconds" else "left")
    for stage in results.stages:
        stages.add_row(stage.name, f"{stage.seconds:,.1f}", stage.detail)
    console.print(stages)
    requests = Table(title="S3 requests (both runs)")
    for column in ("kind", "requests", "per customer"):
        requests.add_column(column, justify="left" if column == "kind" else "right")
    for kind, count in sorted(results.s3_requests.items(), key=lambda item: -item[1]):
        requests.add_row(kind, f"{count:,}", f"{results.s3_requests_per_customer[kind]:.3f}")
    console.print(requests)
    memory = Table(
        title=(
            f"peak memory (whole stack at once, shared pages once: "
            f"{results.peak_memory_tree_mib:,.0f} MiB)"
        )
    )
    memory.add_column("process")
    memory.add_column("its own peak MiB (RSS)", justify="right")
    memory.add_column("at the stack's peak MiB (PSS, all of its kind)", justify="right")
    for label, mib in sorted(results.peak_memory_mib.items(), key=lambda item: -item[1]):
        share = results.peak_memory_tree_by_kind_mib.get(label)
        memory.add_row(label, f"{mib:,.0f}", "-" if share is None else f"{share:,.0f}")
    console.print(memory)
    functions = Table(title="functions: longest invocation against the timeout")
    for column in ("function", "invocations", "longest s", "timeout s", "share"):
        functions.add_column(column, justify="left" if column == "function" else "right")
    for name, figures in results.functions.items():
        functions.add_row(
            name,
            f"{figures['invocations']:,.0f}",
            f"{figures['longest_seconds']:.2f}",
            f"{figures['timeout_seconds']:.0f}",
            f"{figures['share_of_timeout']:.0%}",
        )
    console.print(functions)
    for problem in results.problems:
        console.print(f"[red]problem:[/] {problem}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--incremental", type=float, default=0.01, help="share of the fleet")
    parser.add_argument("--sample", type=int, default=20, help="forecasts asked through the API")
    parser.add_argument("--margin", type=float, default=TIMEOUT_MARGIN)
    parser.add_argument("--results", type=Path, default=Path("bench/scale-results.json"))
    parser.add_argument("--state-dir", type=Path, default=None)
    return parser


def _record_peaks(
    results: Results, requests: S3Requests, memory: MemoryPeaks, customers: int
) -> None:
    """The S3 requests counted and the memory peaks, into ``results``."""
    counts = requests.snapshot()
    results.s3_requests = dict(counts)
    results.s3_requests_per_customer = {kind: count / customers for kind, count in counts.items()}
    results.peak_memory_mib = {label: rss / 2**20 for label, rss in memory.by_process.items()}
    results.peak_memory_tree_mib = memory.tree / 2**20
    results.peak_memory_tree_by_kind_mib = {
        label: pss / 2**20 for label, pss in memory.at_peak.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    results = Results(customers=args.customers, days=args.days, instances=args.instances)
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="fleetcast-scale-"))
    memory, requests = MemoryPeaks(), S3Requests()
    memory.start()
    began = time.perf_counter()
    stack = EmbeddedStack(
        state_dir=state_dir,
        port=0,
        parameters={"TrainingInstanceCount": str(args.instances)},
        keep_state=False,
    )
    with console.status("starting the local stack"):
        stack.start()
    assert stack.gateway is not None and stack.info is not None
    stack.gateway.wrap_aws_app(requests.wrap)
    stack.gateway.observe_s3_writes(requests.written)
    results.stages.append(Stage("start local stack", time.perf_counter() - began, ""))
    try:
        data = state_dir / "scale" / "readings.csv.gz"
        started = time.perf_counter()
        with console.status(f"generating {args.customers:,} customers x {args.days} days"):
            rows = datagen.write_readings(data, customers=args.customers, days=args.days)
        results.stages.append(
            Stage(
                "generate",
                time.perf_counter() - started,
                f"{rows:,} readings, {data.stat().st_size / 1e6:,.0f} MB gzip",
            )
        )
        run_once(stack, data, "incoming/scale.csv.gz", args.customers, results, "full")

        touched_count = max(1, round(args.customers * args.incremental))
        touched = sorted(random.Random(7).sample(range(args.customers), touched_count))
        ids = [str(customer) for customer in touched]
        new_day = state_dir / "scale" / "next-day.csv.gz"
        datagen.write_readings(
            new_day,
            customer_ids=ids,
            start=FIRST_DAY + timedelta(days=args.days),
            days=1,
            gap_rate=0.0,
        )
        status = run_once(
            stack,
            new_day,
            "incoming/next-day.csv.gz",
            len(ids),
            results,
            f"{args.incremental:.0%} incremental",
        )
        check_incremental(stack, status.run_id, ids, results)
        sample_forecasts(stack, random.Random(11).sample(ids, min(args.sample, len(ids))), results)
        function_report(stack, results, args.margin)
    finally:
        with console.status("stopping the local stack"):
            stack.stop()
        memory.stop()
    results.stages.append(Stage("total", time.perf_counter() - began, ""))
    _record_peaks(results, requests, memory, args.customers)
    show(results)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(asdict(results), indent=1) + "\n")
    console.print(f"results: {args.results}")
    return 1 if results.problems else 0


if __name__ == "__main__":
    sys.exit(main())
