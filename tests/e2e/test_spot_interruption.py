"""A spot interruption in the middle of training: the job resumes from its checkpoints,
as SageMaker's managed spot training does, and no customer is lost or trained twice."""

from collections import Counter

import pytest
from test_pipeline import finished, manifests, readings, registry, to_csv, upload

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.contracts.training_manifest import CustomerOutcome

pytestmark = pytest.mark.e2e
CUSTOMERS = [f"spot-{i}" for i in range(60)]


def test_an_interrupted_training_job_resumes_without_retraining_or_losing_customers(
    stack: EmbeddedStack,
) -> None:
    assert stack.runner is not None and stack.info is not None
    # Given a training job under way
    run_id = upload(stack, "spot.csv", to_csv(readings(CUSTOMERS, "2023-01-01", 400, seed=5)))
    job = f"{stack.info.job_name_prefix}-t-{run_id}"
    # When the spot capacity is reclaimed once its first instance has checkpointed 10
    # (waiting on the instance's folder, not on S3: a fast job would finish first)
    assert stack.runner.interrupt(job, after_archives=10)
    status = finished(stack, run_id)
    # Then the job completes after resuming from its checkpoints
    assert status.training_status == "Completed", status.training_failure
    described = stack.client("sagemaker").describe_training_job(TrainingJobName=job)
    phases = [t["Status"] for t in described["SecondaryStatusTransitions"]]
    assert "Interrupted" in phases and phases[-1] == "Completed"
    # And the customers finished before the interruption were resumed, not retrained,
    # while every customer was trained exactly once
    outcomes = [c for m in manifests(stack, run_id) for c in m.customers]
    counts = Counter(c.outcome for c in outcomes)
    assert counts[CustomerOutcome.RESUMED] >= 10
    assert counts[CustomerOutcome.RESUMED] + counts[CustomerOutcome.TRAINED] == len(CUSTOMERS)
    assert sorted(c.customer_id for c in outcomes) == sorted(CUSTOMERS)
    assert all(registry(stack).live(customer_id) is not None for customer_id in CUSTOMERS)
