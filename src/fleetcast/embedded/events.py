"""EventBridge to Lambda, locally.

moto matches events against rules but cannot deliver to a Lambda target. So each
function's EventBridgeRule from template.yaml becomes a real rule in moto whose target
is an SQS queue, and a poller hands each message to the function: the pattern matching
is moto's, the handler is ours. A failing event is retried (Lambda's asynchronous
invocation retries twice) and then moved to a dead-letter queue by SQS's redrive policy.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fleetcast.embedded.lambda_workers import ASYNCHRONOUS
from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.sqs_poller import Message, Pollers, QueuePoller
from fleetcast.embedded.template import ACCOUNT_ID

log = logging.getLogger("fleetcast.embedded.events")

MAX_RECEIVES = 3  # one delivery plus Lambda's two asynchronous retries
RETRY_DELAY_SECONDS = 2


def normalise_event(event: dict[str, Any]) -> dict[str, Any]:
    """Undo moto's departures from the event shapes AWS documents."""
    # moto leaves out the envelope's account, which Powertools' EventBridge model requires.
    event.setdefault("account", ACCOUNT_ID)
    if event.get("source") == "aws.s3":
        obj = event.get("detail", {}).get("object", {})
        if "eTag" in obj and "etag" not in obj:
            obj["etag"] = obj.pop("eTag")
        if obj.get("version-id") == "null":
            del obj["version-id"]
    return event


class EventDelivery(Pollers):
    """Pollers that move events from each rule's queue into its function."""

    def __init__(self, sqs: Any, events: Any) -> None:
        self._sqs = sqs
        self._events = events
        super().__init__()
        self._queue_urls: dict[str, list[str]] = {}

    def add_rule(
        self, rule_name: str, pattern: dict[str, Any], function: LocalFunction, dead_letter_arn: str
    ) -> None:
        queue_url = self._sqs.create_queue(
            QueueName=f"{rule_name}-target"[:80],
            Attributes={
                "VisibilityTimeout": "900",
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": str(MAX_RECEIVES)}
                ),
            },
        )["QueueUrl"]
        queue_arn = self._sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self._events.put_rule(Name=rule_name, EventPattern=json.dumps(pattern), State="ENABLED")
        self._events.put_targets(
            Rule=rule_name, Targets=[{"Id": function.name[:64], "Arn": queue_arn}]
        )
        self._queue_urls.setdefault(function.name, []).append(queue_url)
        self.add(
            QueuePoller(
                self._sqs,
                queue_url,
                _EventByEvent(function),
                name=f"deliver {rule_name}",
                batch_size=10,
                retry_delay_seconds=RETRY_DELAY_SECONDS,
                attribute_names=("ApproximateReceiveCount",),
            )
        )

    def queue_urls(self, function_name: str) -> list[str]:
        """The queues that feed ``function_name``'s rules. moto puts a matching event in
        them before the call that caused it returns, so once they hold nothing (visible or
        in flight) every such event has been handled."""
        return list(self._queue_urls.get(function_name, []))


@dataclass
class _EventByEvent:
    """One asynchronous invocation per event, as EventBridge makes them."""

    function: LocalFunction

    def __call__(self, messages: list[Message]) -> Iterator[tuple[Message, bool]]:
        for message in messages:
            event = normalise_event(json.loads(message["Body"]))
            try:
                # EventBridge invokes its Lambda targets asynchronously.
                self.function.invoke(event, ASYNCHRONOUS)
            except Exception as error:
                attempt = message.get("Attributes", {}).get("ApproximateReceiveCount", "?")
                log.error(
                    "%s failed on event %s (attempt %s of %d): %s",
                    self.function.name,
                    event.get("id"),
                    attempt,
                    MAX_RECEIVES,
                    error,
                )
                yield message, False
            else:
                yield message, True
