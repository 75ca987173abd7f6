"""The forecast API hardened, end to end on the embedded local stack: the inference
container killed under load, any request a client can make (hypothesis), and the API
key and usage plan as template.yaml declares them."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pipeline import finished, readings, to_csv, upload
from test_serving import usage_plan

from fleetcast.embedded.api.models import KEY_REFRESH_SECONDS
from fleetcast.embedded.api.server import MAX_HEAD_BYTES
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_contracts.ids import is_valid_customer_id
from fleetcast_contracts.inference import MAX_PERIOD, MIN_PERIOD

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
# Not the customers of the other e2e modules: their model versions stay theirs.
CUSTOMERS = [f"hard-{i}" for i in range(6)]


@pytest.fixture(scope="module")
def api(stack: EmbeddedStack) -> dict[str, Any]:
    """A finished run for this module's customers; the API's url, key and object."""
    body = gzip.compress(to_csv(readings(CUSTOMERS, "2024-01-01", 120, seed=5)))
    run_id = upload(stack, "hardening.csv.gz", body)
    assert finished(stack, run_id).customers_registered == len(CUSTOMERS)
    assert stack.info is not None and stack.serving is not None
    return {
        "url": stack.info.extra["FLEETCAST_API_URL"],
        "key": stack.info.extra["FLEETCAST_API_KEY"],
        "api": stack.serving.apis["ForecastApi"],
    }


class Client:
    """One kept-alive connection to the API, as an SDK holds one."""

    def __init__(self, url: str, key: str | None) -> None:
        self._url = urllib.parse.urlsplit(url)
        self._key = key
        self._connection = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self._url.hostname or "", self._url.port, timeout=60)

    def get(self, path: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        headers = {"x-api-key": self._key} if self._key else {}
        try:
            self._connection.request("GET", self._url.path + path, headers=headers)
            response = self._connection.getresponse()
        except (OSError, http.client.HTTPException):
            self._connection.close()  # the server closed a kept-alive connection: reopen
            self._connection = self._connect()
            self._connection.request("GET", self._url.path + path, headers=headers)
            response = self._connection.getresponse()
        raw = response.read()
        return response.status, dict(response.getheaders()), json.loads(raw)

    def close(self) -> None:
        self._connection.close()


# ---------------------------------------------------------------- the container killed under load


def wait_for_answers(answers: list[Any], lock: threading.Lock, count: int, when: str) -> None:
    """Until the clients have had ``count`` answers in all."""
    deadline = time.monotonic() + 120
    while True:
        with lock:
            if len(answers) >= count:
                return
        assert time.monotonic() < deadline, f"the clients got fewer than {count} answers {when}"
        time.sleep(0.05)


def test_a_killed_container_means_503_with_retry_after_then_the_same_forecasts(
    stack: EmbeddedStack, api: dict[str, Any]
) -> None:
    assert stack.serving is not None
    container = stack.serving.endpoint().container
    paths = [f"/customers/{customer}/forecast?period=7" for customer in CUSTOMERS]
    # Given every customer's forecast as the API answers it before the kill
    before = {}
    baseline = Client(api["url"], api["key"])
    for path in paths:
        status, _, body = baseline.get(path)
        assert status == 200, body
        before[path] = body
    baseline.close()
    restarts = container.restarts
    answers: list[tuple[str, int, dict[str, str], dict[str, Any]]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def client(index: int) -> None:
        own = Client(api["url"], api["key"])
        sent = 0
        while not stop.is_set() and sent < 2000:  # bounded, whatever happens
            path = paths[(index + sent) % len(paths)]
            status, headers, body = own.get(path)
            sent += 1
            with lock:
                answers.append((path, status, headers, body))
        own.close()

    # (Down for longer than the function's retries of the runtime call last, so some
    # requests see the outage, whatever this machine's speed.)
    original_delay = container.restart_delay
    container.restart_delay = 5.0
    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    # (The usage plan's throttle would answer some of this traffic 429: tested below.)
    try:
        with usage_plan(stack, None):
            # When six clients send requests and the container's process is killed
            for thread in threads:
                thread.start()
            wait_for_answers(answers, lock, len(threads), "before the kill")
            pid = container.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 120
            while container.restarts == restarts and time.monotonic() < deadline:
                time.sleep(0.1)
            assert container.restarts == restarts + 1, "the container did not come back"
            # And a round of traffic after it came back
            with lock:
                answered = len(answers)
            wait_for_answers(answers, lock, answered + len(threads), "after the restart")
            stop.set()
            for thread in threads:
                thread.join(timeout=120)
    finally:
        stop.set()
        container.restart_delay = original_delay

    # Then every answer was the forecast from before, or 503 with a Retry-After
    outcomes: Counter[str] = Counter()
    for path, status, headers, body in answers:
        if status == 200:
            assert body == before[path], f"{path}: a forecast other than before the kill"
            outcomes["200"] += 1
        else:
            assert status == 503, (status, body)
            assert headers["Retry-After"].isdigit() and int(headers["Retry-After"]) >= 1
            assert body["error"] == "EndpointUnavailable"
            outcomes["503"] += 1
    assert outcomes["503"] >= 1, outcomes  # the outage was seen
    # and afterwards every customer's forecast is served again, the same as before
    after = Client(api["url"], api["key"])
    for path in paths:
        status, _, body = after.get(path)
        assert (status, body) == (200, before[path])
    after.close()


# ---------------------------------------------------------------- any request a client can make

# Path segments, query names and values as a client might send them: anything printable
# or not, ids near the allow-list's edges, and periods near the range's.
SEGMENTS = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,70}", fullmatch=True),
    st.sampled_from([*CUSTOMERS, "..", ".", "%2e%2e", "a/b", "a\nb", "-x", "_x"]),
)
PERIODS = st.one_of(
    st.none(),
    st.integers(min_value=-10, max_value=400).map(str),
    st.text(max_size=12),
    st.sampled_from(["007", "7.0", "1e2", " 7", "+7", "0x10", "", "365", "366"]),
)
EXTRA = st.dictionaries(
    st.text(min_size=1, max_size=12).filter(lambda name: name != "period"),
    st.text(max_size=12),
    max_size=2,
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    customer_id=SEGMENTS,
    route=st.sampled_from(["forecast", "model"]),
    period=PERIODS,
    extra=EXTRA,
)
def test_no_request_gets_a_5xx_and_each_gets_its_documented_answer(
    stack: EmbeddedStack,
    api: dict[str, Any],
    customer_id: str,
    route: str,
    period: str | None,
    extra: dict[str, str],
) -> None:
    query = dict(extra)
    if period is not None:
        query["period"] = period
    path = f"/customers/{urllib.parse.quote(customer_id, safe='')}/{route}"
    if query:
        path += "?" + urllib.parse.urlencode(query)
    client = Client(api["url"], api["key"])
    with usage_plan(stack, None):  # the throttle is tested on its own, not here
        status, headers, body = client.get(path)
    client.close()

    assert status < 500, (path, status, body)
    assert headers["Content-Type"] == "application/json"
    if status == 403:
        # API Gateway's: the id held a '/' once decoded (or was empty), so no route matched
        assert body == {"message": "Missing Authentication Token"}
        assert "/" in customer_id or customer_id in ("", ".", "..")
        return
    assert status in (200, 400, 404), (path, status, body)
    if not is_valid_customer_id(customer_id):
        assert status == 400 and body["error"] == "InvalidRequest"
    takes = {"period"} if route == "forecast" else set()
    if set(query) - takes:
        assert status == 400 and body["error"] == "InvalidRequest"
    if status == 404:
        assert body["error"] == "UnknownCustomer" and customer_id not in CUSTOMERS
    if status == 200:
        assert body["customer_id"] == customer_id and customer_id in CUSTOMERS
        if route == "forecast":
            assert MIN_PERIOD <= body["period"] <= MAX_PERIOD
            assert len(body["forecast"]) == body["period"]


# ---------------------------------------------------------------- key and usage plan


def test_the_usage_plan_and_key_are_the_templates_in_api_gateway_and_enforced(
    stack: EmbeddedStack, api: dict[str, Any]
) -> None:
    parameters = stack.template.parameters
    rate, burst, quota = (
        float(parameters["ApiThrottleRateLimit"]),
        int(parameters["ApiThrottleBurstLimit"]),
        int(parameters["ApiQuotaLimit"]),
    )
    # Given API Gateway's view of the stage (what `aws apigateway get-usage-plans` shows)
    apigateway = stack.client("apigateway")
    (plan,) = [
        p
        for p in apigateway.get_usage_plans()["items"]
        if any(s["apiId"] == api["api"].api_id for s in p.get("apiStages", []))
    ]
    keys = apigateway.get_usage_plan_keys(usagePlanId=plan["id"])["items"]
    values = [apigateway.get_api_key(apiKey=k["id"], includeValue=True)["value"] for k in keys]
    # Then it holds the template's throttle and quota and the exported key, and the local
    # API enforces those same limits
    assert plan["throttle"] == {"rateLimit": rate, "burstLimit": burst}
    assert plan["quota"]["limit"] == quota and plan["quota"]["period"] == "DAY"
    assert values == [api["key"]]
    enforced = api["api"].usage_plan
    assert (enforced.rate, enforced.burst, enforced.quota) == (rate, burst, quota)


def test_a_disabled_key_is_refused_and_an_enabled_one_served_again(
    stack: EmbeddedStack, api: dict[str, Any]
) -> None:
    apigateway = stack.client("apigateway")
    (key,) = [
        k for k in apigateway.get_api_keys(includeValues=True)["items"] if k["value"] == api["key"]
    ]
    client = Client(api["url"], api["key"])
    path = f"/customers/{CUSTOMERS[0]}/model"
    assert client.get(path)[0] == 200

    def disabled(flag: bool) -> None:
        apigateway.update_api_key(
            apiKey=key["id"],
            patchOperations=[{"op": "replace", "path": "/enabled", "value": str(not flag).lower()}],
        )

    def answer_once_the_gateway_rereads_its_keys(wanted: int) -> tuple[int, Any]:
        """The first answer of status ``wanted``: the gateway re-reads its keys every
        KEY_REFRESH_SECONDS, so the change shows within that (a bound kept generous)."""
        deadline = time.monotonic() + 10 * KEY_REFRESH_SECONDS + 30
        while True:
            status, _, body = client.get(path)
            if status == wanted or time.monotonic() > deadline:
                return status, body
            time.sleep(0.1)

    try:
        # When the key is disabled in API Gateway; then it is refused
        disabled(True)
        assert answer_once_the_gateway_rereads_its_keys(403) == (403, {"message": "Forbidden"})
    finally:
        # and when it is enabled again, served
        disabled(False)
    assert answer_once_the_gateway_rereads_its_keys(200)[0] == 200
    client.close()


# ---------------------------------------------------------------- API Gateway's limits, in JSON


@pytest.fixture
def unthrottled(stack: EmbeddedStack) -> Iterator[None]:
    """The throttle and quota are tested on their own, not here."""
    with usage_plan(stack, None):
        yield


def raw_request(url: str, head: bytes, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Send ``head`` (a request line and headers, as written) as it is, and read the answer
    (http.client would refuse to send most of these)."""
    parts = urllib.parse.urlsplit(url)
    with socket.create_connection((parts.hostname or "", parts.port or 80), timeout=60) as sock:
        sock.sendall(head + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def head_of(url: str, key: str, headers: list[tuple[str, str]], target: str | None = None) -> bytes:
    parts = urllib.parse.urlsplit(url)
    line = f"GET {target or parts.path + f'/customers/{CUSTOMERS[0]}/model'} HTTP/1.1\r\n"
    fields = [("Host", parts.netloc), ("x-api-key", key), *headers]
    return (line + "".join(f"{name}: {value}\r\n" for name, value in fields) + "\r\n").encode()


def test_many_small_headers_are_served_as_api_gateway_serves_them(
    api: dict[str, Any], unthrottled: None
) -> None:
    # Given 150 short headers, about 3 KB in all: over http.server's 100 lines, well
    # within API Gateway's 10,240 bytes
    headers = [(f"x-probe-{i}", "1") for i in range(150)]
    # When they are sent; then the function answers, as on API Gateway
    status, _, body = raw_request(api["url"], head_of(api["url"], api["key"], headers))
    assert status == 200, body
    assert json.loads(body)["customer_id"] == CUSTOMERS[0]


def test_a_request_head_over_10240_bytes_is_refused_in_json_and_one_just_under_is_served(
    api: dict[str, Any], unthrottled: None
) -> None:
    # Given heads of exactly the limit and one byte over it (x-pad's value sized to fit;
    # the blank line that ends a head holds no header and is not counted)
    base = len(head_of(api["url"], api["key"], [("x-pad", "")])) - 2
    at_limit = head_of(api["url"], api["key"], [("x-pad", "a" * (MAX_HEAD_BYTES - base))])
    over = head_of(api["url"], api["key"], [("x-pad", "a" * (MAX_HEAD_BYTES - base + 1))])
    assert len(at_limit) - 2 == MAX_HEAD_BYTES
    # When each is sent; then the one at the limit is served, the other refused as API
    # Gateway refuses it: 413, its JSON, the connection closed
    assert raw_request(api["url"], at_limit)[0] == 200
    status, headers, body = raw_request(api["url"], over)
    assert (status, json.loads(body)) == (413, {"message": "Request Too Long"})
    assert headers["Content-Type"] == "application/json"
    assert headers["x-amzn-ErrorType"] == "RequestTooLongException"
    assert headers["Connection"] == "close"


@pytest.mark.parametrize(
    ("case", "head", "wanted"),
    [
        # one 60 KB header: a line http.server accepts, API Gateway does not
        ("a 60 KB header", "60kb", (413, "Request Too Long")),
        # 200 headers of 100 bytes: over both limits
        ("200 headers of 100 bytes", "200x100", (413, "Request Too Long")),
        ("a 70 KB request line", "GET /prod/" + "a" * 70_000 + " HTTP/1.1\r\n\r\n", None),
        ("a 12 KB request line", "GET /prod/" + "a" * 12_000 + " HTTP/1.1\r\n\r\n", None),
        ("no HTTP version", "GET /prod/x HTTP/x\r\n\r\n", (400, None)),
        ("an unknown HTTP version", "GET /prod/x HTTP/3.0\r\n\r\n", (505, None)),
        (
            "an unknown method",
            "BREW /prod/x HTTP/1.1\r\n\r\n",
            (403, "Missing Authentication Token"),
        ),
        ("a Content-Length that is no number", "content-length", (400, "Bad Request")),
        ("a body over 10 MB", "body", (413, "Request Too Long")),
    ],
)
def test_every_refusal_is_api_gateways_json(
    api: dict[str, Any],
    unthrottled: None,
    case: str,
    head: str,
    wanted: tuple[int, str | None] | None,
) -> None:
    url, key = api["url"], api["key"]
    # Given a request API Gateway would refuse
    sent = {
        "60kb": head_of(url, key, [("x-big", "a" * 60_000)]),
        "200x100": head_of(url, key, [(f"x-h{i}", "a" * 90) for i in range(200)]),
        "content-length": head_of(url, key, [("Content-Length", "ten")]),
        "body": head_of(url, key, [("Content-Length", str(11 * 1024 * 1024))]),
    }.get(head, head.encode())
    # When it is sent
    status, headers, body = raw_request(url, sent)
    # Then the answer is API Gateway's: JSON with a message, never an HTML page
    assert headers["Content-Type"] == "application/json", (case, body[:200])
    document = json.loads(body)
    assert set(document) == {"message"} and document["message"], (case, document)
    assert headers["x-amzn-ErrorType"].endswith("Exception"), case
    if wanted is None:  # over the combined limit of request line and headers
        wanted = (413, "Request Too Long")
    assert status == wanted[0], (case, status, document)
    if wanted[1] is not None:
        assert document["message"] == wanted[1], (case, document)
