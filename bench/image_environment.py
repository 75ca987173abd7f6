"""The training image's ENV in the benchmark's own process.

make bench and make accuracy run the training job in their own process (and the workers
it forks), so they set the training image's ENV (``containers/training/Dockerfile``: one
BLAS and OpenMP thread a process) as the image does, before numpy loads OpenBLAS. Without
it, every worker process the job forks starts BLAS threads that spin for a tenth of a
second before they sleep: CPU a deployed job does not spend. Called from the suites'
``__main__`` only: ``bench``'s package is also imported by the peers' scripts, in virtual
environments without fleetcast.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetcast.embedded.sagemaker_jobs.containers import image_environment

CONTAINERS = Path(__file__).resolve().parent.parent / "containers"


def as_the_training_image() -> None:
    """Set the training image's ENV in this process where it is not set already."""
    for key, value in image_environment("fleetcast-training", CONTAINERS).items():
        os.environ.setdefault(key, value)
