"""Issue 27, finding 4: SendMessageBatch's total size, against a moto server (moto 5.2
refuses a batch whose bodies come to more than 1 MiB, BatchRequestTooLong, as SQS does).
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from fleetcast_common.chunk_queue import BYTES_PER_REQUEST, MESSAGES_PER_REQUEST, enqueue_chunks
from fleetcast_common.registration import RegistrationChunk

pytestmark = pytest.mark.integration
RUN = "q0000000001-20261201t000000"
# RegistrationChunkSize's MaxValue and the customer id allow-list's longest id.
LARGEST_CHUNK_CUSTOMERS, LONGEST_ID = 2000, 64


def _chunks(count: int) -> list[RegistrationChunk]:
    return [
        RegistrationChunk(
            run_id=RUN,
            training_job=f"fleetcast-t-{RUN}",
            chunk_id=f"unlisted-{number}",
            unlisted=[f"{number:04d}{i:060d}" for i in range(LARGEST_CHUNK_CUSTOMERS)],
            number=number,
        )
        for number in range(count)
    ]


def test_ten_of_the_largest_chunks_are_queued_in_requests_sqs_accepts(aws_env: str) -> None:
    # Given ten chunks of 2000 ids of 64 characters: more than one request may carry
    sqs: Any = boto3.client("sqs")
    queue_url = sqs.create_queue(QueueName="chunks-limits")["QueueUrl"]
    chunks = _chunks(MESSAGES_PER_REQUEST)
    assert len(chunks[0].unlisted[0]) == LONGEST_ID
    assert sum(len(c.model_dump_json().encode()) for c in chunks) > BYTES_PER_REQUEST
    # When they are queued
    enqueue_chunks(sqs, queue_url, chunks)
    # Then every one arrives, once
    received: list[str] = []
    while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get(
        "Messages", []
    ):
        received += [json.loads(m["Body"])["chunk_id"] for m in batch]
    assert sorted(received) == sorted(c.chunk_id for c in chunks)
