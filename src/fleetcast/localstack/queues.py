"""SQS event sources, locally: what Lambda's event source mapping does for each
``AWS::Lambda::EventSourceMapping`` from an SQS queue in template.yaml.

moto keeps the queues (with the template's visibility timeout and redrive policy, which
moves a message to the dead-letter queue once it has been received ``maxReceiveCount``
times); pollers here receive up to ``BatchSize`` messages, invoke the function with an
SQS event, and delete what succeeded. With ``ReportBatchItemFailures`` only the messages
the function names come back; an invocation that raises fails the whole batch. A failed
message is visible again after ``RETRY_DELAY_SECONDS`` rather than the queue's visibility
timeout (minutes on AWS), so a local run retries and dead-letters promptly.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from fleetcast.localstack.lambdas import LocalFunction
from fleetcast.localstack.template import REGION, LocalTemplate

log = logging.getLogger("fleetcast.localstack.queues")

RETRY_DELAY_SECONDS = 1
# Lambda's default batch size for an SQS event source.
DEFAULT_BATCH_SIZE = 10
# The queue attributes a template sets that matter to delivery (CloudFormation's names
# are the API's here).
_DELIVERY_ATTRIBUTES = ("VisibilityTimeout", "MessageRetentionPeriod", "RedrivePolicy")


@dataclass(frozen=True)
class EventSourceMapping:
    """One ``Type: SQS`` event of a function in template.yaml."""

    function_logical_id: str
    queue_logical_id: str
    batch_size: int
    report_batch_item_failures: bool


def event_source_mappings(template: LocalTemplate) -> list[EventSourceMapping]:
    """The template's SQS event source mappings (``AWS::Lambda::EventSourceMapping`` with
    ``FunctionName: !Ref <function>`` and ``EventSourceArn: !GetAtt <queue>.Arn``)."""
    mappings = []
    for logical_id, resource in template.resources_of_type(
        "AWS::Lambda::EventSourceMapping"
    ).items():
        properties = resource["Properties"]
        function, queue = properties.get("FunctionName"), properties.get("EventSourceArn")
        if not (
            isinstance(function, dict)
            and "Ref" in function
            and isinstance(queue, dict)
            and "Fn::GetAtt" in queue
        ):
            raise ValueError(
                f"{logical_id}: the local stack needs FunctionName as !Ref <function> and "
                f"EventSourceArn as !GetAtt <queue>.Arn, not {function!r} and {queue!r}"
            )
        mappings.append(
            EventSourceMapping(
                function_logical_id=function["Ref"],
                queue_logical_id=queue["Fn::GetAtt"][0],
                batch_size=int(properties.get("BatchSize", DEFAULT_BATCH_SIZE)),
                report_batch_item_failures="ReportBatchItemFailures"
                in properties.get("FunctionResponseTypes", []),
            )
        )
    return mappings


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda hands a function for a batch of received messages."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": message.get("Attributes", {}),
                "messageAttributes": message.get("MessageAttributes", {}),
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for message in messages
        ]
    }


def failed_message_ids(
    answer: Any, messages: list[dict[str, Any]], reports_failures: bool
) -> set[str]:
    """The messages of a batch that go back to the queue, from the function's answer."""
    if not reports_failures:
        return set()
    failures = (answer or {}).get("batchItemFailures", []) if isinstance(answer, dict) else []
    ids = {str(f.get("itemIdentifier")) for f in failures}
    known = {m["MessageId"] for m in messages}
    if not ids <= known:
        # Lambda treats an unknown identifier as a failure of the whole batch.
        return known
    return ids


@dataclass
class _Source:
    mapping: EventSourceMapping
    queue_url: str
    queue_arn: str
    function: LocalFunction


class QueueDelivery:
    """Pollers that feed each SQS event source's function, as Lambda's pollers do."""

    def __init__(
        self, sqs: Any, template: LocalTemplate, functions: dict[str, LocalFunction]
    ) -> None:
        self._sqs = sqs
        self._sources: list[_Source] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self.delivered = 0
        self.failed = 0
        for mapping in event_source_mappings(template):
            queue_url = self._configure(template, mapping.queue_logical_id)
            self._sources.append(
                _Source(
                    mapping,
                    queue_url,
                    template.arn(mapping.queue_logical_id),
                    functions[mapping.function_logical_id],
                )
            )

    def _configure(self, template: LocalTemplate, queue_logical_id: str) -> str:
        """The queue's URL, with the template's delivery attributes set on it."""
        name = template.physical_name(queue_logical_id)
        queue_url: str = self._sqs.get_queue_url(QueueName=name)["QueueUrl"]
        properties = template.resolve(template.resources[queue_logical_id].get("Properties", {}))
        attributes = {
            key: json.dumps(value) if isinstance(value, dict) else str(value)
            for key, value in properties.items()
            if key in _DELIVERY_ATTRIBUTES
        }
        if attributes:
            self._sqs.set_queue_attributes(QueueUrl=queue_url, Attributes=attributes)
        return queue_url

    def start(self) -> None:
        for source in self._sources:
            # As many pollers as the function has warm workers: batches run concurrently.
            for index in range(source.function.concurrency):
                thread = threading.Thread(
                    target=self._poll,
                    args=(source,),
                    daemon=True,
                    name=f"sqs {source.mapping.queue_logical_id} {index}",
                )
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)

    def _poll(self, source: _Source) -> None:
        while not self._stop.is_set():
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=source.queue_url,
                    MaxNumberOfMessages=source.mapping.batch_size,
                    WaitTimeSeconds=1,
                    AttributeNames=["All"],
                ).get("Messages", [])
            except Exception:
                if not self._stop.is_set():
                    log.exception("cannot read %s", source.queue_url)
                    self._stop.wait(1)
                continue
            if messages:
                self._deliver(source, messages)

    def _deliver(self, source: _Source, messages: list[dict[str, Any]]) -> None:
        started = time.monotonic()
        try:
            answer = source.function.invoke(sqs_event(messages, source.queue_arn))
            failed = failed_message_ids(answer, messages, source.mapping.report_batch_item_failures)
        except Exception as error:
            log.error("%s failed on a batch of %d: %s", source.function.name, len(messages), error)
            failed = {m["MessageId"] for m in messages}
        for message in messages:
            if message["MessageId"] in failed:
                self.failed += 1
                log.warning(
                    "%s: message %s failed (receive %s), visible again in %d s",
                    source.function.name,
                    message["MessageId"],
                    message.get("Attributes", {}).get("ApproximateReceiveCount", "?"),
                    RETRY_DELAY_SECONDS,
                )
                self._sqs.change_message_visibility(
                    QueueUrl=source.queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=RETRY_DELAY_SECONDS,
                )
            else:
                self.delivered += 1
                self._sqs.delete_message(
                    QueueUrl=source.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )
        log.debug(
            "%s: batch of %d in %.2f s",
            source.function.name,
            len(messages),
            time.monotonic() - started,
        )
