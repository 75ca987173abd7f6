"""Serving measured through the local stack: the forecast API and sagemaker-runtime.

Starts the embedded stack, trains a few customers through the real pipeline, then times
``GET /customers/{id}/forecast`` at several concurrencies and ``invoke_endpoint`` cold
(first use of a TargetModel: download, unpack, load) and warm. A benchmark, not a test.

    .venv/bin/python bench/api_serving.py --customers 40 --requests 400
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import multiprocessing
import statistics
import threading
import time
import urllib.parse
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from tempfile import TemporaryDirectory

from fleetcast.datagen import write_readings
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import follow_run, run_ids, wait_for_new_run
from fleetcast_common.registry import ModelRegistry

# The usage plan's throttle would measure itself: this measures serving.
GENEROUS_LIMITS = {
    "ApiThrottleRateLimit": "5000",
    "ApiThrottleBurstLimit": "5000",
    "ApiQuotaLimit": "1000000",
}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def train(stack: EmbeddedStack, customers: int, folder: Path) -> list[str]:
    assert stack.info is not None
    info = stack.info
    data = folder / "readings.csv.gz"
    write_readings(data, customers=customers, days=400)
    sagemaker = stack.client("sagemaker")
    known = run_ids(info.job_name_prefix, sagemaker)
    stack.client("s3").upload_file(str(data), info.raw_bucket, "incoming/readings.csv.gz")
    follow_run(
        wait_for_new_run(info.job_name_prefix, sagemaker, known),
        info.job_name_prefix,
        info.artifacts_bucket,
        sagemaker,
        stack.client("s3"),
        stack.resource("dynamodb").Table(info.registry_table),
        timeout=900,
    )
    return [str(i) for i in range(customers)]


def _timed_requests(
    url: str, key: str, customers: list[str], requests: int, concurrency: int
) -> tuple[list[float], float]:
    """``requests`` forecasts from ``concurrency`` threads, each with its own kept-alive
    connection (as an SDK holds one): every latency in ms, and the seconds it all took."""
    split = urllib.parse.urlsplit(url)
    local = threading.local()

    def one(index: int) -> float:
        customer = customers[index % len(customers)]
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection(
                split.hostname or "", split.port, timeout=30
            )
        started = time.perf_counter()
        local.connection.request(
            "GET",
            f"{split.path}/customers/{customer}/forecast?period=7",
            headers={"x-api-key": key},
        )
        response = local.connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{customer}: HTTP {response.status}")
        return (time.perf_counter() - started) * 1000

    for index in range(len(customers)):  # every model loaded once before timing
        one(index)
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        times = list(pool.map(one, range(requests)))
    return times, time.perf_counter() - started


def api_latencies(
    url: str, key: str, customers: list[str], requests: int, concurrency: int
) -> dict[str, float]:
    """The forecast API's p50/p99 and throughput at ``concurrency``. The clients run in a
    process of their own: in the stack's process they would compete for its GIL with the
    gateway they measure."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as clients:
        times, elapsed = clients.submit(
            _timed_requests, url, key, customers, requests, concurrency
        ).result()
    return {
        "p50_ms": statistics.median(times),
        "p99_ms": percentile(times, 0.99),
        "requests_per_s": requests / elapsed,
    }


def endpoint_latencies(stack: EmbeddedStack, targets: list[str]) -> dict[str, float]:
    runtime = stack.client("sagemaker-runtime")
    assert stack.info is not None
    endpoint = stack.info.extra["FLEETCAST_ENDPOINT_NAME"]

    def invoke(target: str) -> float:
        started = time.perf_counter()
        runtime.invoke_endpoint(
            EndpointName=endpoint,
            TargetModel=target,
            ContentType="application/json",
            Body=json.dumps({"period": 7}),
        )["Body"].read()
        return (time.perf_counter() - started) * 1000

    cold = [invoke(target) for target in targets]
    warm = [invoke(target) for target in targets * 5]
    return {
        "cold_p50_ms": statistics.median(cold),
        "warm_p50_ms": statistics.median(warm),
        "warm_p99_ms": percentile(warm, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=40)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with (
        TemporaryDirectory() as folder,
        EmbeddedStack(
            state_dir=Path(folder) / "state", port=0, parameters=GENEROUS_LIMITS
        ) as stack,
    ):
        assert stack.info is not None
        customers = train(stack, args.customers, Path(folder))
        registry = ModelRegistry(stack.resource("dynamodb").Table(stack.info.registry_table))
        targets = [live.target_model for c in customers if (live := registry.live(c))]
        report = {"endpoint (boto3 invoke_endpoint)": endpoint_latencies(stack, targets)}
        url, key = stack.info.extra["FLEETCAST_API_URL"], stack.info.extra["FLEETCAST_API_KEY"]
        for concurrency in (1, 8, 32):
            report[f"API, concurrency {concurrency}"] = api_latencies(
                url, key, customers, args.requests, concurrency
            )
        out = io.StringIO()
        for name, figures in report.items():
            out.write(f"{name:<34}" + "  ".join(f"{k}={v:.1f}" for k, v in figures.items()) + "\n")
        print(out.getvalue(), end="")


if __name__ == "__main__":
    main()
