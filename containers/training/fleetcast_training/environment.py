"""What SageMaker tells this training container about its job, read from ``/opt/ml``.

The contract itself (paths, file names, metric lines, hyperparameter names) is
``fleetcast_contracts.training``, shared with the functions and the local stack.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from fleetcast_contracts.opt_ml import opt_ml_root
from fleetcast_contracts.training import (
    CHECKPOINT_DIR,
    DATA_DIR,
    HYPERPARAMETERS,
    INPUT_DATA_CONFIG,
    INSTANCE_CPUS_ENV,
    MODEL_DIR,
    RESOURCE_CONFIG,
)


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
    def checkpoint_dir(self) -> Path:
        return self.root / CHECKPOINT_DIR

    @property
    def cpus(self) -> int:
        configured = os.environ.get(INSTANCE_CPUS_ENV)
        if configured:
            return max(1, int(configured))
        return max(1, len(os.sched_getaffinity(0)))
