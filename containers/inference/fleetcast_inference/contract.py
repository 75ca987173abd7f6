"""The SageMaker multi-model endpoint container contract, as fleetcast uses it.

Shared by the container and by the local stack that runs it. SageMaker starts the image
with ``serve``, talks to it on port 8080 and puts every model it asks the container to
load under ``/opt/ml/models/<model_name>/model``; the local stack points
``FLEETCAST_OPT_ML`` at a scratch folder instead and picks the port with
``SAGEMAKER_BIND_TO_PORT``.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

OPT_ML_ENV = "FLEETCAST_OPT_ML"
DEFAULT_OPT_ML = "/opt/ml"
# SageMaker's load request names ``/opt/ml/models/<model_name>/model``; a url outside
# this folder is refused, so a load request cannot make the container read other files.
MODELS_DIR = "/opt/ml/models"

PORT_ENV = "SAGEMAKER_BIND_TO_PORT"
DEFAULT_PORT = 8080
BIND_HOST_ENV = "FLEETCAST_BIND_HOST"
DEFAULT_BIND_HOST = "0.0.0.0"  # noqa: S104 - SageMaker reaches the container from outside it
MULTI_MODEL_ENV = "SAGEMAKER_MULTI_MODEL"
MULTI_MODEL_LABEL = "com.amazonaws.sagemaker.capabilities.multi-models"

# Memory the loaded models (and the cached answers beside them) may use, in MiB; a
# load that would pass it is answered 507 so the platform unloads idle models first.
# Unset: DEFAULT_BUDGET_FRACTION of the container's memory limit.
MEMORY_BUDGET_ENV = "FLEETCAST_MEMORY_BUDGET_MB"
DEFAULT_BUDGET_FRACTION = 0.7
LOG_LEVEL_ENV = "FLEETCAST_LOG_LEVEL"

PING_PATH = "/ping"
MODELS_PATH = "/models"
INVOKE_SUFFIX = "/invoke"
# Single-model style route; the model is the one the header names.
INVOCATIONS_PATH = "/invocations"
# The InvokeEndpoint TargetModel, passed through by SageMaker (for logging: the path's
# model_name is the key the container loaded the model under).
TARGET_MODEL_HEADER = "X-Amzn-SageMaker-Target-Model"

# GET /models pagination: query parameters and response field.
LIST_LIMIT_PARAM = "limit"
LIST_TOKEN_PARAM = "next_page_token"  # noqa: S105 - a parameter name, not a secret
LIST_TOKEN_FIELD = "nextPageToken"  # noqa: S105 - a field name, not a secret
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000

# Forecast horizon an invoke may ask for, in the model's own periods.
MIN_PERIOD = 1
MAX_PERIOD = 365


class SettingsError(ValueError):
    """An environment variable of this contract has a value the container cannot use."""


@dataclass(frozen=True)
class InferenceSettings:
    """How this container serves, read once at start from the environment."""

    host: str
    port: int
    opt_ml_root: Path
    memory_budget_bytes: int
    multi_model: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> InferenceSettings:
        env = os.environ if environ is None else environ
        return cls(
            host=env.get(BIND_HOST_ENV, DEFAULT_BIND_HOST),
            port=_port(env.get(PORT_ENV)),
            opt_ml_root=Path(env.get(OPT_ML_ENV, DEFAULT_OPT_ML)),
            memory_budget_bytes=_budget_bytes(env.get(MEMORY_BUDGET_ENV)),
            multi_model=env.get(MULTI_MODEL_ENV, "true").strip().lower() == "true",
        )

    @property
    def models_root(self) -> Path:
        return resolve(MODELS_DIR, self.opt_ml_root)


def resolve(container_path: str, root: Path) -> Path:
    """Map an ``/opt/ml/...`` path onto the real root (``/opt/ml`` itself inside SageMaker)."""
    return root / Path(container_path).relative_to(DEFAULT_OPT_ML)


def model_path(url: str, settings: InferenceSettings) -> Path | None:
    """Where the artifact of a load request's ``url`` lies, or None for a url outside
    the models folder. Accepts the ``/opt/ml/models/...`` form SageMaker sends (mapped
    under ``FLEETCAST_OPT_ML``) and real paths under the models folder.

    The check is on the normalised path, not the resolved one: SageMaker may place the
    downloaded model behind a symbolic link.
    """
    if not url.startswith("/"):
        return None
    normalised = PurePosixPath(posixpath.normpath(url))
    for base in (PurePosixPath(MODELS_DIR), PurePosixPath(settings.models_root)):
        if normalised != base and normalised.is_relative_to(base):
            return settings.models_root / normalised.relative_to(base)
    return None


def _port(value: str | None) -> int:
    if value is None or value.strip() == "":
        return DEFAULT_PORT
    try:
        port = int(value)
    except ValueError:
        raise SettingsError(f"{PORT_ENV}={value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"{PORT_ENV}={value!r} is not between 0 and 65535")
    return port


def _budget_bytes(value: str | None) -> int:
    if value is None or value.strip() == "":
        return int(container_memory_bytes() * DEFAULT_BUDGET_FRACTION)
    try:
        mebibytes = float(value)
    except ValueError:
        raise SettingsError(f"{MEMORY_BUDGET_ENV}={value!r} is not a number of MiB") from None
    if not mebibytes > 0:
        raise SettingsError(f"{MEMORY_BUDGET_ENV}={value!r} must be more than 0")
    return int(mebibytes * 1024 * 1024)


def container_memory_bytes() -> int:
    """The container's memory limit (cgroup v2, then v1), else the machine's memory."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return min(int(text), physical)
    return physical
