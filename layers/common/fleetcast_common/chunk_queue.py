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

from fleetcast_common.registration import RegistrationChunk

MESSAGES_PER_REQUEST = 10
BYTES_PER_REQUEST = 1_048_576


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
