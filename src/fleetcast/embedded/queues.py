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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.sqs_poller import Message, Pollers, QueuePoller
from fleetcast.embedded.template import REGION, LocalTemplate

log = logging.getLogger("fleetcast.embedded.queues")

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
    # ScalingConfig.MaximumConcurrency: at most this many batches at once (None: no cap).
    maximum_concurrency: int | None = None


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
                maximum_concurrency=(
                    int(properties["ScalingConfig"]["MaximumConcurrency"])
                    if "MaximumConcurrency" in properties.get("ScalingConfig", {})
                    else None
                ),
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


class QueueDelivery(Pollers):
    """Pollers that feed each SQS event source's function, as Lambda's pollers do: one
    per mapping it is handed (the stack reads them once, see :func:`event_source_mappings`)."""

    def __init__(
        self,
        sqs: Any,
        template: LocalTemplate,
        functions: dict[str, LocalFunction],
        mappings: list[EventSourceMapping],
        sqs_of_function: Callable[[str], Any] | None = None,
    ) -> None:
        self._sqs = sqs
        super().__init__()
        # Lambda polls with the function's execution role (its policy grants the queue).
        sqs_of = sqs_of_function or (lambda _: sqs)
        for mapping in mappings:
            deliver = _BatchDelivery(
                mapping,
                template.arn(mapping.queue_logical_id),
                functions[mapping.function_logical_id],
            )
            self.add(
                QueuePoller(
                    sqs_of(mapping.function_logical_id),
                    self._configure(template, mapping.queue_logical_id),
                    deliver,
                    name=f"sqs {mapping.queue_logical_id}",
                    batch_size=mapping.batch_size,
                    retry_delay_seconds=RETRY_DELAY_SECONDS,
                    # As many pollers as the function has warm workers: batches run
                    # concurrently.
                    threads=deliver.function.concurrency,
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


@dataclass
class _BatchDelivery:
    """One invocation per received batch; the answer says which messages failed."""

    mapping: EventSourceMapping
    queue_arn: str
    function: LocalFunction

    def __call__(self, messages: list[Message]) -> Iterator[tuple[Message, bool]]:
        started = time.monotonic()
        try:
            answer = self.function.invoke(sqs_event(messages, self.queue_arn))
            failed = failed_message_ids(answer, messages, self.mapping.report_batch_item_failures)
        except Exception as error:
            log.error("%s failed on a batch of %d: %s", self.function.name, len(messages), error)
            failed = {m["MessageId"] for m in messages}
        for message in messages:
            if message["MessageId"] in failed:
                log.warning(
                    "%s: message %s failed (receive %s), visible again in %d s",
                    self.function.name,
                    message["MessageId"],
                    message.get("Attributes", {}).get("ApproximateReceiveCount", "?"),
                    RETRY_DELAY_SECONDS,
                )
            yield message, message["MessageId"] not in failed
        log.debug(
            "%s: batch of %d in %.2f s",
            self.function.name,
            len(messages),
            time.monotonic() - started,
        )
