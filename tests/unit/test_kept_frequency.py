"""The local stack's one-frequency check (fleetcast.embedded.kept_frequency) on the jobs a
kept state holds; `fleetcast up` refusing to start is tests/e2e/test_embedded_restart.py's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fleetcast.embedded.kept_frequency import (
    MixedFrequencyError,
    check_kept_frequency,
    kept_frequencies,
)
from fleetcast_contracts.frequency import Frequency


def kept_jobs(processing: list[str], training: list[str]) -> SimpleNamespace:
    """moto's SageMaker backend as far as the check reads it."""
    return SimpleNamespace(
        processing_jobs={
            f"p{i}": SimpleNamespace(
                app_specification={"ContainerArguments": ["--frequency", code, "--x", "1"]}
            )
            for i, code in enumerate(processing)
        },
        training_jobs={
            f"t{i}": SimpleNamespace(hyper_parameters={"run_id": "r", "frequency": code})
            for i, code in enumerate(training)
        },
    )


def test_jobs_say_their_frequency_in_either_spelling() -> None:
    jobs = kept_jobs(["D", "H"], ["D", "h", '"H"'])
    assert kept_frequencies(jobs) == {Frequency.DAILY: 2, Frequency.HOURLY: 3}


@pytest.mark.parametrize(("kept", "asked"), [("D", Frequency.HOURLY), ("H", Frequency.DAILY)])
def test_a_state_of_the_other_frequency_is_refused_with_what_to_do(
    kept: str, asked: Frequency
) -> None:
    # Given a kept state whose jobs ran at one frequency
    jobs = kept_jobs([kept, kept], [kept])

    # When a stack of the other frequency would start on it, then it is refused
    with pytest.raises(MixedFrequencyError) as refused:
        check_kept_frequency(jobs, asked, "/state")

    # And the message says what the state holds and how to keep it or start fresh
    message = str(refused.value)
    held = Frequency.parse(kept)
    assert (
        f"holds {held.adjective} models (3 SageMaker jobs ran at ModelFrequency={kept})" in message
    )
    assert f"--parameter-overrides ModelFrequency={kept}" in message
    assert f"start {asked.adjective} and empty, add --fresh" in message


@pytest.mark.parametrize("frequency", list(Frequency))
def test_a_state_of_the_same_frequency_or_no_jobs_starts(frequency: Frequency) -> None:
    check_kept_frequency(kept_jobs([frequency.value], [frequency.value]), frequency, "/state")
    check_kept_frequency(kept_jobs([], []), frequency, "/state")
