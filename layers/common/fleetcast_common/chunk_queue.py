"""The registration chunks queue: the only module that sends to it.

SQS takes at most 10 messages a request; a message is one chunk (a few hundred bytes).
"""

from __future__ import annotations

from typing import Any

from fleetcast_common.registration import RegistrationChunk

_MESSAGES_PER_REQUEST = 10


class ChunksNotQueuedError(Exception):
    """SQS refused some chunks after botocore's retries; the coordinator's event is
    retried, and chunks already queued are registered once whatever the repeats."""


def enqueue_chunks(sqs: Any, queue_url: str, chunks: list[RegistrationChunk]) -> None:
    for start in range(0, len(chunks), _MESSAGES_PER_REQUEST):
        batch = chunks[start : start + _MESSAGES_PER_REQUEST]
        answer = sqs.send_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(index), "MessageBody": chunk.model_dump_json()}
                for index, chunk in enumerate(batch)
            ],
        )
        failed = answer.get("Failed", [])
        if failed:
            names = [batch[int(f["Id"])].chunk_id for f in failed]
            raise ChunksNotQueuedError(
                f"{len(failed)} chunks were not queued ({failed[0].get('Code')}): {names[:5]}"
            )
