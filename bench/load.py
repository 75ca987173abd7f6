"""``make load``: a bounded load test of the forecast API on the embedded local stack.

Starts the stack, trains every customer's model through the real pipeline, restarts the
endpoint's container with a memory budget that holds a third of the models, asks for
every customer's forecast once (the warm-up: each archive reaches the instance's disk, as
a while of traffic would have done), then runs ``--clients`` concurrent clients (aiohttp,
in a process of their own, one kept-alive connection each) for ``--seconds`` against
``GET /customers/{id}/forecast?period=N``, each request for a customer drawn uniformly
from all of them, so about two in three find their model unloaded. Prints throughput,
p50/p99 latency, answers by status, the endpoint's loads and unloads, and the peak
memory of the container, the Lambda workers and the stack, against their budgets.

Expected answers: 200 with the customer's own forecast, and 503 with Retry-After (the
endpoint's "model not ready, retry" while loads and unloads churn through a cache a third
the size of the fleet); a client honours Retry-After as the API asks. Anything else (a
5xx without Retry-After, a 4xx, a forecast for another customer, a timeout) is
unexpected, as is memory over a budget: the exit status is then 1.

The usage plan's throttle and quota are raised for the run (as in bench/api_serving.py):
one key sends all the traffic, and the test measures serving, not the throttle.

    .venv/bin/python bench/load.py --customers 1000 --clients 50 --seconds 60
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from tempfile import TemporaryDirectory

from fleetcast.datagen import write_readings
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import follow_run, run_ids, wait_for_new_run
from fleetcast_common.registry import ModelRegistry

LIMITS = {
    "ApiThrottleRateLimit": "10000",
    "ApiThrottleBurstLimit": "5000",
    "ApiQuotaLimit": "100000000",
}
PERIODS = (1, 7, 14, 30)
MIB = 2**20
# Container memory that is not the models': request threads, a load's JSON parsing,
# the allocator's per-thread arenas (tests/e2e/test_serving.py measures ~31 MiB).
CONTAINER_RSS_ALLOWANCE = 48 * MIB
REQUEST_TIMEOUT_SECONDS = 30


# ---------------------------------------------------------------- the clients (own process)


@dataclass
class Outcome:
    status: int  # 0: no answer (timeout, connection error)
    latency_ms: float
    retry_after: bool = False
    right_customer: bool = True


async def _get(
    session: object, url: str, key: str, customer: str, period: int
) -> tuple[Outcome, float]:
    """One forecast request: its outcome, and the Retry-After it asked for (0: none)."""
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    started = time.perf_counter()
    try:
        async with session.get(
            f"{url}/customers/{urllib.parse.quote(customer)}/forecast",
            params={"period": str(period)},
            headers={"x-api-key": key},
        ) as response:
            body = await response.read()
            outcome = Outcome(response.status, (time.perf_counter() - started) * 1000)
            if response.status == 200:
                outcome.right_customer = json.loads(body).get("customer_id") == customer
            retry_after = response.headers.get("Retry-After", "")
            outcome.retry_after = retry_after.isdigit()
            return outcome, float(retry_after) if outcome.retry_after else 0.0
    except (aiohttp.ClientError, TimeoutError):
        return Outcome(0, (time.perf_counter() - started) * 1000), 0.0


async def _client(
    session: object, url: str, key: str, customers: list[str], deadline: float, seed: int
) -> list[Outcome]:
    draw = random.Random(seed)
    outcomes: list[Outcome] = []
    while time.monotonic() < deadline:
        outcome, retry_after = await _get(
            session, url, key, draw.choice(customers), draw.choice(PERIODS)
        )
        outcomes.append(outcome)
        if outcome.status == 503 and retry_after:
            # As the API asks; the wait is part of no request's latency.
            await asyncio.sleep(min(retry_after, 5.0))
    return outcomes


async def _warm_up(
    session: object, url: str, key: str, customers: list[str], clients: int
) -> list[Outcome]:
    """Every customer once, ``clients`` at a time: each archive downloaded to the
    instance's disk once, as a while of traffic would have done."""
    pending = list(customers)
    outcomes: list[Outcome] = []

    async def one_client() -> None:
        while pending:
            customer = pending.pop()
            for _ in range(10):
                outcome, retry_after = await _get(session, url, key, customer, 7)
                outcomes.append(outcome)
                if not (outcome.status == 503 and retry_after):
                    break
                await asyncio.sleep(min(retry_after, 5.0))

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return outcomes


