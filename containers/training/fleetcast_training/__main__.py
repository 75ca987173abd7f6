"""``python -m fleetcast_training [train]``: the container's entry point.

Exit 0 whenever the shard was trained and its manifest written, even if every customer
failed (each one's reason is in the manifest): a failed instance fails the whole job, and
would take the other instances' models with it. Only a fault of the instance itself (bad
configuration, no data, a crash) writes ``/opt/ml/output/failure`` and exits 1.
"""

from __future__ import annotations

import logging
import sys

from fleetcast_contracts.opt_ml import opt_ml_root
from fleetcast_contracts.training import FAILURE_FILE, FAILURE_LIMIT
from fleetcast_training.environment import TrainingEnvironment
from fleetcast_training.failures import JobFailure
from fleetcast_training.hyperparameters import Hyperparameters, InvalidHyperparametersError
from fleetcast_training.job import run_job

logger = logging.getLogger("fleetcast_training")

COMMAND = "train"


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        if argv not in ([], [COMMAND]):
            raise JobFailure(
                f"unknown arguments {argv!r}: SageMaker runs this container with 'train'"
            )
        environment = _load_environment()
        hyperparameters = Hyperparameters.parse(environment.hyperparameters)
        result = run_job(environment, hyperparameters)
        for line in result.metric_lines():
            print(line, flush=True)
        if result.all_failed is not None:
            logger.warning("no model from this instance: %s", result.all_failed)
        return 0
    except (JobFailure, InvalidHyperparametersError) as failure:
        message = str(failure)
    except Exception as error:
        logger.exception("the training job crashed")
        message = f"unexpected error in the training container: {type(error).__name__}: {error}"
    _report_failure(message)
    return 1


def _load_environment() -> TrainingEnvironment:
    try:
        return TrainingEnvironment.load()
    except (OSError, ValueError, KeyError, AssertionError) as error:
        reason = f"{type(error).__name__}: {error}"
        raise JobFailure(
            f"cannot read the SageMaker configuration under {opt_ml_root()}: {reason}"
        ) from error


def _report_failure(message: str) -> None:
    """SageMaker shows the failure file's first 1024 characters as the job's FailureReason."""
    message = message if len(message) <= FAILURE_LIMIT else message[: FAILURE_LIMIT - 3] + "..."
    print(f"fleetcast training failed: {message}", file=sys.stderr, flush=True)
    path = opt_ml_root() / FAILURE_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(message)
    except OSError as error:
        print(f"could not write {path}: {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
