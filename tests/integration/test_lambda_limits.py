"""Lambda's limits on the local stack's functions (issue 27, "What to build" 2): a function
past its Timeout is ended as Lambda ends it and its event source retries and then
dead-letters the event; payloads past Invoke's limits fail with Lambda's errors.

The functions are real worker processes (the local stack's own LocalFunction) running a
handler written for the test; EventBridge and SQS are a moto server.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from fleetcast.embedded.events import MAX_RECEIVES, EventDelivery
from fleetcast.embedded.lambda_workers import (
    ASYNCHRONOUS,
    FunctionTimeoutError,
    RequestTooLargeError,
    ResponseTooLargeError,
)
from fleetcast.embedded.lambdas import LocalFunction

pytestmark = pytest.mark.integration

HANDLER = """
import gc, json, os, time

def lambda_handler(event, context):
    if event.get("frozen"):
        return {"frozen": gc.get_freeze_count(), "pid": os.getpid()}
    with open(os.environ["CALLS"], "a") as calls:
        calls.write(json.dumps({"pid": os.getpid(), "event": event.get("detail", event)}) + "\\n")
    if event.get("detail", event).get("sleep"):
        time.sleep(event.get("detail", event)["sleep"])
    return {"answer": "x" * event.get("answer_bytes", 1), "pid": os.getpid()}
"""
TIMEOUT = 1.0


@pytest.fixture
def function(tmp_path: Path) -> Iterator[tuple[LocalFunction, Path]]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "app.py").write_text(HANDLER)
    calls = tmp_path / "calls.jsonl"
    local = LocalFunction(
        name="limits-test",
        code_dir=code,
        handler="app.lambda_handler",
        environment={"CALLS": str(calls)},
        log_path=tmp_path / "function.log",
        concurrency=2,
        timeout=TIMEOUT,
    )
    local.warm_up().result(timeout=120)
    yield local, calls
    local.close()


def _calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_an_invocation_past_its_timeout_is_ended_and_only_it(
    function: tuple[LocalFunction, Path],
) -> None:
    local, _ = function
    # Given an invocation that would run 30 s, and a quick one beside it
    outcome: dict[str, Any] = {}

    def slow() -> None:
        started = time.monotonic()
        try:
            local.invoke({"sleep": 30})
        except FunctionTimeoutError as error:
            outcome["error"], outcome["after"] = error, time.monotonic() - started

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.2)
    quick = local.invoke({})
    thread.join(timeout=20)
    # Then the slow one fails with Lambda's timeout after its Timeout, not after 30 s...
    assert "Task timed out after 1.00 seconds" in str(outcome["error"])
    assert TIMEOUT <= outcome["after"] < TIMEOUT + 5
    # ...the quick one, in the other environment, was answered
    assert quick["answer"] == "x"
    # And the ended environment's process is gone; the function still answers
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = local.invoke({})
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert answer["answer"] == "x"


def test_a_second_environment_starts_only_when_every_one_is_busy(
    function: tuple[LocalFunction, Path],
) -> None:
    local, _ = function
    # Given a function of concurrency 2, started: one environment, and invoked one at a
    # time, it answers every invocation
    assert local.environments == 1
    assert len({local.invoke({})["pid"] for _ in range(5)}) == 1
    assert local.environments == 1

    # When invocations overlap, another environment starts (a cold start) and answers too
    def overlapping() -> set[int]:
        with ThreadPoolExecutor(2) as pool:
            return {a["pid"] for a in pool.map(lambda _: local.invoke({"sleep": 0.3}), "ab")}

    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 2 and time.monotonic() < deadline:
        seen |= overlapping()
    assert len(seen) == 2
    # And never more than the function's concurrency
    for _ in range(3):
        assert overlapping() <= seen
    assert local.environments == 2


def test_payloads_past_invokes_limits_fail_with_lambdas_errors(
    function: tuple[LocalFunction, Path],
) -> None:
    local, calls = function
    # An asynchronous event over 1 MB never reaches the handler
    with pytest.raises(RequestTooLargeError, match="too large for the Event invocation"):
        local.invoke({"padding": "x" * 1_048_576}, ASYNCHRONOUS)
    # A synchronous one up to 6 MB does, and one over does not
    assert local.invoke({"padding": "x" * 2_000_000})["answer"] == "x"
    with pytest.raises(RequestTooLargeError, match="RequestResponse"):
        local.invoke({"padding": "x" * 6_291_456})
    assert len(_calls(calls)) == 1
    # An answer over 6 MB fails the invocation, as ResponseSizeTooLarge
    with pytest.raises(ResponseTooLargeError, match="exceeded maximum allowed payload size"):
        local.invoke({"answer_bytes": 6_300_000})


def test_a_timed_out_event_is_retried_then_dead_lettered(
    aws_env: str, function: tuple[LocalFunction, Path]
) -> None:
    local, calls = function
    sqs: Any = boto3.client("sqs")
    events: Any = boto3.client("events")
    dead_letters = sqs.create_queue(QueueName="limits-dlq")["QueueUrl"]
    dead_letter_arn = sqs.get_queue_attributes(QueueUrl=dead_letters, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    delivery = EventDelivery(sqs, events)
    delivery.add_rule("limits-rule", {"source": ["fleetcast.test"]}, local, dead_letter_arn)
    delivery.start()
    try:
        # When an event its function cannot finish in time arrives
        events.put_events(
            Entries=[
                {
                    "Source": "fleetcast.test",
                    "DetailType": "slow",
                    "Detail": json.dumps({"sleep": 30}),
                }
            ]
        )
        # Then it is tried as Lambda's asynchronous invocation tries it, then dead-lettered
        deadline = time.monotonic() + 120
        while not sqs.receive_message(QueueUrl=dead_letters, WaitTimeSeconds=1).get("Messages"):
            assert time.monotonic() < deadline, f"not dead-lettered: {_calls(calls)}"
        tried = [c for c in _calls(calls) if c["event"].get("sleep")]
        assert len(tried) == MAX_RECEIVES
        # each attempt in a fresh environment: the one before was ended
        assert len({c["pid"] for c in tried}) == MAX_RECEIVES
    finally:
        delivery.stop()
    assert os.environ["AWS_ENDPOINT_URL"] == aws_env


def test_a_worker_leaves_what_it_inherits_to_the_collector_alone(
    function: tuple[LocalFunction, Path],
) -> None:
    # Given a function's worker, forked from the forkserver with its preloaded imports
    local, _ = function
    # When it is asked how many objects the cyclic collector leaves alone
    answer = local.invoke({"frozen": True})
    # Then the inherited ones are frozen (kept shared with the forkserver's other
    # children: a collection would write to each of them)
    assert answer["frozen"] > 10_000
