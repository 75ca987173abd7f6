"""The SageMaker Processing container contract, as fleetcast uses it.

Shared by the container (which reads and writes these paths) and by the local stack
(which lays them out before running the container and uploads them after).
SageMaker mounts everything under ``/opt/ml``; the local stack points
``FLEETCAST_OPT_ML`` at a scratch folder instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

OPT_ML_ENV = "FLEETCAST_OPT_ML"
DEFAULT_OPT_ML = "/opt/ml"

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


def opt_ml_root() -> Path:
    return Path(os.environ.get(OPT_ML_ENV, DEFAULT_OPT_ML))


def resolve(container_path: str, root: Path | None = None) -> Path:
    """Map an ``/opt/ml/...`` path onto the real root (``/opt/ml`` itself inside SageMaker)."""
    base = root if root is not None else opt_ml_root()
    relative = Path(container_path).relative_to(DEFAULT_OPT_ML)
    return base / relative


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
