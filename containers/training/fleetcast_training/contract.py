"""The SageMaker Training container contract, as fleetcast uses it.

Shared by the container and by the local stack that runs it. SageMaker mounts
everything under ``/opt/ml``; the local stack points ``FLEETCAST_OPT_ML`` at a scratch
folder for each emulated instance.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

OPT_ML_ENV = "FLEETCAST_OPT_ML"
DEFAULT_OPT_ML = "/opt/ml"
# How many CPUs this instance has. Unset on SageMaker (the container sees its instance);
# the local stack sets it to share one machine's cores between emulated instances.
INSTANCE_CPUS_ENV = "FLEETCAST_INSTANCE_CPUS"

TRAIN_CHANNEL = "train"
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
MANIFEST_PREFIX = "manifest-"  # manifest-{host}.json, one per instance, in the checkpoint dir


def opt_ml_root() -> Path:
    return Path(os.environ.get(OPT_ML_ENV, DEFAULT_OPT_ML))


def manifest_name(host: str) -> str:
    return f"{MANIFEST_PREFIX}{host}.json"


@dataclass(frozen=True)
class TrainingEnvironment:
    """What SageMaker tells a training container about its job, read from ``/opt/ml``."""

    root: Path
    hyperparameters: dict[str, str]
    current_host: str
    hosts: list[str]
    channels: dict[str, dict[str, str]]

    @classmethod
    def load(cls, root: Path | None = None) -> TrainingEnvironment:
        base = root if root is not None else opt_ml_root()

        def read(relative: str, default: object) -> object:
            path = base / relative
            return json.loads(path.read_text()) if path.exists() else default

        resources = read(RESOURCE_CONFIG, {"current_host": "algo-1", "hosts": ["algo-1"]})
        assert isinstance(resources, dict)
        hyperparameters = read(HYPERPARAMETERS, {})
        channels = read(INPUT_DATA_CONFIG, {})
        assert isinstance(hyperparameters, dict) and isinstance(channels, dict)
        return cls(
            root=base,
            hyperparameters={str(k): str(v) for k, v in hyperparameters.items()},
            current_host=str(resources["current_host"]),
            hosts=sorted(str(h) for h in resources["hosts"]),
            channels=channels,
        )

    def channel_dir(self, channel: str) -> Path:
        return self.root / DATA_DIR / channel

    @property
    def model_dir(self) -> Path:
        return self.root / MODEL_DIR

    @property
    def output_data_dir(self) -> Path:
        return self.root / OUTPUT_DATA_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / CHECKPOINT_DIR

    @property
    def failure_file(self) -> Path:
        return self.root / FAILURE_FILE

    @property
    def cpus(self) -> int:
        configured = os.environ.get(INSTANCE_CPUS_ENV)
        if configured:
            return max(1, int(configured))
        return max(1, len(os.sched_getaffinity(0)))


# Hyperparameters the container understands, with their defaults. SageMaker passes every
# value as a string; hyperparameters.py parses and validates them. ``run_id`` has no default.
HYPERPARAMETER_DEFAULTS: dict[str, str] = {
    "holdout_days": "7",
    "min_rows": "28",
    "frequency": "D",
    "seasonality_mode": "additive",
    "yearly_seasonality": "auto",
    "weekly_seasonality": "auto",
    "daily_seasonality": "auto",
    "uncertainty_samples": "1000",
    "refit_full_history": "true",
    "workers": "0",
}
REQUIRED_HYPERPARAMETERS = ("run_id",)
# Hyperparameters the SageMaker SDK adds on its own; the container ignores them.
SAGEMAKER_HYPERPARAMETER_PREFIX = "sagemaker_"

# Lines the container prints to stdout at the end of the job, one per metric, as
# ``{key}={value};``. CreateTrainingJob's AlgorithmSpecification.MetricDefinitions takes
# METRIC_DEFINITIONS as is (fleetcast_common.jobs repeats the first four, since a Lambda
# function does not ship this module); SageMaker records them and sends them to CloudWatch.
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