async def _clients(
    url: str, key: str, customers: list[str], clients: int, seconds: float, results: Connection
) -> None:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.monotonic()
        warm = await _warm_up(session, url, key, customers, clients)
        results.send((time.monotonic() - started, _as_tuples(warm)))
        deadline = time.monotonic() + seconds
        runs = [_client(session, url, key, customers, deadline, seed) for seed in range(clients)]
        results.send(
            _as_tuples([outcome for run in await asyncio.gather(*runs) for outcome in run])
        )


def _as_tuples(outcomes: list[Outcome]) -> list[tuple[int, float, bool, bool]]:
    return [(o.status, o.latency_ms, o.retry_after, o.right_customer) for o in outcomes]


def run_clients(
    url: str, key: str, customers: list[str], clients: int, seconds: float, results: Connection
) -> None:
    """The client process: the warm-up's duration and outcomes, then the timed run's
    outcomes, back through ``results`` as each is done."""
    asyncio.run(_clients(url, key, customers, clients, seconds, results))
    results.close()


# ---------------------------------------------------------------- memory


def _status_fields(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes (empty once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    return {
        name: int(fields[name].split()[0]) * 1024 for name in ("VmRSS", "VmHWM") if name in fields
    }


def _function_workers(pid: int) -> list[int]:
    """The Lambda workers of the stack in process ``pid``: the children of its
    multiprocessing forkserver, which forks every worker
    (:func:`fleetcast.embedded.lambdas.worker_context`), as they are now (a function
    starts a worker when its invocations find every one busy)."""
    return [
        worker for child in _children(pid) if _is_forkserver(child) for worker in _children(child)
    ]


def _is_forkserver(pid: int) -> bool:
    try:
        return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


@dataclass
class MemoryWatch:
    """Peak resident memory of the stack's processes while the load runs, sampled."""

    roles: dict[int, str]
    # Called at each sample: processes started since, watched as Lambda workers.
    workers: Callable[[], list[int]] | None = None
    peaks: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self._sample_once()

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            self._sample_once()

    def _sample_once(self) -> None:
        for worker in self.workers() if self.workers else ():
            self.roles.setdefault(worker, "worker")
        for pid in self.roles:
            rss = _status_fields(pid).get("VmRSS", 0)
            self.peaks[pid] = max(self.peaks.get(pid, 0), rss)


# ---------------------------------------------------------------- the run


def train(stack: EmbeddedStack, customers: int, folder: Path) -> list[str]:
    assert stack.info is not None
    info = stack.info
    data = folder / "readings.csv.gz"
    write_readings(data, customers=customers, days=400)
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    known = run_ids(info.job_name_prefix, sagemaker)
    s3.upload_file(str(data), info.raw_bucket, "incoming/readings.csv.gz")
    follow_run(
        wait_for_new_run(info.job_name_prefix, sagemaker, known),
        info.job_name_prefix,
        info.artifacts_bucket,
        sagemaker,
        s3,
        stack.resource("dynamodb").Table(info.registry_table),
        timeout=1800,
    )
    return [str(i) for i in range(customers)]


def model_bytes(stack: EmbeddedStack, customer_id: str) -> int:
    """What one loaded model holds in the container, as the container accounts it."""
    assert stack.info is not None and stack.serving is not None
    live = ModelRegistry(stack.resource("dynamodb").Table(stack.info.registry_table)).live(
        customer_id
    )
    assert live is not None, f"customer {customer_id} has no live model"
    stack.client("sagemaker-runtime").invoke_endpoint(
        EndpointName=stack.info.extra["FLEETCAST_ENDPOINT_NAME"],
        TargetModel=live.target_model,
        ContentType="application/json",
        Body=json.dumps({"period": 7}),
    )["Body"].read()
    container = stack.serving.endpoint().container
    answer = container.request("GET", "/models/" + urllib.parse.quote(live.target_model, safe=""))
    return int(json.loads(answer.body)["memoryBytes"])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--resident-share", type=float, default=1 / 3, help="share of the models that fit"
    )
    args = parser.parse_args()

    with (
        TemporaryDirectory() as folder,
        EmbeddedStack(state_dir=Path(folder) / "state", port=0, parameters=LIMITS) as stack,
    ):
        assert stack.info is not None and stack.serving is not None
        started = time.perf_counter()
        print(f"training {args.customers} customers' models ...", flush=True)
        customers = train(stack, args.customers, Path(folder))
        print(f"trained in {time.perf_counter() - started:.0f} s", flush=True)

        # The container's budget: room for a share of the models.
        container = stack.serving.endpoint().container
        per_model = model_bytes(stack, customers[0])
        resident = math.ceil(args.customers * args.resident_share)
        budget = resident * per_model
        container.restart(memory_budget_mb=budget / MIB)
        idle_rss = _status_fields(container.pid or 0)["VmRSS"]
        function_memory = function_memory_mb(stack) * MIB

        roles = {os.getpid(): "stack"} | {container.pid or 0: "container"}
        watch = MemoryWatch(roles, workers=lambda: _function_workers(os.getpid()))
        url, key = stack.info.extra["FLEETCAST_API_URL"], stack.info.extra["FLEETCAST_API_KEY"]
        print(
            f"load: {args.clients} clients for {args.seconds:.0f} s over {len(customers)} "
            f"customers; container budget {budget / MIB:.1f} MiB = {resident} models of "
            f"{per_model / 1024:.1f} KiB",
            flush=True,
        )
        receiving, sending = multiprocessing.get_context("spawn").Pipe(duplex=False)
        client = multiprocessing.get_context("spawn").Process(
            target=run_clients,
            args=(url, key, customers, args.clients, args.seconds, sending),
            name="load-clients",
        )
        client.start()
        warm_seconds, warm = receiving.recv()
        print(f"warm-up: every customer once in {warm_seconds:.0f} s", flush=True)
        before = _endpoint_stats(stack)
        watch.start()
        outcomes = receiving.recv()
        client.join()
        watch.stop()
        endpoint = Counter(_endpoint_stats(stack)) - Counter(before)
        container_peak = _status_fields(container.pid or 0).get("VmHWM", 0)
        listed = _accounted_bytes(stack)

    return report(
        outcomes=outcomes,
        seconds=args.seconds,
        watch=watch,
        container_peak=container_peak,
        container_limit=idle_rss + budget + CONTAINER_RSS_ALLOWANCE,
        idle_rss=idle_rss,
        budget=budget,
        accounted=listed,
        function_memory=function_memory,
        endpoint=endpoint,
        warm_up=warm,
    )


def function_memory_mb(stack: EmbeddedStack) -> int:
    template = stack.template
    properties = template.resources["ForecastApiFunction"]["Properties"]
    globals_ = template.body.get("Globals", {}).get("Function", {})
    return int(properties.get("MemorySize", globals_.get("MemorySize", 512)))


def _endpoint_stats(stack: EmbeddedStack) -> dict[str, int]:
    assert stack.serving is not None
    stats = stack.serving.endpoint().stats
    return {"loads": stats.loads, "unloads": stats.unloads, "reloads": stats.reloads}


def _accounted_bytes(stack: EmbeddedStack) -> int:
    """The loaded models' bytes as the container lists them now."""
    assert stack.serving is not None
    container = stack.serving.endpoint().container
    total, token = 0, None
    while True:
        query = "?limit=1000" + (f"&next_page_token={urllib.parse.quote(token)}" if token else "")
        document = json.loads(container.request("GET", "/models" + query).body)
        for model in document["models"]:
            status = container.request(
                "GET", "/models/" + urllib.parse.quote(model["modelName"], safe="")
            )
            if status.status == 200:
                total += int(json.loads(status.body)["memoryBytes"])
        token = document.get("nextPageToken")
        if not token:
            return total


def report(
    *,
    outcomes: list[tuple[int, float, bool, bool]],
    seconds: float,
    watch: MemoryWatch,
    container_peak: int,
    container_limit: int,
    idle_rss: int,
    budget: int,
    accounted: int,
    function_memory: int,
    endpoint: Counter[str],
    warm_up: list[tuple[int, float, bool, bool]],
) -> int:
    warm_failures = [
        status
        for status, _, retry_after, right in warm_up
        if not (status == 200 and right) and not (status == 503 and retry_after)
    ]
    statuses: Counter[str] = Counter()
    unexpected = len(warm_failures)
    if warm_failures:
        print(f"warm-up: {len(warm_failures)} unexpected answers: {Counter(warm_failures)}")
    for status, _, retry_after, right_customer in outcomes:
        if status == 200 and right_customer:
            statuses["200"] += 1
        elif status == 200:
            statuses["200 for another customer"] += 1
            unexpected += 1
        elif status == 503 and retry_after:
            statuses["503 with Retry-After"] += 1
        else:
            statuses[f"{status or 'no answer'}"] += 1
            unexpected += 1
    ok_latencies = [latency for status, latency, _, right in outcomes if status == 200 and right]
    print()
    print(f"requests        {len(outcomes)} in {seconds:.0f} s: {len(outcomes) / seconds:.1f}/s")
    print(f"forecasts (200) {statuses['200']}: {statuses['200'] / seconds:.1f}/s")
    print(
        f"latency of 200  p50 {statistics.median(ok_latencies) if ok_latencies else math.nan:.1f} ms"
        f"  p99 {percentile(ok_latencies, 0.99):.1f} ms  max {max(ok_latencies, default=0):.1f} ms"
    )
    print("answers         " + ", ".join(f"{name}: {n}" for name, n in sorted(statuses.items())))
    print(
        f"endpoint        {endpoint['loads']} loads, {endpoint['unloads']} unloads, "
        f"{endpoint['reloads']} reloads"
    )
    print()
    over = []
    print("peak memory (RSS)")
    print(
        f"  endpoint container {container_peak / MIB:7.1f} MiB  limit {container_limit / MIB:.1f}"
        f" (idle {idle_rss / MIB:.1f} + model budget {budget / MIB:.1f} + "
        f"{CONTAINER_RSS_ALLOWANCE / MIB:.0f} allowance); models accounted now "
        f"{accounted / MIB:.1f} MiB of {budget / MIB:.1f}"
    )
    if container_peak > container_limit or accounted > budget:
        over.append("endpoint container")
    workers = [peak for pid, peak in watch.peaks.items() if watch.roles[pid] == "worker"]
    print(
        f"  Lambda workers     {max(workers, default=0) / MIB:7.1f} MiB  the largest of "
        f"{len(workers)}; budget {function_memory / MIB:.0f} each (MemorySize)"
    )
    if any(peak > function_memory for peak in workers):
        over.append("Lambda worker")
    stack_peak = next(peak for pid, peak in watch.peaks.items() if watch.roles[pid] == "stack")
    print(
        f"  stack process      {stack_peak / MIB:7.1f} MiB  (moto, gateway, local API; "
        "no budget configured)"
    )
    print()
    if unexpected or over:
        print(
            f"FAILED: {unexpected} unexpected answers"
            + (f"; over budget: {', '.join(over)}" if over else "")
        )
        return 1
    print("OK: no unexpected answers, memory within budgets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
