"""The SageMaker Processing container contract, as fleetcast uses it.

Shared by the processing container (which reads and writes these paths), the
start-processing function (which names them in CreateProcessingJob), the local stack
(which lays them out before running the container and uploads them after) and the
functions and CLI that read the job's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict, Field

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.opt_ml import resolve

# How SageMaker starts the image (CreateProcessingJob's ContainerEntrypoint).
ENTRYPOINT = ["python3", "-m", "fleetcast_processing"]

# Container paths as written in CreateProcessingJob (the local stack maps them under its root).
PROCESSING_ROOT = "/opt/ml/processing"
RAW_INPUT = "/opt/ml/processing/input/raw"
HISTORY_INPUT = "/opt/ml/processing/input/history"
TRAIN_OUTPUT = "/opt/ml/processing/output/train"
HISTORY_OUTPUT = "/opt/ml/processing/output/history"
REPORT_OUTPUT = "/opt/ml/processing/output/report"
METADATA_INPUT = "/opt/ml/processing/input/metadata"
METADATA_OUTPUT = "/opt/ml/processing/output/metadata"
CALENDARS_OUTPUT = "/opt/ml/processing/output/calendars"
FLEET_OUTPUT = "/opt/ml/processing/output/fleet"
# The job's own working files (the upload's readings set aside per shard): on the job's
# storage volume with its inputs and outputs, named by no input or output, so never uploaded.
SCRATCH = "/opt/ml/processing/scratch"

INPUT_RAW = "raw"
INPUT_HISTORY = "history"
OUTPUT_TRAIN = "train"
OUTPUT_HISTORY = "history"
OUTPUT_REPORT = "report"
INPUT_METADATA = "metadata"
OUTPUT_METADATA = "metadata"
OUTPUT_CALENDARS = "calendars"
OUTPUT_FLEET = "fleet"
# What the upload is (start-processing decides from its key).
READINGS = "readings"
METADATA = "metadata"
INPUT_KINDS = (READINGS, METADATA)

SUMMARY_FILE = "summary.json"
REJECTED_FILE = "rejected.csv"
# Accepted readings that replaced a stored reading of the same customer and instant with
# another value: conflicting values between uploads, reported rather than silently resolved.
CHANGED_FILE = "changed.csv"
CHANGED_COLUMNS = ("line", "customer_id", "timestamp", "stored", "uploaded")
CHANGED_ROWS_LISTED = 1000
# The first 1 KB of this file becomes the job's ExitMessage, failed or not; a failed job's
# FailureReason is SageMaker's own generic text ("AlgorithmError: See job logs ...").
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
    metadata_input: Path
    metadata_output: Path
    calendars_output: Path
    fleet_output: Path
    scratch: Path

    @classmethod
    def under(cls, root: Path | None = None) -> ProcessingPaths:
        return cls(
            raw_input=resolve(RAW_INPUT, root),
            history_input=resolve(HISTORY_INPUT, root),
            train_output=resolve(TRAIN_OUTPUT, root),
            history_output=resolve(HISTORY_OUTPUT, root),
            report_output=resolve(REPORT_OUTPUT, root),
            message_file=resolve(MESSAGE_FILE, root),
            metadata_input=resolve(METADATA_INPUT, root),
            metadata_output=resolve(METADATA_OUTPUT, root),
            calendars_output=resolve(CALENDARS_OUTPUT, root),
            fleet_output=resolve(FLEET_OUTPUT, root),
            scratch=resolve(SCRATCH, root),
        )


# --- The container's arguments (CreateProcessingJob's ContainerArguments): start-processing
# writes them with container_arguments, the container's parser reads them by these names ---

FREQUENCY_ARGUMENT = "--frequency"
TRAINING_INSTANCES_ARGUMENT = "--training-instances"
# What the upload is: READINGS or METADATA.
INPUT_KIND_ARGUMENT = "--input-kind"
# The file in the raw input to read.
UPLOAD_FILE_ARGUMENT = "--upload-file"
# Bytes of CSV read per block: the container's own default unless a run names it.
BLOCK_SIZE_ARGUMENT = "--block-size"


def container_arguments(
    frequency: Frequency, training_instances: int, input_kind: str, upload_file: str
) -> list[str]:
    """The arguments start-processing gives the container for one upload."""
    return [
        FREQUENCY_ARGUMENT,
        frequency.value,
        TRAINING_INSTANCES_ARGUMENT,
        str(training_instances),
        INPUT_KIND_ARGUMENT,
        input_kind,
        UPLOAD_FILE_ARGUMENT,
        upload_file,
    ]


# --- The job's settings: environment variables of the processing job (CreateProcessingJob's
# Environment, which start-processing fills from template.yaml's parameters) ---

MAX_UPLOAD_BYTES_ENV = "FLEETCAST_MAX_UPLOAD_BYTES"
MAX_PERIOD_TOTAL_ENV = "FLEETCAST_MAX_PERIOD_TOTAL"
# 10 GiB of CSV takes a few minutes at the usual rate and fits the default 30 GB volume.
DEFAULT_MAX_UPLOAD_BYTES = 10 * 2**30
# 1e9 is the largest single reading; a day (or hour) adding up to ten of them is not a meter.
DEFAULT_MAX_PERIOD_TOTAL = 1e10
INCOMPLETE_BELOW_ENV = "FLEETCAST_INCOMPLETE_BELOW"
ZERO_RUN_DAYS_ENV = "FLEETCAST_ZERO_RUN_DAYS"
# A period whose readings cover less than 90% of its time is missing for fitting (a day of
# a regular half-hourly meter: fewer than 44 of 48 readings), not low consumption
# (fleetcast_processing.usage).
DEFAULT_INCOMPLETE_BELOW = 0.9
# Zeros for a week or longer, inside a history or at its end, are a meter that was off (a
# vacant home, a stuck or disconnected meter), not a week of using nothing; a household
# uses something every day. Leading zeros are inactive at any length (not connected yet).
DEFAULT_ZERO_RUN_DAYS = 7.0


class JobLimits(BaseModel):
    """Limits a processing job applies, read from its environment."""

    model_config = ConfigDict(frozen=True)

    max_upload_bytes: int = Field(
        default=DEFAULT_MAX_UPLOAD_BYTES,
        gt=0,
        alias="FLEETCAST_MAX_UPLOAD_BYTES",  # MAX_UPLOAD_BYTES_ENV (mypy wants a literal)
        description="Largest upload, in bytes once decompressed; a larger one fails the job.",
    )
    max_period_total: float = Field(
        default=DEFAULT_MAX_PERIOD_TOTAL,
        gt=0,
        allow_inf_nan=False,
        alias="FLEETCAST_MAX_PERIOD_TOTAL",  # MAX_PERIOD_TOTAL_ENV
        description=(
            "Largest plausible total of one customer's readings in one period (a UTC day, "
            "or an hour for hourly models); the rows of a period above it are rejected."
        ),
    )

    incomplete_below: float = Field(
        default=DEFAULT_INCOMPLETE_BELOW,
        ge=0,
        le=1,
        alias="FLEETCAST_INCOMPLETE_BELOW",  # INCOMPLETE_BELOW_ENV
        description=(
            "A period with fewer readings than this share of what the customer's reading "
            "interval implies is 'incomplete' in the training parts: not fitted (0: never)."
        ),
    )
    zero_run_days: float = Field(
        default=DEFAULT_ZERO_RUN_DAYS,
        gt=0,
        allow_inf_nan=False,
        alias="FLEETCAST_ZERO_RUN_DAYS",  # ZERO_RUN_DAYS_ENV
        description=(
            "Periods of zero consumption spanning at least this many days, inside a history "
            "or at its end, are 'inactive' in the training parts: not fitted. A leading run "
            "of zeros is inactive at any length."
        ),
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> JobLimits:
        names = [field.alias for field in cls.model_fields.values() if field.alias]
        return cls.model_validate({name: environ[name] for name in names if environ.get(name)})


# The upload's S3 key, for the job's report: every upload reaches the job as a copy under
# a short, safe name (contracts.object_keys.staged_upload_name), so its real name comes
# through the environment. SageMaker holds at most 256 characters per value and a key is
# up to 1024 bytes of any UTF-8 (a NUL cannot be in an environment variable), so the key
# is percent-encoded and cut into numbered variables.
SOURCE_KEY_ENV = "FLEETCAST_SOURCE_KEY"
_SOURCE_KEY_CHUNK = 256


def source_key_environment(key: str) -> dict[str, str]:
    """``{"FLEETCAST_SOURCE_KEY_1": ..., "FLEETCAST_SOURCE_KEY_2": ...}`` for ``key``."""
    encoded = quote(key, safe="/")
    chunks = [encoded[i : i + _SOURCE_KEY_CHUNK] for i in range(0, len(encoded), _SOURCE_KEY_CHUNK)]
    return {f"{SOURCE_KEY_ENV}_{n}": chunk for n, chunk in enumerate(chunks, start=1)}


def source_key_from_environment(environ: Mapping[str, str]) -> str | None:
    """The key :func:`source_key_environment` wrote; None when the job was given none."""
    chunks: list[str] = []
    while (chunk := environ.get(f"{SOURCE_KEY_ENV}_{len(chunks) + 1}")) is not None:
        chunks.append(chunk)
    return unquote("".join(chunks)) if chunks else None


# --- What the job writes, read back by the local stack and the pipeline's Lambdas ---

REQUIRED_COLUMNS = ("customer_id", "timestamp", "consumption")
# rejected.csv: one row per rejected input row, values as they appeared in the upload.
REJECTED_COLUMNS = ("line", "customer_id", "timestamp", "consumption", "reason", "message")
# rejected.csv lists at most this many rows per reason (then one row saying how many more),
# and cuts every value it echoes to VALUE_LIMIT characters: a small file of bad rows must
# not make a huge report.
REJECTED_ROWS_PER_REASON = 1000
REJECTED_VALUE_LIMIT = 200


class RejectReason(StrEnum):
    """The ``reason`` column of rejected.csv and the keys of ``rejected_by_reason``."""

    INVALID_CUSTOMER_ID = "invalid_customer_id"
    INVALID_TIMESTAMP = "invalid_timestamp"
    # "2024-02" or "2024": a month or a year, not the time of a reading (ISO 8601 allows
    # them, and taken as the 1st they would put a month's total on one day).
    MONTH_OR_YEAR_TIMESTAMP = "month_or_year_timestamp"
    OUT_OF_RANGE_TIMESTAMP = "out_of_range_timestamp"
    INVALID_CONSUMPTION = "invalid_consumption"
    NEGATIVE_CONSUMPTION = "negative_consumption"
    IMPLAUSIBLE_CONSUMPTION = "implausible_consumption"
    DUPLICATE_ROW = "duplicate_row"
    # A row with more or fewer fields than the header.
    MALFORMED_ROW = "malformed_row"
    # The customer's readings in one period add up to more than JobLimits.max_period_total.
    IMPLAUSIBLE_PERIOD_TOTAL = "implausible_period_total"
    # The header's line again, mid-file (files joined with ``cat``): not a reading.
    REPEATED_HEADER = "repeated_header"


# --- Customer metadata files (``incoming/metadata/``): customer_id, country, optional
# subdivision, optional free attributes ---

METADATA_REQUIRED_COLUMNS = ("customer_id", "country")
SUBDIVISION_COLUMN = "subdivision"
# Free attribute columns kept per customer, and the longest value or column name: a
# metadata file describes customers, it is not a place for documents.
MAX_ATTRIBUTE_COLUMNS = 20
MAX_VALUE_CHARS = 256
MAX_COLUMN_NAME_CHARS = 64
# A metadata file larger than this (decompressed) is not a metadata file.
MAX_METADATA_BYTES = 64 * 2**20
METADATA_REJECTED_COLUMNS = ("line", "customer_id", "country", "subdivision", "reason", "message")


class MetadataRejectReason(StrEnum):
    """The ``reason`` column of a metadata upload's rejected.csv."""

    INVALID_CUSTOMER_ID = "invalid_customer_id"
    MISSING_COUNTRY = "missing_country"
    UNKNOWN_COUNTRY = "unknown_country"
    UNKNOWN_SUBDIVISION = "unknown_subdivision"
    VALUE_TOO_LONG = "value_too_long"
    MALFORMED_ROW = "malformed_row"
    # An earlier row for a customer that a later row of the same file replaces.
    DUPLICATE_CUSTOMER = "duplicate_customer"


