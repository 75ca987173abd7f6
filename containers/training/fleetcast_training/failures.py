"""Why a customer or the whole job failed, in words an operator can act on."""

from __future__ import annotations

from collections import Counter
from enum import StrEnum


class FailureKind(StrEnum):
    """Groups failed customers in the job's summary."""

    INVALID_FILE_NAME = "invalid_file_name"
    UNREADABLE = "unreadable"
    TOO_FEW_ROWS = "too_few_rows"
    FIT_FAILED = "fit_failed"
    WORKER_DIED = "worker_died"

    def phrase(self, min_rows: int) -> str:
        """Completes "N customers ..." in the summary."""
        return {
            FailureKind.INVALID_FILE_NAME: "had an invalid file name",
            FailureKind.UNREADABLE: "had unreadable data",
            FailureKind.TOO_FEW_ROWS: f"had fewer than {min_rows} rows",
            FailureKind.FIT_FAILED: "failed while fitting",
            FailureKind.WORKER_DIED: "lost to a crashed worker process",
        }[self]


class CustomerFailure(Exception):
    """A customer that cannot be trained; the job records it and carries on."""

    def __init__(self, kind: FailureKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class JobFailure(Exception):
    """The job as a whole cannot produce usable output; the message becomes FailureReason."""


def summarise_failures(
    kinds: list[FailureKind], reasons: list[str], total: int, min_rows: int
) -> str:
    """``"all 3 customers failed: 3 had fewer than 28 rows (first: c1: has 3 rows, ...)"``;
    ``reasons`` are ``"{customer_id}: {reason}"`` in customer order."""
    example = reasons[0] if reasons else "no reason given"
    if total == 1:
        return f"the only customer failed: {example}"
    counts = Counter(kinds)
    parts = ", ".join(f"{count} {kind.phrase(min_rows)}" for kind, count in counts.most_common())
    return f"all {total} customers failed: {parts} (first: {example})"
