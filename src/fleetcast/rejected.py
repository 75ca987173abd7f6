"""``fleetcast rejected RUN``: the rows processing rejected in a run, read from the run's
``report/rejected.csv`` (their line numbers and reasons) and ``summary.json`` (how many
of each reason, every row counted, where the CSV lists at most a thousand a reason)."""

from __future__ import annotations

import csv
import io
from collections import Counter
from typing import Any

from pydantic import BaseModel

from fleetcast.status import most_first, rejected_report_key
from fleetcast_common import storage
from fleetcast_common.processing_report import processing_summary


class RejectedReason(BaseModel):
    reason: str
    rows: int
    # What rejected.csv says of the reason (its first row's message).
    message: str


class RejectedRows(BaseModel):
    run_id: str
    report: str  # the S3 URI of rejected.csv
    rows_read: int | None
    rows_rejected: int
    by_reason: list[RejectedReason]  # most first
    # The rows rejected.csv lists, as it lists them: line (empty for a whole period), the
    # row's values as written, reason and message.
    rows: list[dict[str, str]]


class NoRejectedReportError(LookupError):
    """The run has no rejected.csv: processing failed before writing it, or has not ended."""


def rejected_rows(s3: Any, bucket: str, run_id: str) -> RejectedRows:
    key = rejected_report_key(run_id)
    text = storage.read_text_if_exists(s3, bucket, key)
    if text is None:
        raise NoRejectedReportError(
            f"run {run_id} has no s3://{bucket}/{key}: its processing job has not written its "
            "report (see `fleetcast status`)"
        )
    rows = list(csv.DictReader(io.StringIO(text)))
    messages: dict[str, str] = {}
    for row in rows:
        messages.setdefault(row["reason"], row["message"])
    summary = processing_summary(s3, bucket, run_id)
    # The summary counts every row; the CSV lists the first thousand of each reason.
    counts = (
        Counter(summary.rejected_by_reason)
        if summary is not None
        else Counter(row["reason"] for row in rows)
    )
    return RejectedRows(
        run_id=run_id,
        report=f"s3://{bucket}/{key}",
        rows_read=summary.rows_read if summary is not None else None,
        rows_rejected=sum(counts.values()),
        by_reason=[
            RejectedReason(reason=reason, rows=count, message=messages.get(reason, ""))
            for reason, count in most_first(counts)
        ],
        rows=rows,
    )
