"""Identifiers: customer ids and run ids (the job names made of them: stages.py).

A customer id becomes an S3 key, a file name and a multi-model endpoint TargetModel, so
it must pass the allow-list here before it reaches any of them.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

CUSTOMER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
# The pattern in words, for every message that refuses an id (readings, metadata, the API).
CUSTOMER_ID_RULE = (
    "1 to 64 characters of letters, digits, '_' or '-', starting with a letter or digit"
)
_CUSTOMER_ID = re.compile(CUSTOMER_ID_PATTERN)

# A run is one upload's journey: one processing job, one training job, one registration.
# Run ids sort in the order uploads reached the upload queue, which is what decides which
# model version is newer: "q", the queue's sequence number (zero-padded, so that text order
# is number order), then the upload event's time for people.
SEQUENCE_DIGITS = 10
RUN_ID_PATTERN = r"^q[0-9]{10}-[0-9]{8}t[0-9]{6}$"
_RUN_ID = re.compile(RUN_ID_PATTERN)
_SEQUENCER = re.compile(r"[0-9A-Fa-f]{1,64}")


class InvalidCustomerIdError(ValueError):
    """A customer id that does not match :data:`CUSTOMER_ID_PATTERN`."""

    def __init__(self, customer_id: object) -> None:
        shown = repr(customer_id)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"invalid customer id {shown}: it must be {CUSTOMER_ID_RULE}")


def is_valid_customer_id(customer_id: object) -> bool:
    # fullmatch rather than match: '$' alone would accept a trailing newline.
    return isinstance(customer_id, str) and _CUSTOMER_ID.fullmatch(customer_id) is not None


def validate_customer_id(customer_id: object) -> str:
    if not is_valid_customer_id(customer_id):
        raise InvalidCustomerIdError(customer_id)
    assert isinstance(customer_id, str)
    return customer_id


def run_id_for_upload(sequence: int, uploaded_at: datetime) -> str:
    """The run id of the upload the queue numbered ``sequence`` (see
    :meth:`fleetcast_common.upload_queue.UploadQueue.arrive`)."""
    if not 0 < sequence < 10**SEQUENCE_DIGITS:
        raise ValueError(
            f"upload sequence number {sequence} is outside 1..{10**SEQUENCE_DIGITS - 1}"
        )
    return f"q{sequence:0{SEQUENCE_DIGITS}d}-{uploaded_at.astimezone(UTC):%Y%m%dt%H%M%S}"


def upload_sequence(run_id: str) -> int | None:
    """The queue's sequence number inside a run id; None for a string that is no run id."""
    if not is_valid_run_id(run_id):
        return None
    return int(run_id[1 : 1 + SEQUENCE_DIGITS])


def upload_identity(bucket: str, key: str, revision: str) -> str:
    """The same for every delivery of one upload event.

    ``revision`` is the object's version id when the bucket is versioned, else its ETag,
    so re-uploading the same key with new content is a new upload.
    """
    return hashlib.sha256(f"{bucket}\n{key}\n{revision}".encode()).hexdigest()


def object_identity(bucket: str, key: str) -> str:
    """One S3 object key, of any length, as a short DynamoDB sort key."""
    return hashlib.sha256(f"{bucket}\n{key}".encode()).hexdigest()


def sequencer_order(sequencer: str) -> str:
    """S3's ``sequencer`` in a form whose text order is the order of events on one key.

    S3's rule: left-pad the shorter hexadecimal string with zeros, then compare.
    """
    if _SEQUENCER.fullmatch(sequencer) is None:
        raise ValueError(
            f"S3 sequencer {sequencer!r} is not a hexadecimal string of 1 to 64 digits"
        )
    return sequencer.upper().rjust(64, "0")


def is_valid_run_id(run_id: str) -> bool:
    return _RUN_ID.fullmatch(run_id) is not None
