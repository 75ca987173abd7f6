"""Identifiers: customer ids, run ids and the SageMaker job names derived from them.

A customer id becomes an S3 key, a file name and a multi-model endpoint TargetModel, so
it must pass the allow-list here before it reaches any of them.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

CUSTOMER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_CUSTOMER_ID = re.compile(CUSTOMER_ID_PATTERN)

# A run is one upload's journey: one processing job, one training job, one registration.
# Run ids sort by upload time, which is what decides which model version is newer.
RUN_ID_PATTERN = r"^[0-9]{8}t[0-9]{6}-[0-9a-f]{10}$"
_RUN_ID = re.compile(RUN_ID_PATTERN)


class InvalidCustomerIdError(ValueError):
    """A customer id that does not match :data:`CUSTOMER_ID_PATTERN`."""

    def __init__(self, customer_id: object) -> None:
        shown = repr(customer_id)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(
            f"invalid customer id {shown}: it must be 1 to 64 characters of letters, digits, "
            "'_' or '-', starting with a letter or digit"
        )


def is_valid_customer_id(customer_id: object) -> bool:
    # fullmatch rather than match: '$' alone would accept a trailing newline.
    return isinstance(customer_id, str) and _CUSTOMER_ID.fullmatch(customer_id) is not None


def validate_customer_id(customer_id: object) -> str:
    if not is_valid_customer_id(customer_id):
        raise InvalidCustomerIdError(customer_id)
    assert isinstance(customer_id, str)
    return customer_id


def run_id_for_upload(bucket: str, key: str, revision: str, uploaded_at: datetime) -> str:
    """A run id that is the same for every delivery of one upload event.

    ``revision`` is the object's version id when the bucket is versioned, else its ETag,
    so re-uploading the same key with new content starts a new run.
    """
    digest = hashlib.sha256(f"{bucket}\n{key}\n{revision}".encode()).hexdigest()[:10]
    return f"{uploaded_at.astimezone(UTC):%Y%m%dt%H%M%S}-{digest}"


def is_valid_run_id(run_id: str) -> bool:
    return _RUN_ID.fullmatch(run_id) is not None


def processing_job_name(prefix: str, run_id: str) -> str:
    return f"{prefix}-p-{run_id}"


def training_job_name(prefix: str, run_id: str) -> str:
    return f"{prefix}-t-{run_id}"


def run_id_from_job_name(prefix: str, job_name: str) -> str | None:
    """The run id inside one of our job names, or None for a job that is not ours."""
    for kind in ("p", "t"):
        head = f"{prefix}-{kind}-"
        if job_name.startswith(head) and is_valid_run_id(job_name[len(head) :]):
            return job_name[len(head) :]
    return None
