"""Where everything lives in the artifacts bucket.

One object per customer under a run's ``train/`` prefix is what lets SageMaker's
``ShardedByS3Key`` distribution shard a training job by customer.
"""

from __future__ import annotations

from fleetcast_common.ids import is_valid_customer_id, validate_customer_id

INCOMING_PREFIX = "incoming/"
HISTORY_PREFIX = "history/"
RUNS_PREFIX = "runs/"
MODELS_PREFIX = "models/"

CUSTOMER_FILE_SUFFIX = ".csv"
MODEL_ARCHIVE_SUFFIX = ".tar.gz"


def history_key(customer_id: str) -> str:
    return f"{HISTORY_PREFIX}{validate_customer_id(customer_id)}{CUSTOMER_FILE_SUFFIX}"


def run_prefix(run_id: str) -> str:
    return f"{RUNS_PREFIX}{run_id}/"


def train_prefix(run_id: str) -> str:
    """Per-customer training files written by processing: ``{customer_id}.csv``."""
    return f"{run_prefix(run_id)}train/"


def report_prefix(run_id: str) -> str:
    """Processing's ``summary.json`` and ``rejected.csv``."""
    return f"{run_prefix(run_id)}report/"


def staged_upload_key(run_id: str, file_name: str) -> str:
    """A copy of the run's upload under a short, safe name, for keys SageMaker cannot take
    as they are (see :func:`fleetcast_common.ids.staged_file_name`)."""
    return f"{run_prefix(run_id)}upload/{file_name}"


def checkpoint_prefix(run_id: str) -> str:
    """Training checkpoints: one ``{customer_id}.tar.gz`` per trained customer plus manifests."""
    return f"{run_prefix(run_id)}checkpoints/"


def output_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}output/"


def target_model(customer_id: str, run_id: str) -> str:
    """The multi-model endpoint's TargetModel: a new name for every version, never reused,
    because an endpoint does not notice an artifact overwritten in place."""
    return f"{validate_customer_id(customer_id)}/{run_id}{MODEL_ARCHIVE_SUFFIX}"


def model_key(customer_id: str, run_id: str) -> str:
    return f"{MODELS_PREFIX}{target_model(customer_id, run_id)}"


def customer_id_from_file_name(name: str, suffix: str) -> str | None:
    """``"42.csv"`` -> ``"42"``; None when the name is not a valid customer file."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return stem if is_valid_customer_id(stem) else None
