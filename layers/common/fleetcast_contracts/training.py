"""The SageMaker Training container contract, as fleetcast uses it.

Shared by the training container, the start-training function (which names the channel,
checkpoint path and metric definitions in CreateTrainingJob), register-models (which
reads the manifests) and the local stack (which lays out ``/opt/ml`` for each emulated
instance). Paths below are relative to the ``/opt/ml`` root (see :mod:`.opt_ml`).
"""

from __future__ import annotations

from fleetcast_contracts import families
from fleetcast_contracts.frequency import Frequency

# How many CPUs this instance has. Unset on SageMaker (the container sees its instance);
# the local stack sets it to share one machine's cores between emulated instances.
INSTANCE_CPUS_ENV = "FLEETCAST_INSTANCE_CPUS"

TRAIN_CHANNEL = "train"
# One small file for every instance (FullyReplicated), written by processing beside the
# run's train files: each customer's holiday calendar from the metadata store. A channel
# of its own keeps ``train`` sharded by customer and costs one S3 object per instance.
CALENDARS_CHANNEL = "calendars"
CALENDARS_FILE = "calendars.csv"
# The fleet family's teachers (fleetcast_training.fleet): stored customers the run does not
# train, written by processing as training rows (FullyReplicated, one file), so that a run
# of a few customers learns from the fleet's histories as a whole-fleet run does. Each
# instance learns from at least this many customers where the store has them.
FLEET_CHANNEL = "fleet"
FLEET_FILE = "teachers.parquet"
FLEET_TEACHERS = 2_000
# customer_id, country (ISO code of the holidays package), subdivision (may be empty).
CALENDAR_COLUMNS = ("customer_id", "country", "subdivision")
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"

HYPERPARAMETERS = "input/config/hyperparameters.json"
INPUT_DATA_CONFIG = "input/config/inputdataconfig.json"
RESOURCE_CONFIG = "input/config/resourceconfig.json"
DATA_DIR = "input/data"
MODEL_DIR = "model"
OUTPUT_DATA_DIR = "output/data"
CHECKPOINT_DIR = "checkpoints"
# The first 1024 characters of this file become the job's FailureReason.
FAILURE_FILE = "output/failure"
FAILURE_LIMIT = 1024

MODEL_ARCHIVE_SUFFIX = ".tar.gz"
# manifest-{host}.json, one per instance, in the checkpoint dir (format:
# fleetcast_contracts.training_manifest.TrainingManifest).
MANIFEST_PREFIX = "manifest-"
MANIFEST_SUFFIX = ".json"


def host_names(instance_count: int) -> list[str]:
    """A job's instances as SageMaker names them (``hosts`` in resourceconfig.json)."""
    return [f"algo-{number}" for number in range(1, instance_count + 1)]


def manifest_name(host: str) -> str:
    return f"{MANIFEST_PREFIX}{host}{MANIFEST_SUFFIX}"


# The manifest again, in pages of at most MANIFEST_PAGE_SIZE customers each:
# pages/{host}-{page:05d}.json (format: training_manifest.ManifestPage). A registration
# chunk reads the pages its slice covers, not the whole manifest, so its work does not
# grow with the instance's shard.
MANIFEST_PAGES_DIR = "pages"
MANIFEST_PAGE_SIZE = 250


def manifest_page_name(host: str, page: int) -> str:
    """The page's path in the checkpoint dir (and under the run's checkpoint prefix)."""
    return f"{MANIFEST_PAGES_DIR}/{host}-{page:05d}{MANIFEST_SUFFIX}"


def manifest_summary_name(host: str) -> str:
    """The manifest's counts and failures (training_manifest.ManifestSummary), beside its
    pages: what registration's coordinator reads of a completed job."""
    return f"{MANIFEST_PAGES_DIR}/{host}-summary{MANIFEST_SUFFIX}"


def host_of_manifest(name: str) -> str:
    """The instance a manifest's file name (``manifest-{host}.json``) is from."""
    return name.removeprefix(MANIFEST_PREFIX).removesuffix(MANIFEST_SUFFIX)


# progress-{host}.json, one per instance in the checkpoint dir, rewritten as it trains
# (format: fleetcast_contracts.training_manifest.TrainingProgress): how far a
# running job is, read without listing its archives.
PROGRESS_PREFIX = "progress-"


def progress_name(host: str) -> str:
    return f"{PROGRESS_PREFIX}{host}{MANIFEST_SUFFIX}"


