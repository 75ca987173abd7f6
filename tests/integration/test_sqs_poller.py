"""The local stack's one SQS poller (used by event source mappings and by EventBridge
delivery), against a real moto queue: handled messages are deleted, failed ones come back
until the redrive policy dead-letters them, and a stop ends the polling."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from fleetcast.embedded.sqs_poller import Message, Pollers, QueuePoller

MAX_RECEIVES = 3
DEADLINE_SECONDS = 60


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_SECONDS} s: {what}")
        time.sleep(0.1)


def messages_in(sqs: Any, queue_url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


@pytest.fixture
def queues(aws_env: str) -> Iterator[tuple[Any, str, str]]:
    """A queue that dead-letters a message on its third receive, and its dead-letter queue."""
    sqs = boto3.client("sqs")
    name = f"poller-{uuid.uuid4().hex[:8]}"
    dead_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "900",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(MAX_RECEIVES)}
            ),
        },
    )["QueueUrl"]
    yield sqs, url, dead_url
    sqs.delete_queue(QueueUrl=url)
    sqs.delete_queue(QueueUrl=dead_url)


def test_handled_messages_are_deleted_and_a_failing_one_is_retried_then_dead_lettered(
    queues: tuple[Any, str, str],
) -> None:
    sqs, url, dead_url = queues
    # Given five messages, one of which its handler always fails
    bodies = ["ok-1", "ok-2", "poison", "ok-3", "ok-4"]
    for body in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=body)
    seen: Counter[str] = Counter()
    seen_lock = threading.Lock()

    def handle(messages: list[Message]) -> Iterator[tuple[Message, bool]]:
        for message in messages:
            with seen_lock:
                seen[message["Body"]] += 1
            yield message, message["Body"] != "poison"

    poller = QueuePoller(
        sqs, url, handle, name="test", batch_size=2, retry_delay_seconds=1, threads=2
    )

    # When the poller runs until the failing message reaches the dead-letter queue
    poller.start()
    try:
        wait_until(lambda: messages_in(sqs, dead_url) == 1, "the poison message dead-lettered")
        wait_until(lambda: messages_in(sqs, url) == 0, "the queue emptied")
    finally:
        poller.stop()

    # Then every good message was handled once and deleted, the failing one was handled
    # on each of its receives and then left for the dead-letter queue
    assert seen == {"ok-1": 1, "ok-2": 1, "ok-3": 1, "ok-4": 1, "poison": MAX_RECEIVES}
    assert (poller.delivered, poller.failed) == (4, MAX_RECEIVES)
    dead = sqs.receive_message(QueueUrl=dead_url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in dead] == ["poison"]


def test_after_stop_nothing_more_is_received(queues: tuple[Any, str, str]) -> None:
    sqs, url, _ = queues
    handled: list[str] = []

    def handle(messages: list[Message]) -> Iterator[tuple[Message, bool]]:
        for message in messages:
            handled.append(message["Body"])
            yield message, True

    # Given a poller that has handled one message
    poller = QueuePoller(sqs, url, handle, name="test", batch_size=10, retry_delay_seconds=1)
    poller.start()
    sqs.send_message(QueueUrl=url, MessageBody="before")
    try:
        wait_until(lambda: handled == ["before"], "the first message handled")
    finally:
        # When it is stopped (stop returns once its threads have ended)
        poller.stop()

    # Then its threads have ended and a message sent afterwards stays in the queue
    assert not poller.polling
    sqs.send_message(QueueUrl=url, MessageBody="after")
    assert messages_in(sqs, url) == 1
    assert handled == ["before"]


def test_a_stop_request_ends_every_poller_of_a_group_without_waiting_for_each(
    queues: tuple[Any, str, str],
) -> None:
    sqs, url, dead_url = queues

    def handle(messages: list[Message]) -> Iterator[tuple[Message, bool]]:
        for message in messages:
            yield message, True

    # Given a group of pollers, long-polling two queues with two threads each
    group = Pollers()
    pollers = [
        QueuePoller(
            sqs, queue, handle, name=f"test {n}", batch_size=10, retry_delay_seconds=1, threads=2
        )
        for n, queue in enumerate((url, dead_url))
    ]
    for poller in pollers:
        group.add(poller)
    group.start()
    wait_until(lambda: all(p.polling for p in pollers), "the pollers polling")

    # When the group is asked to stop (request_stop returns at once, joining nothing)
    group.request_stop()

    # Then every poller's threads end by themselves, each within its long poll
    wait_until(lambda: not any(p.polling for p in pollers), "every poller stopped")
    sqs.send_message(QueueUrl=url, MessageBody="after")
    assert messages_in(sqs, url) == 1
    group.stop()  # joins ended threads: returns at once
