"""``python -m fleetcast.fuzz`` (``make fuzz``): the forecast API run against its own OpenAPI
document as a client generator would read it, by schemathesis with every check.

Starts a local stack on 127.0.0.1 (any free port, in a temporary folder), trains
``--customers`` customers' models through the real pipeline (their ids are ``0`` to
``N - 1``, so the document's example customer, ``42``, has a live model and its answers
are checked against their schemas), raises the usage plan's throttle and quota (one key
sends every request; the throttle is not what is tested), then runs schemathesis over
docs/openapi.json for what is left of ``--seconds`` (150: the whole run from its stack's
start, which with the imports before it, 10 to 20 s, is under three minutes), with
schemathesis.toml. The exit status is schemathesis': non-zero on any failure, a 5xx or an
answer slower than ``MAX_RESPONSE_SECONDS`` among them.

schemathesis lives in its own virtual environment (.venv-fuzz, requirements/fuzz.in) and
runs as a separate process: a client from outside, like any other.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from fleetcast.datagen import write_readings
from fleetcast.embedded.stack import EmbeddedStack, repo_root
from fleetcast.openapi import DOCUMENT
from fleetcast.serving_cli import ForecastApi
from fleetcast.status import follow_run, run_ids, wait_for_new_run

SCHEMATHESIS = Path(".venv-fuzz") / "bin" / "schemathesis"
# What the command line does not say (which statuses count as refusing a request).
CONFIG = Path("schemathesis.toml")
# No answer may take longer (the bound; a warm forecast takes milliseconds).
MAX_RESPONSE_SECONDS = 2.0
REQUEST_TIMEOUT_SECONDS = 10.0
# The whole run's bound (the issue's: at most three minutes), its start and training
# included: schemathesis' --max-time is what they leave, less AFTER_FUZZ_SECONDS for its
# loading and report and the stack's stop (about 10 s and 5 s measured), and never less
# than MIN_FUZZ_SECONDS.
RUN_SECONDS = 150.0
AFTER_FUZZ_SECONDS = 20.0
MIN_FUZZ_SECONDS = 30.0
# The document's example customer id (CustomerId's examples in the handler): trained by
# make fuzz (ids 0 to --customers - 1) and by the smoke test, so that schemathesis' first
# requests, which use the examples, get 200 answers to check against their schemas.
EXAMPLE_CUSTOMER = "42"
# The usage plan's limits for the run: the generated requests are not to be throttled.
UNTHROTTLED = {
    "ApiThrottleRateLimit": "10000",
    "ApiThrottleBurstLimit": "5000",
    "ApiQuotaLimit": "100000000",
}


def schemathesis_command(
    url: str,
    api_key: str,
    *,
    max_examples: int,
    max_time: float | None = None,
    seed: int | None = None,
    root: Path | None = None,
) -> list[str]:
    """The schemathesis run of the forecast API at ``url``: every check, every phase but
    the stateful one (the API has no links between operations), the API key in its
    header."""
    base = root or repo_root()
    command = [
        str(base / SCHEMATHESIS),
        "--config-file",
        str(base / CONFIG),
        "run",
        str(base / DOCUMENT),
        "--url",
        url,
        "--header",
        f"x-api-key:{api_key}",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(max_examples),
        "--max-response-time",
        str(MAX_RESPONSE_SECONDS),
        # A request that hangs is a failure (a network error), not a run that never ends.
        "--request-timeout",
        str(REQUEST_TIMEOUT_SECONDS),
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--no-color",
    ]
    if max_time is not None:
        command += ["--max-time", str(int(max_time))]
    if seed is not None:
        command += ["--seed", str(seed)]
    return command


def train(stack: EmbeddedStack, customers: int, folder: Path, timeout: float = 900) -> None:
    """Customers ``0`` to ``customers - 1``, 400 days each, trained and live."""
    assert stack.info is not None
    info = stack.info
    data = folder / "readings.csv.gz"
    write_readings(data, customers=customers, days=400)
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    known = run_ids(info.job_name_prefix, sagemaker)
    s3.upload_file(str(data), info.raw_bucket, "incoming/readings.csv.gz")
    status = follow_run(
        wait_for_new_run(info.job_name_prefix, sagemaker, known),
        info.job_name_prefix,
        info.artifacts_bucket,
        sagemaker,
        s3,
        stack.resource("dynamodb").Table(info.registry_table),
        timeout=timeout,
    )
    if status.customers_registered != customers:
        raise RuntimeError(f"{status.customers_registered} of {customers} customers were trained")


def warm_up(url: str, api_key: str, customer_id: str) -> None:
    """Ask each route once for ``customer_id``'s answer: the first request starts the
    function's worker and loads the model into the endpoint (a cold start, not what
    MAX_RESPONSE_SECONDS bounds)."""
    api = ForecastApi(url, api_key)
    for route in ("forecast", "model"):
        answer = api.get(f"/customers/{customer_id}/{route}")
        if answer.get("customer_id") != customer_id:
            raise RuntimeError(f"{route} of {customer_id}: {answer}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fleetcast.fuzz",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--customers", type=int, default=50)
    parser.add_argument(
        "--seconds",
        type=float,
        default=RUN_SECONDS,
        help="the whole run's bound: schemathesis has what the stack's start and training leave",
    )
    parser.add_argument("--max-examples", type=int, default=1000, help="per operation and phase")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.customers <= int(EXAMPLE_CUSTOMER):
        parser.error(f"--customers must be over {EXAMPLE_CUSTOMER}, the document's example id")
    root = repo_root()
    if not (root / SCHEMATHESIS).exists():
        print(f"{SCHEMATHESIS} is absent: run `make install`", file=sys.stderr)
        return 2

    started = time.monotonic()
    with (
        TemporaryDirectory() as folder,
        EmbeddedStack(state_dir=Path(folder) / "state", port=0, parameters=UNTHROTTLED) as stack,
    ):
        assert stack.info is not None
        print(f"stack up in {time.monotonic() - started:.0f} s", flush=True)
        print(f"training {args.customers} customers' models ...", flush=True)
        train(stack, args.customers, Path(folder))
        url, api_key = stack.info.extra["FLEETCAST_API_URL"], stack.info.extra["FLEETCAST_API_KEY"]
        warm_up(url, api_key, EXAMPLE_CUSTOMER)
        elapsed = time.monotonic() - started
        print(f"trained: {elapsed:.0f} s so far", flush=True)
        max_time = max(MIN_FUZZ_SECONDS, args.seconds - elapsed - AFTER_FUZZ_SECONDS)
        command = schemathesis_command(
            url,
            api_key,
            max_examples=args.max_examples,
            max_time=max_time,
            seed=args.seed,
            root=root,
        )
        fuzz_started = time.monotonic()
        # (Bounded whatever schemathesis does: its --max-time, its loading and its report.)
        returncode = subprocess.run(
            command, cwd=folder, check=False, timeout=max_time + 60
        ).returncode
        print(f"schemathesis: exit {returncode} in {time.monotonic() - fuzz_started:.0f} s")
    print(f"make fuzz: {time.monotonic() - started:.0f} s in all")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
