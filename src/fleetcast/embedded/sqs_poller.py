"""The one loop that reads SQS for the local stack's deliveries.

Both Lambda's SQS event sources (:mod:`~fleetcast.embedded.queues`) and EventBridge
rules delivered through SQS (:mod:`~fleetcast.embedded.events`) long-poll a queue, hand
what arrives to a function, delete each message that was handled, and make each failed
one visible again after a short delay so SQS's redrive policy counts its receives and
dead-letters it in time. What differs between them (how a batch becomes invocations) is
the ``handle`` callable; the rest is here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

log = logging.getLogger("fleetcast.embedded.sqs_poller")

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


@dataclass(eq=False)
class QueuePoller:
    """``threads`` pollers of one queue, each receiving up to ``batch_size`` messages and
    settling each message ``handle`` reports on."""

    sqs: Any
    queue_url: str
    handle: Handle
    _: KW_ONLY
    name: str
    batch_size: int
    retry_delay_seconds: int
    attribute_names: tuple[str, ...] = ("All",)
    threads: int = 1
    delivered: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)
    _running: list[threading.Thread] = field(default_factory=list, init=False, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _count_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def start(self) -> None:
        for index in range(self.threads):
            thread = threading.Thread(target=self._poll, daemon=True, name=f"{self.name} {index}")
            thread.start()
            self._running.append(thread)

    def request_stop(self) -> None:
        """Receive no more; a receive under way ends within :data:`WAIT_SECONDS`."""
        self._stop.set()

    def stop(self) -> None:
        """Stop receiving; a batch being handled is finished first (up to a while)."""
        self.request_stop()
        for thread in self._running:
            thread.join(timeout=STOP_JOIN_SECONDS)

    @property
    def polling(self) -> bool:
        return any(thread.is_alive() for thread in self._running)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url,
                    MaxNumberOfMessages=self.batch_size,
                    WaitTimeSeconds=WAIT_SECONDS,
                    AttributeNames=list(self.attribute_names),
                ).get("Messages", [])
            except Exception:
                if not self._stop.is_set():
                    log.exception("cannot read %s", self.queue_url)
                    self._stop.wait(RECEIVE_ERROR_PAUSE_SECONDS)
                continue
            if messages:
                for message, handled in self.handle(messages):
                    self._settle(message, handled)

    def _settle(self, message: Message, handled: bool) -> None:
        if handled:
            self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])
        else:
            self.sqs.change_message_visibility(
                QueueUrl=self.queue_url,
                ReceiptHandle=message["ReceiptHandle"],
                VisibilityTimeout=self.retry_delay_seconds,
            )
        with self._count_lock:
            if handled:
                self.delivered += 1
            else:
                self.failed += 1


class Pollers:
    """Queue pollers started and stopped together (a delivery's, one per queue)."""

    def __init__(self) -> None:
        self._pollers: list[QueuePoller] = []

    def add(self, poller: QueuePoller) -> None:
        self._pollers.append(poller)

    def start(self) -> None:
        for poller in self._pollers:
            poller.start()

    def request_stop(self) -> None:
        """Tell every poller to stop, without waiting: their long polls end together."""
        for poller in self._pollers:
            poller.request_stop()

    def stop(self) -> None:
        self.request_stop()
        for poller in self._pollers:
            poller.stop()
