"""The one loop that reads SQS for the local stack's deliveries.

Both Lambda's SQS event sources (:mod:`~fleetcast.localstack.queues`) and EventBridge
rules delivered through SQS (:mod:`~fleetcast.localstack.events`) long-poll a queue, hand
what arrives to a function, delete each message that was handled, and make each failed
one visible again after a short delay so SQS's redrive policy counts its receives and
dead-letters it in time. What differs between them (how a batch becomes invocations) is
the ``handle`` callable; the rest is here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("fleetcast.localstack.sqs_poller")

Message = dict[str, Any]
# Takes a received batch and yields each message with whether it was handled, as soon as
# that is known: the poller deletes it (or returns it to the queue) before the next.
Handle = Callable[[list[Message]], Iterable[tuple[Message, bool]]]

# Long polling: a receive waits this long for a message, which is also how long a stop
# can take to be noticed.
WAIT_SECONDS = 1
# After a failed receive (the gateway going away, say), wait before the next.
RECEIVE_ERROR_PAUSE_SECONDS = 1
STOP_JOIN_SECONDS = 10


class QueuePoller:
    """``threads`` pollers of one queue, each receiving up to ``batch_size`` messages and
    settling each message ``handle`` reports on."""

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handle: Handle,
        *,
        name: str,
        batch_size: int,
        retry_delay_seconds: int,
        attribute_names: tuple[str, ...] = ("All",),
        threads: int = 1,
    ) -> None:
        self._sqs = sqs
        self.queue_url = queue_url
        self._handle = handle
        self._name = name
        self._batch_size = batch_size
        self._retry_delay_seconds = retry_delay_seconds
        self._attribute_names = list(attribute_names)
        self._thread_count = threads
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._count_lock = threading.Lock()
        self.delivered = 0
        self.failed = 0

    def start(self) -> None:
        for index in range(self._thread_count):
            thread = threading.Thread(target=self._poll, daemon=True, name=f"{self._name} {index}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop receiving; a batch being handled is finished first (up to a while)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STOP_JOIN_SECONDS)

    @property
    def polling(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=self._batch_size,
                    WaitTimeSeconds=WAIT_SECONDS,
                    AttributeNames=self._attribute_names,
                ).get("Messages", [])
            except Exception:
                if not self._stop.is_set():
                    log.exception("cannot read %s", self.queue_url)
                    self._stop.wait(RECEIVE_ERROR_PAUSE_SECONDS)
                continue
            if messages:
                for message, handled in self._handle(messages):
                    self._settle(message, handled)

    def _settle(self, message: Message, handled: bool) -> None:
        if handled:
            self._sqs.delete_message(
                QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        else:
            self._sqs.change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=self._retry_delay_seconds,
            )
        with self._count_lock:
            if handled:
                self.delivered += 1
            else:
                self.failed += 1
