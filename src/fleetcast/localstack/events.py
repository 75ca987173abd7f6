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
import threading
from dataclasses import dataclass
from typing import Any

from fleetcast.localstack.lambdas import LocalFunction
from fleetcast.localstack.template import ACCOUNT_ID

log = logging.getLogger("fleetcast.localstack.events")

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


@dataclass
class Delivery:
    rule_name: str
    queue_url: str
    function: LocalFunction


class EventDelivery:
    """Pollers that move events from each rule's queue into its function."""

    def __init__(self, sqs: Any, events: Any) -> None:
        self._sqs = sqs
        self._events = events
        self._deliveries: list[Delivery] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.delivered = 0
        self.failed = 0

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
        self._deliveries.append(Delivery(rule_name, queue_url, function))

    def start(self) -> None:
        for delivery in self._deliveries:
            thread = threading.Thread(
                target=self._poll,
                args=(delivery,),
                daemon=True,
                name=f"deliver {delivery.rule_name}",
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _poll(self, delivery: Delivery) -> None:
        while not self._stop.is_set():
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=delivery.queue_url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=1,
                    AttributeNames=["ApproximateReceiveCount"],
                ).get("Messages", [])
            except Exception:
                if not self._stop.is_set():
                    log.exception("cannot read %s", delivery.queue_url)
                    self._stop.wait(1)
                continue
            for message in messages:
                self._deliver(delivery, message)

    def _deliver(self, delivery: Delivery, message: dict[str, Any]) -> None:
        event = normalise_event(json.loads(message["Body"]))
        try:
            delivery.function.invoke(event)
        except Exception as error:
            self.failed += 1
            attempt = message.get("Attributes", {}).get("ApproximateReceiveCount", "?")
            log.error(
                "%s failed on event %s (attempt %s of %d): %s",
                delivery.function.name,
                event.get("id"),
                attempt,
                MAX_RECEIVES,
                error,
            )
            self._sqs.change_message_visibility(
                QueueUrl=delivery.queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=RETRY_DELAY_SECONDS,
            )
            return
        self.delivered += 1
        self._sqs.delete_message(
            QueueUrl=delivery.queue_url, ReceiptHandle=message["ReceiptHandle"]
        )
