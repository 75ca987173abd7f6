"""Processing's report of a run, as the functions after it read it (the processing
container writes it: ``fleetcast_common.contracts.processing.ProcessingSummary``)."""

from __future__ import annotations

from typing import Any

from fleetcast_common import layout, storage
from fleetcast_common.contracts.errors import error_code
from fleetcast_common.contracts.processing import SUMMARY_FILE


def rows_rejected(s3: Any, bucket: str, run_id: str) -> int | None:
    """How many upload rows processing rejected in a run; None when it left no summary."""
    try:
        summary = storage.read_json(s3, bucket, layout.report_prefix(run_id) + SUMMARY_FILE)
    except Exception as error:
        if error_code(error) in ("NoSuchKey", "404"):
            return None
        raise
    return int(summary["rows_rejected"])
