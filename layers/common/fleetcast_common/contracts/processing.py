"""The SageMaker Processing container contract, as fleetcast uses it.

Shared by the processing container (which reads and writes these paths), the
start-processing function (which names them in CreateProcessingJob), the local stack
(which lays them out before running the container and uploads them after) and the
functions and CLI that read the job's report.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fleetcast_common.contracts.opt_ml import resolve

# How SageMaker starts the image (CreateProcessingJob's ContainerEntrypoint).
ENTRYPOINT = ["python3", "-m", "fleetcast_processing"]

# Container paths as written in CreateProcessingJob (the local stack maps them under its root).
PROCESSING_ROOT = "/opt/ml/processing"
RAW_INPUT = "/opt/ml/processing/input/raw"
HISTORY_INPUT = "/opt/ml/processing/input/history"
TRAIN_OUTPUT = "/opt/ml/processing/output/train"
HISTORY_OUTPUT = "/opt/ml/processing/output/history"
REPORT_OUTPUT = "/opt/ml/processing/output/report"

INPUT_RAW = "raw"
INPUT_HISTORY = "history"
OUTPUT_TRAIN = "train"
OUTPUT_HISTORY = "history"
OUTPUT_REPORT = "report"

SUMMARY_FILE = "summary.json"
REJECTED_FILE = "rejected.csv"
# The first 1 KB of this file becomes the job's ExitMessage (and FailureReason on failure).
MESSAGE_FILE = "/opt/ml/output/message"
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class ProcessingPaths:
    raw_input: Path
    history_input: Path
    train_output: Path
    history_output: Path
    report_output: Path
    message_file: Path

    @classmethod
    def under(cls, root: Path | None = None) -> ProcessingPaths:
        return cls(
            raw_input=resolve(RAW_INPUT, root),
            history_input=resolve(HISTORY_INPUT, root),
            train_output=resolve(TRAIN_OUTPUT, root),
            history_output=resolve(HISTORY_OUTPUT, root),
            report_output=resolve(REPORT_OUTPUT, root),
            message_file=resolve(MESSAGE_FILE, root),
        )


# --- What the job writes, read back by the local stack and the pipeline's Lambdas ---

# Per-customer files in train_output and history_output (and history_input): ``ds,y``,
# ds as ``YYYY-MM-DD`` (daily) or ``YYYY-MM-DDTHH:00:00`` (hourly), sorted by ds.
HISTORY_COLUMNS = ("ds", "y")
REQUIRED_COLUMNS = ("customer_id", "timestamp", "consumption")
# rejected.csv: one row per rejected input row, values as they appeared in the upload.
REJECTED_COLUMNS = ("line", "customer_id", "timestamp", "consumption", "reason", "message")
FREQUENCIES = ("D", "H")


class RejectReason(StrEnum):
    """The ``reason`` column of rejected.csv and the keys of ``rejected_by_reason``."""

    INVALID_CUSTOMER_ID = "invalid_customer_id"
    INVALID_TIMESTAMP = "invalid_timestamp"
    OUT_OF_RANGE_TIMESTAMP = "out_of_range_timestamp"
    INVALID_CONSUMPTION = "invalid_consumption"
    NEGATIVE_CONSUMPTION = "negative_consumption"
    IMPLAUSIBLE_CONSUMPTION = "implausible_consumption"
    DUPLICATE_ROW = "duplicate_row"
    # A row with more or fewer fields than the header.
    MALFORMED_ROW = "malformed_row"


class ProcessingSummary(BaseModel):
    """``summary.json``: what one processing job did with one upload."""

    model_config = ConfigDict(frozen=True)

    source_name: str
    frequency: str
    rows_read: int = Field(description="Data rows in the upload (blank lines not counted).")
    rows_accepted: int
    rows_rejected: int
    rejected_by_reason: dict[str, int]
    customers: int = Field(description="Customers with at least one accepted row.")
    new_customers: int = Field(description="Of those, customers with no stored history.")
    days_written: int = Field(description="Rows (days, or hours) written over all train files.")
    days_uploaded: int = Field(description="(customer, period) totals built from the upload.")
    days_replaced: int = Field(description="Stored history periods replaced by uploaded ones.")
    customers_list: list[str]
