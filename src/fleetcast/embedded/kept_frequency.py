"""One model frequency per stack: a kept state made at one ``ModelFrequency`` is not
started at another.

The readings are kept reading by reading, so a stack restarted at another frequency
would make models of the new frequency for the customers of its next upload and keep
serving the others' old models: a daily customer's ``period=24`` answered as 24 days on a
stack the user started hourly. The local stack refuses to start instead, and says which
frequency the state holds and how to keep it or start fresh.

What the state holds is read from its SageMaker jobs: every processing job names its
``--frequency`` and every training job its ``frequency`` hyperparameter (jobs of every
stack that ever ran, whatever their registry records say).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.processing import FREQUENCY_ARGUMENT

FREQUENCY_HYPERPARAMETER = "frequency"


class MixedFrequencyError(RuntimeError):
    """The kept state's jobs ran at another frequency than the stack was asked to."""


def kept_frequencies(sagemaker: Any) -> Counter[Frequency]:
    """How many of the kept processing and training jobs ran at each frequency."""
    found: Counter[Frequency] = Counter()
    for job in sagemaker.processing_jobs.values():
        arguments = list((job.app_specification or {}).get("ContainerArguments") or [])
        if FREQUENCY_ARGUMENT in arguments[:-1]:
            found[_frequency(arguments[arguments.index(FREQUENCY_ARGUMENT) + 1])] += 1
    for job in sagemaker.training_jobs.values():
        value = (job.hyper_parameters or {}).get(FREQUENCY_HYPERPARAMETER)
        if value is not None:
            found[_frequency(value)] += 1
    return found


def _frequency(value: Any) -> Frequency:
    # A hyperparameter may be JSON-quoted, as the SageMaker SDK writes them.
    return Frequency.parse(str(value).strip().strip('"'))


def check_kept_frequency(sagemaker: Any, asked: Frequency, state_dir: str) -> None:
    """Raise :class:`MixedFrequencyError` when the kept jobs ran at another frequency than
    ``asked`` (the template's ``ModelFrequency`` for this start)."""
    others = {frequency: jobs for frequency, jobs in kept_frequencies(sagemaker).items()}
    others.pop(asked, None)
    if not others:
        return
    held = max(others, key=lambda frequency: others[frequency])
    jobs = sum(others.values())
    raise MixedFrequencyError(
        f"the state kept in {state_dir} holds {held.adjective} models ({jobs} "
        f"SageMaker job{'s' if jobs > 1 else ''} ran at ModelFrequency={held.value}), and "
        f"this stack was asked for ModelFrequency={asked.value} ({asked.adjective}): one "
        "stack serves one frequency, or its customers would be forecast in mixed units. "
        f"To keep the state, start with --parameter-overrides ModelFrequency={held.value}; "
        f"to start {asked.adjective} and empty, add --fresh (the kept state is set aside, "
        "not deleted)."
    )
