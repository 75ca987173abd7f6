"""How this multi-model endpoint container reads its settings and places its models.

The contract itself (paths, environment variable names, routes, period limits) is
``fleetcast_contracts.inference``, shared with the local stack that hosts this
container, the forecast API and the CLI.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fleetcast_contracts.inference import (
    BIND_HOST_ENV,
    DEFAULT_BIND_HOST,
    DEFAULT_BUDGET_FRACTION,
    DEFAULT_PORT,
    MEMORY_BUDGET_ENV,
    MODELS_DIR,
    MULTI_MODEL_ENV,
    PORT_ENV,
)
from fleetcast_contracts.opt_ml import opt_ml_root, resolve


class SettingsError(ValueError):
    """An environment variable of the container's contract has a value it cannot use."""


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
            opt_ml_root=opt_ml_root(env),
            memory_budget_bytes=_budget_bytes(env.get(MEMORY_BUDGET_ENV)),
            multi_model=env.get(MULTI_MODEL_ENV, "true").strip().lower() == "true",
        )

    @property
    def models_root(self) -> Path:
        return resolve(MODELS_DIR, self.opt_ml_root)


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
