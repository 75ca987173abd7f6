"""A failed processing job's explanation, where SageMaker puts it (issue 41).

SageMaker shows the first KB of the container's /opt/ml/output/message as the job's
ExitMessage, and gives a container that exited non-zero a generic FailureReason. The
local runner copied the message into FailureReason, so nothing noticed that the e-mail
(which mapped only FailureReason) and ``fleetcast status`` would say the generic text.
"""

from __future__ import annotations

from typing import Any

from fleetcast.embedded.sagemaker_jobs.runner import (
    PROCESSING_ALGORITHM_ERROR,
    processing_failure,
)
from fleetcast.status import describe_job
from fleetcast_contracts.stages import PROCESSING, TRAINING

WHY = "no valid rows in incoming/r.csv: expected the header customer_id,timestamp,consumption"


def test_the_local_runner_reports_a_failed_container_as_sagemaker_does() -> None:
    # Given a processing container that wrote why it failed, then exited non-zero
    exit_message, failure_reason = processing_failure(WHY, "Traceback ...")
    # Then its words are the ExitMessage and the FailureReason is SageMaker's own
    assert exit_message == WHY
    assert failure_reason == PROCESSING_ALGORITHM_ERROR
    assert WHY not in failure_reason
    # And a container that wrote nothing has no ExitMessage (the log is in the job's logs)
    assert processing_failure(None, "Killed") == (None, PROCESSING_ALGORITHM_ERROR)
    assert processing_failure("", None) == (None, PROCESSING_ALGORITHM_ERROR)


class _Described:
    """DescribeProcessingJob / DescribeTrainingJob answering one job as given."""

    def __init__(self, **described: Any) -> None:
        self._described = described

    def describe_processing_job(self, **_: str) -> dict[str, Any]:
        return self._described

    def describe_training_job(self, **_: str) -> dict[str, Any]:
        return self._described


def test_status_shows_the_containers_words_for_a_failed_processing_job() -> None:
    sagemaker = _Described(
        ProcessingJobName="p",
        ProcessingJobStatus="Failed",
        ExitMessage=WHY,
        FailureReason=PROCESSING_ALGORITHM_ERROR,
    )
    job = describe_job(sagemaker, PROCESSING, "p")
    assert job is not None and job.failure == WHY


def test_status_falls_back_to_the_failure_reason() -> None:
    # A job the container never ran in (a role SageMaker could not assume) has no
    # ExitMessage; a training job never has one.
    for stage, fields in (
        (PROCESSING, {"ProcessingJobName": "p", "ProcessingJobStatus": "Failed"}),
        (TRAINING, {"TrainingJobName": "t", "TrainingJobStatus": "Failed"}),
    ):
        sagemaker = _Described(**fields, FailureReason="ClientError: could not assume the role")
        job = describe_job(sagemaker, stage, "x")
        assert job is not None and job.failure == "ClientError: could not assume the role"
    # And a completed job's ExitMessage (its summary) is no failure
    completed = _Described(
        ProcessingJobName="p", ProcessingJobStatus="Completed", ExitMessage="42 customers"
    )
    job = describe_job(completed, PROCESSING, "p")
    assert job is not None and job.failure is None
