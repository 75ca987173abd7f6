"""The registration chunks queue: the only module that sends to it, and the message that
register-chunk parses from it (``ChunkMessage``, for Powertools' BatchProcessor).

SendMessageBatch takes at most 10 messages a request (SQS message quotas: "A single
message batch request can include a maximum of 10 messages"), and its total payload, the
sum of the bodies (and attributes; these messages have none), is bounded like one
message's body: 1 MiB, 1,048,576 bytes, since SQS raised it from 256 KiB (the
SendMessage reference now says "The maximum size is 1 MiB or 1,048,576 bytes"; moto 5.2
refuses a longer batch with BatchRequestTooLong). A chunk of unlisted archives carries
its customer ids: 2000 ids of 64 characters make a body of about 140 KB, so ten such
chunks are more than one request may carry. Requests are cut by count and by size.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aws_lambda_powertools.utilities.parser.models import SqsRecordModel
from pydantic import Json

from fleetcast_common.registration import RegistrationChunk, uncounted_chunks
from fleetcast_common.registry import ModelRegistry

MESSAGES_PER_REQUEST = 10
BYTES_PER_REQUEST = 1_048_576
# template.yaml's RegistrationChunksQueue: its name, its dead-letter queue's, and the
# deliveries of a chunk that fail before SQS dead-letters it (maxReceiveCount). A template
# test holds them to the template.
QUEUE_NAME = "{prefix}-registration-chunks"
DEAD_LETTER_QUEUE_NAME = "{prefix}-registration-chunks-dlq"
MAX_RECEIVES = 5


class ChunkMessage(SqsRecordModel):
    """One message of the chunks queue, as register-chunk receives it: its body is a chunk
    (a body that is not one fails that record alone, as any failure does)."""

    body: Json[RegistrationChunk]


class ChunksNotQueuedError(Exception):
    """SQS refused some chunks after botocore's retries; the coordinator's event is
    retried, and chunks already queued are registered once whatever the repeats."""


def enqueue_chunks(sqs: Any, queue_url: str, chunks: list[RegistrationChunk]) -> None:
    for batch in _requests([(chunk, chunk.model_dump_json()) for chunk in chunks]):
        answer = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "MessageBody": body} for index, (_, body) in enumerate(batch)
            ],
        )
        failed = answer.get("Failed", [])
        if failed:
            names = [batch[int(f["Id"])][0].chunk_id for f in failed]
            raise ChunksNotQueuedError(
                f"{len(failed)} chunks were not queued ({failed[0].get('Code')}): {names[:5]}"
            )


def _requests(
    bodies: list[tuple[RegistrationChunk, str]],
) -> Iterator[list[tuple[RegistrationChunk, str]]]:
    """Consecutive runs of at most :data:`MESSAGES_PER_REQUEST` messages whose bodies come
    to at most :data:`BYTES_PER_REQUEST` bytes (UTF-8, as SQS counts them)."""
    batch: list[tuple[RegistrationChunk, str]] = []
    size = 0
    for chunk, body in bodies:
        length = len(body.encode())
        if batch and (len(batch) == MESSAGES_PER_REQUEST or size + length > BYTES_PER_REQUEST):
            yield batch
            batch, size = [], 0
        batch.append((chunk, body))
        size += length
    if batch:
        yield batch


def take_back_dead_letters(sqs: Any, dead_letter_url: str, run_id: str, numbers: set[int]) -> int:
    """Delete from the dead-letter queue the messages of ``run_id``'s chunks ``numbers``
    (sent to the chunks queue again, whole): how many. Others are left there, visible
    again once every message has been looked at."""
    taken = 0
    others: list[str] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=dead_letter_url, MaxNumberOfMessages=10, VisibilityTimeout=60
        ).get("Messages", [])
        if not messages:
            break
        for message in messages:
            try:
                chunk: RegistrationChunk | None = RegistrationChunk.model_validate_json(
                    message["Body"]
                )
            except ValueError:
                chunk = None
            if chunk is not None and chunk.run_id == run_id and chunk.number in numbers:
                sqs.delete_message(QueueUrl=dead_letter_url, ReceiptHandle=message["ReceiptHandle"])
                taken += 1
            else:
                others.append(message["ReceiptHandle"])
    for receipt in others:
        sqs.change_message_visibility(
            QueueUrl=dead_letter_url, ReceiptHandle=receipt, VisibilityTimeout=0
        )
    return taken


def redrive_failed_chunks(
    run_id: str,
    bucket: str,
    prefix: str,
    s3: Any,
    sqs: Any,
    registry: ModelRegistry,
    queue_urls: tuple[str, str] | None = None,
) -> list[int]:
    """Send the run's failed chunks (uncounted, with a failure kept) to the chunks queue
    again, each once, and take their copies out of the dead-letter queue: a user's
    decision, once the cause is fixed. The numbers of the chunks sent. ``queue_urls``:
    the chunks queue's and its dead-letter queue's (by default, the stack's, named after
    ``prefix``)."""
    chunks = uncounted_chunks(run_id, bucket, s3, registry) or []
    failed = {failure.number for failure in registry.failed_chunks(run_id)}
    chunks = [chunk for chunk in chunks if chunk.number in failed]
    if not chunks:
        return []
    queue_url, dead_letter_url = queue_urls or (
        sqs.get_queue_url(QueueName=name.format(prefix=prefix))["QueueUrl"]
        for name in (QUEUE_NAME, DEAD_LETTER_QUEUE_NAME)
    )
    take_back_dead_letters(sqs, dead_letter_url, run_id, failed)
    for chunk in chunks:
        # Before it is sent: its next delivery's failure, if any, is kept afresh.
        registry.forget_chunk_failure(run_id, chunk.chunk_id)
    enqueue_chunks(sqs, queue_url, chunks)
    return [chunk.number for chunk in chunks]
