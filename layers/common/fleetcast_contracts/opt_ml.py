"""The ``/opt/ml`` tree SageMaker mounts into every container, and how it is moved.

Inside SageMaker the root is ``/opt/ml`` itself; the local stack and the tests point
``FLEETCAST_OPT_ML`` at a scratch folder (one per emulated instance) instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

OPT_ML_ENV = "FLEETCAST_OPT_ML"
DEFAULT_OPT_ML = "/opt/ml"


def opt_ml_root(environ: Mapping[str, str] | None = None) -> Path:
    """The real folder that stands for ``/opt/ml`` in this process."""
    env = os.environ if environ is None else environ
    return Path(env.get(OPT_ML_ENV, DEFAULT_OPT_ML))


def resolve(container_path: str, root: Path | None = None) -> Path:
    """Map an ``/opt/ml/...`` path onto the real root (``/opt/ml`` itself inside SageMaker)."""
    base = root if root is not None else opt_ml_root()
    return base / Path(container_path).relative_to(DEFAULT_OPT_ML)
