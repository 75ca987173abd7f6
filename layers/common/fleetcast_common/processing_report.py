"""Processing's report of a run, as the functions after it and ``fleetcast status`` read
it (the processing container writes it: ``fleetcast_contracts.processing.ProcessingSummary``)."""

from __future__ import annotations

from typing import Any

from fleetcast_common import storage
from fleetcast_contracts import layout
from fleetcast_contracts.processing import SUMMARY_FILE, ProcessingSummary


def processing_summary(s3: Any, bucket: str, run_id: str) -> ProcessingSummary | None:
    """The run's ``summary.json``; None when processing left none (it failed, or has not
    ended)."""
    text = storage.read_text_if_exists(s3, bucket, layout.report_prefix(run_id) + SUMMARY_FILE)
    return None if text is None else ProcessingSummary.model_validate_json(text)


def rows_rejected(s3: Any, bucket: str, run_id: str) -> int | None:
    """How many upload rows processing rejected in a run; None when it left no summary."""
    summary = processing_summary(s3, bucket, run_id)
    return None if summary is None else summary.rows_rejected


def customers_sent(s3: Any, bucket: str, run_id: str) -> list[str]:
    """The customers processing sent to the run's training job (none without a summary)."""
    summary = processing_summary(s3, bucket, run_id)
    if summary is None:
        return []
    # A metadata upload sends only the customers whose calendar changed and who have history.
    return list(summary.metadata.retrained if summary.metadata else summary.customers_list)
