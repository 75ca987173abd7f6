"""The forecast API keeps its own contract, end to end: schemathesis reads docs/openapi.json
as a client generator would and runs every check against the local stack's API, a few
hundred requests (``make fuzz`` is the same run, for up to three minutes, on a stack of
its own)."""

from __future__ import annotations

import gzip
import re
import subprocess
from typing import Any

import pytest
from forecast_api_helpers import document
from test_pipeline import finished, readings, to_csv, upload
from test_serving import usage_plan

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.fuzz import EXAMPLE_CUSTOMER, SCHEMATHESIS, schemathesis_command, warm_up

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
# (EXAMPLE_CUSTOMER, the document's example customer id: schemathesis asks for it first,
# and its answers, 200, are checked against their schemas. No other e2e module trains it.)
# Test cases per operation and phase: a few hundred requests in all, well under a minute.
MAX_EXAMPLES = 150
# Fixed, so that make test's smoke is the same run every time (make fuzz draws its own).
SEED = 44


@pytest.fixture(scope="module")
def api(stack: EmbeddedStack) -> dict[str, Any]:
    """The document's example customer with a live model, each route asked once; the
    API's url and key."""
    body = gzip.compress(to_csv(readings([EXAMPLE_CUSTOMER], "2024-01-01", 120, seed=44)))
    run_id = upload(stack, "contract.csv.gz", body)
    assert finished(stack, run_id).customers_registered == 1
    assert stack.info is not None
    url, key = stack.info.extra["FLEETCAST_API_URL"], stack.info.extra["FLEETCAST_API_KEY"]
    # (The first requests start the function's worker and load the model: a cold start,
    # not what the 2 s bound is about.)
    with usage_plan(stack, None):
        warm_up(url, key, EXAMPLE_CUSTOMER)
    return {"url": url, "key": key}


def test_the_example_customer_is_the_documents() -> None:
    # (Else schemathesis' first requests would all be 404s, and no 200 checked.)
    for operation in document()["paths"].values():
        (customer_id,) = [p for p in operation["get"]["parameters"] if p["name"] == "customer_id"]
        assert customer_id["schema"]["examples"] == [EXAMPLE_CUSTOMER]


def test_schemathesis_finds_no_answer_other_than_the_document_says(
    stack: EmbeddedStack, api: dict[str, Any]
) -> None:
    assert stack.info is not None
    root = stack.root
    assert (root / SCHEMATHESIS).exists(), f"{SCHEMATHESIS} is absent: run `make install`"
    command = schemathesis_command(api["url"], api["key"], max_examples=MAX_EXAMPLES, seed=SEED)
    # Given the API without its throttle (one key sends every request; 429 is tested
    # elsewhere), when schemathesis runs every check over docs/openapi.json
    with usage_plan(stack, None):
        run = subprocess.run(
            command, capture_output=True, text=True, timeout=300, check=False, cwd=stack.state_dir
        )
    # Then no check failed: no 5xx, no answer over MAX_RESPONSE_SECONDS, every answer valid
    # against its schema, every request the document allows accepted and every one it
    # refuses refused
    report = run.stdout[-8000:] + run.stderr[-2000:]
    assert run.returncode == 0, report
    # and it tested both routes with a few hundred requests
    assert "2 selected / 2 total" in run.stdout, report
    generated = re.search(r"(\d+) generated", run.stdout)
    assert generated is not None and int(generated.group(1)) >= 300, report
