"""Where everything lives in the artifacts bucket.

A run's ``train/`` prefix holds a few parts of many customers per training instance
(:mod:`fleetcast_contracts.shards`), which SageMaker's ``ShardedByS3Key``
distribution spreads over the instances; ``history/`` holds the history shards.
"""

from __future__ import annotations

from fleetcast_contracts.ids import is_valid_customer_id, validate_customer_id
from fleetcast_contracts.object_keys import (
    KEY_MAX_BYTES,
    path_problem,
    shown_key,
    staged_upload_name,
)
from fleetcast_contracts.shards import (
    SHARD_SUFFIX,
    history_shard_name,
    history_shard_of,
)
from fleetcast_contracts.training import MANIFEST_PREFIX

INCOMING_PREFIX = "incoming/"
HISTORY_PREFIX = "history/"
RUNS_PREFIX = "runs/"
MODELS_PREFIX = "models/"
# Customer metadata files are uploaded under this part of ``incoming/``; the merged store
# of every customer's metadata lives under METADATA_PREFIX of the artifacts bucket.
INCOMING_METADATA_PREFIX = f"{INCOMING_PREFIX}metadata/"
METADATA_PREFIX = "metadata/"
METADATA_STORE_FILE = "customers.parquet"

CUSTOMER_FILE_SUFFIX = ".csv"
MODEL_ARCHIVE_SUFFIX = ".tar.gz"

# The object tag the artifacts bucket's lifecycle rules expire by (template.yaml's
# ArtifactsBucket): what is tagged is never read again, what is not is kept.
RETENTION_TAG = "fleetcast-retention"
# A run's copy of its upload: read only when its processing job starts.
STAGED_UPLOAD_RETENTION = "staged-upload"
# A model archive the registry can neither serve (not live) nor roll back to (not the
# live model's previous one): a rejected or superseded model, or one two promotions old.
RETIRED_MODEL_RETENTION = "retired-model"


def retention_tagging(value: str) -> str:
    """The ``x-amz-tagging`` form of the retention tag (``Tagging`` of a put or copy)."""
    return f"{RETENTION_TAG}={value}"


def history_shard_key(customer_id: str) -> str:
    """The history shard holding the customer's stored history."""
    return (
        f"{HISTORY_PREFIX}{history_shard_name(history_shard_of(validate_customer_id(customer_id)))}"
    )


def run_prefix(run_id: str) -> str:
    return f"{RUNS_PREFIX}{run_id}/"


def train_prefix(run_id: str) -> str:
    """The run's training input written by processing: ``part-00000.parquet``, ..."""
    return f"{run_prefix(run_id)}train/"


def calendars_prefix(run_id: str) -> str:
    """The run's ``calendars.csv``: the training job's ``calendars`` channel."""
    return f"{run_prefix(run_id)}calendars/"


def fleet_prefix(run_id: str) -> str:
    """The run's fleet teachers (``teachers.parquet``): the training job's ``fleet``
    channel."""
    return f"{run_prefix(run_id)}fleet/"


def upload_key_problem(key: str) -> str | None:
    """Why putting a file at ``key`` in the raw bucket would not make the upload its user
    means; None when nothing is wrong. The pipeline reads only keys under
    :data:`INCOMING_PREFIX` (template.yaml's UploadedCsv rule), and S3 keeps '..', '.'
    and '//' as characters, never as a path: ``incoming/../a.csv`` is a key under
    ``incoming/``, not ``a.csv``."""
    size = len(key.encode())
    if size > KEY_MAX_BYTES:
        return f"the key {shown_key(key)} is {size} bytes; S3 keys hold at most {KEY_MAX_BYTES}"
    if not key.startswith(INCOMING_PREFIX):
        return (
            f"the key {shown_key(key)} is not under {INCOMING_PREFIX}: the pipeline processes "
            f"only uploads under {INCOMING_PREFIX}, so it would be stored and never processed"
        )
    problem = path_problem(key[len(INCOMING_PREFIX) :])
    if problem is not None:
        return f"the key {shown_key(key)} {problem} (S3 keeps it as characters, not as a path)"
    return None


def is_metadata_upload(key: str) -> bool:
    """Whether an upload under ``incoming/`` is a customer metadata file, not readings."""
    return key.startswith(INCOMING_METADATA_PREFIX)


def is_training_input(name: str) -> bool:
    """A training part, or a customer file of a run processed before parts."""
    return name.endswith(SHARD_SUFFIX) or (
        customer_id_from_file_name(name, CUSTOMER_FILE_SUFFIX) is not None
    )


def report_prefix(run_id: str) -> str:
    """Processing's ``summary.json`` and ``rejected.csv``."""
    return f"{run_prefix(run_id)}report/"


def staged_upload_key(run_id: str, upload_key: str) -> str:
    """The run's copy of its upload, the processing job's one raw input: every upload is
    copied by its version under a short, safe name
    (:func:`fleetcast_contracts.object_keys.staged_upload_name`), so the job reads
    exactly the bytes its event named, whatever the key's shape."""
    return f"{run_prefix(run_id)}upload/{staged_upload_name(upload_key)}"


def upload_record_key(run_id: str) -> str:
    """The run's upload as its event named it (bucket, key, version): what reports and
    ``fleetcast status`` show as its source, failed runs' included."""
    return f"{run_prefix(run_id)}upload.json"


def checkpoint_prefix(run_id: str) -> str:
    """Where the training job's checkpoint directory is synced: ``models/{run_id}/``.

    Each ``{customer_id}.tar.gz`` the job writes lands under its final key, the one the
    registry records and the endpoint loads, so registration copies nothing. A run id is
    never reused, so nothing here is overwritten by another run; a spot restart restores
    the same prefix. The instances' ``manifest-{host}.json`` files sit beside the archives:
    no TargetModel names them (every TargetModel ends in ``.tar.gz``).
    """
    return f"{MODELS_PREFIX}{run_id}/"


def manifest_prefix(run_id: str) -> str:
    """The instances' manifests, listed without listing every archive of the run."""
    return f"{checkpoint_prefix(run_id)}{MANIFEST_PREFIX}"


def output_prefix(run_id: str) -> str:
    return f"{run_prefix(run_id)}output/"


def target_model(customer_id: str, run_id: str) -> str:
    """The multi-model endpoint's TargetModel: a new name for every version, never reused,
    because an endpoint does not notice an artifact overwritten in place. It is the key the
    training job's checkpoint sync writes (:func:`checkpoint_prefix`), under ``models/``."""
    return f"{run_id}/{validate_customer_id(customer_id)}{MODEL_ARCHIVE_SUFFIX}"


def model_key(customer_id: str, run_id: str) -> str:
    return f"{MODELS_PREFIX}{target_model(customer_id, run_id)}"


def customer_id_from_file_name(name: str, suffix: str) -> str | None:
    """``"42.csv"`` -> ``"42"``; None when the name is not a valid customer file."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return stem if is_valid_customer_id(stem) else None
