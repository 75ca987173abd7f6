"""Processing's report of a run, as the functions after it read it (the processing
container writes it: ``fleetcast_contracts.processing.ProcessingSummary``)."""

from __future__ import annotations

import json
from typing import Any

from fleetcast_common import storage
from fleetcast_contracts import layout
from fleetcast_contracts.processing import SUMMARY_FILE


def _summary(s3: Any, bucket: str, run_id: str) -> dict[str, Any] | None:
    text = storage.read_text_if_exists(s3, bucket, layout.report_prefix(run_id) + SUMMARY_FILE)
    if text is None:
        return None
    summary: dict[str, Any] = json.loads(text)
    return summary


def rows_rejected(s3: Any, bucket: str, run_id: str) -> int | None:
    """How many upload rows processing rejected in a run; None when it left no summary."""
    summary = _summary(s3, bucket, run_id)
    return None if summary is None else int(summary["rows_rejected"])


def customers_sent(s3: Any, bucket: str, run_id: str) -> list[str]:
    """The customers processing sent to the run's training job (none without a summary)."""
    summary = _summary(s3, bucket, run_id)
    if summary is None:
        return []
    # A metadata upload sends only the customers whose calendar changed and who have history.
    metadata = summary.get("metadata")
    sent = metadata.get("retrained", []) if metadata else summary.get("customers_list", [])
    return [str(customer_id) for customer_id in sent]