def is_manifest_name(name: str) -> bool:
    """Whether a file name (the last part of a checkpoint key) is an instance's manifest."""
    return name.startswith(MANIFEST_PREFIX) and name.endswith(MANIFEST_SUFFIX)


# The model families training may score and serve (hyperparameter ``candidates``, the
# stack parameter ModelCandidates), in the order they fit: the family catalogue's.
CANDIDATE_KINDS = families.CANDIDATE_KINDS
_KIND = "(" + "|".join(CANDIDATE_KINDS) + ")"
# ``default`` (the model frequency's default candidates: families.default_candidates) or a
# comma-separated list of them, no spaces: ModelCandidates' AllowedPattern.
CANDIDATES_PATTERN = rf"^({families.DEFAULT_CANDIDATES}|{_KIND}(,{_KIND})*)$"

# Hyperparameters the container understands, with their defaults. SageMaker passes every
# value as a string; the container's hyperparameters.py parses and validates them.
# ``run_id`` has no default.
HYPERPARAMETER_DEFAULTS: dict[str, str] = {
    "holdout_days": "7",
    "min_rows": "28",
    "frequency": Frequency.DAILY.value,
    "seasonality_mode": "additive",
    "yearly_seasonality": "auto",
    "weekly_seasonality": "auto",
    "daily_seasonality": "auto",
    "uncertainty_samples": "1000",
    # The model families scored for each customer by backtest; seasonal naive always is.
    # ``default``: the model frequency's (families.default_candidates).
    "candidates": families.DEFAULT_CANDIDATES,
    "backtest_windows": "3",
    "workers": "0",
    # The holidays of customers without metadata: a country code of the holidays package
    # (e.g. US), or empty for none.
    "default_holiday_country": "",
    # Days of each trained customer's forecast in the run's export (run_exports); 0: none.
    "forecast_export_days": "30",
}
REQUIRED_HYPERPARAMETERS = ("run_id",)
# Hyperparameters the SageMaker SDK adds on its own; the container ignores them.
SAGEMAKER_HYPERPARAMETER_PREFIX = "sagemaker_"

# Lines the container prints to stdout at the end of the job, one per metric, as
# ``{key}={value};``. CreateTrainingJob's AlgorithmSpecification.MetricDefinitions takes
# METRIC_DEFINITIONS as is; SageMaker records them and sends them to CloudWatch.
METRIC_MODELS_TRAINED = "fleetcast_models_trained"
METRIC_MODELS_FAILED = "fleetcast_models_failed"
METRIC_MEDIAN_SMAPE = "fleetcast_median_smape"
METRIC_MEDIAN_NAIVE_SMAPE = "fleetcast_median_naive_smape"
METRIC_MODELS_RESUMED = "fleetcast_models_resumed"
METRIC_MEDIAN_MAE = "fleetcast_median_mae"
METRIC_MODELS_PER_SECOND = "fleetcast_models_per_second"
# Prophet fits (two per trained customer) by the exact in-process solver and by CmdStan.
METRIC_FITS_IN_PROCESS = "fleetcast_fits_in_process"
METRIC_FITS_CMDSTAN = "fleetcast_fits_cmdstan"
_COUNT = r"([0-9]+)"
_NUMBER = r"([0-9.eE+-]+)"
METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": "models_trained", "Regex": rf"{METRIC_MODELS_TRAINED}={_COUNT};"},
    {"Name": "models_failed", "Regex": rf"{METRIC_MODELS_FAILED}={_COUNT};"},
    {"Name": "median_smape", "Regex": rf"{METRIC_MEDIAN_SMAPE}={_NUMBER};"},
    {"Name": "median_naive_smape", "Regex": rf"{METRIC_MEDIAN_NAIVE_SMAPE}={_NUMBER};"},
    {"Name": "models_resumed", "Regex": rf"{METRIC_MODELS_RESUMED}={_COUNT};"},
    {"Name": "median_mae", "Regex": rf"{METRIC_MEDIAN_MAE}={_NUMBER};"},
    {"Name": "models_per_second", "Regex": rf"{METRIC_MODELS_PER_SECOND}={_NUMBER};"},
    {"Name": "fits_in_process", "Regex": rf"{METRIC_FITS_IN_PROCESS}={_COUNT};"},
    {"Name": "fits_cmdstan", "Regex": rf"{METRIC_FITS_CMDSTAN}={_COUNT};"},
]


def metric_line(name: str, value: float) -> str:
    """One line that the matching METRIC_DEFINITIONS regex reads."""
    shown = str(value) if isinstance(value, int) else f"{value:.6f}"
    return f"{name}={shown};"