class MetadataSummary(BaseModel):
    """What a metadata upload changed, in ``summary.json`` beside the usual counts."""

    model_config = ConfigDict(frozen=True)

    attribute_columns: list[str]
    customers_in_store: int = Field(description="Customers in the merged store after this file.")
    calendar_changed: list[str] = Field(
        description="Customers whose holiday calendar this file set or changed."
    )
    retrained: list[str] = Field(
        description="Of those, customers with history: their history goes to training again."
    )
    waiting_for_readings: list[str] = Field(
        description="Customers of this file without readings yet: kept for when they arrive."
    )


class ProcessingSummary(BaseModel):
    """``summary.json``: what one processing job did with one upload."""

    model_config = ConfigDict(frozen=True)

    source_name: str
    frequency: str
    lines: int = Field(
        default=0,
        description=(
            "Lines in the upload: header_line + blank_lines + continued_lines + rows_read."
        ),
    )
    header_line: int = Field(default=1, description="The header's line (blank lines before it).")
    blank_lines: int = Field(
        default=0, description="Blank lines (or rows of empty fields) after the header."
    )
    continued_lines: int = Field(
        default=0, description="Lines inside a row, after a line break in a quoted value."
    )
    rows_read: int = Field(description="Data rows in the upload (blank lines not counted).")
    rows_accepted: int
    rows_rejected: int
    rejected_by_reason: dict[str, int]
    rejected_list_limit: int = Field(
        default=REJECTED_ROWS_PER_REASON,
        description=(
            "rejected.csv lists at most this many rows per reason, then one row per reason "
            "saying how many more were rejected."
        ),
    )
    customers: int = Field(description="Customers with at least one accepted row.")
    new_customers: int = Field(description="Of those, customers with no stored history.")
    days_written: int = Field(
        description="Rows (days, or hours) written over all training parts: the whole "
        "history of every customer in the upload."
    )
    days_uploaded: int = Field(
        description="(customer, period) pairs the upload's accepted readings fall in."
    )
    readings_new: int = Field(
        default=0,
        description="Accepted readings of a customer and instant the history did not hold: "
        "added to it, beside the period's other readings.",
    )
    readings_replaced: int = Field(
        default=0,
        description="Accepted readings that replaced the stored reading of the same customer "
        "and instant (to the millisecond). rows_accepted = readings_new + readings_replaced.",
    )
    readings_changed: int = Field(
        default=0,
        description="Of readings_replaced, those whose value differs from the stored one: "
        "conflicting values between uploads, the first of them listed in changed.csv. The "
        "upload's value is kept.",
    )
    readings_stored: int = Field(
        default=0,
        description="Readings in the history of the upload's customers after the merge: "
        "those stored before plus readings_new.",
    )
    periods_by_use: dict[str, int] = Field(
        default_factory=dict,
        description="Training rows (periods) by their use column (contracts.shards): ok, "
        "incomplete, inactive; they add up to days_written.",
    )
    unused_periods: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Per customer with any, its periods left out of fitting by use "
        "(incomplete, inactive).",
    )
    customers_by_interval_s: dict[str, int] = Field(
        default_factory=dict,
        description="Customers sent to training by their reading interval in seconds "
        "('unknown': a single reading).",
    )
    changed_list_limit: int = Field(
        default=CHANGED_ROWS_LISTED,
        description="changed.csv lists at most this many changed readings, the first by line.",
    )
    history_shards_written: int = Field(
        default=0, description="History shards rewritten: those holding a customer of the upload."
    )
    train_parts: int = Field(
        default=0, description="Training input objects (contracts.shards.train_part_name)."
    )
    customers_list: list[str]
    metadata: MetadataSummary | None = Field(
        default=None, description="Set for a customer metadata upload."
    )
