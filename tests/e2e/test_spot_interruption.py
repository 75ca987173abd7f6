"""A spot interruption in the middle of training: the job resumes from its checkpoints,
as SageMaker's managed spot training does, and no customer is lost or trained twice."""

import time
from collections import Counter

import pytest
from test_pipeline import finished, manifests, readings, registry, to_csv, upload

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.contracts import layout
from fleetcast_common.contracts.training_manifest import CustomerOutcome

pytestmark = pytest.mark.e2e
CUSTOMERS = [f"spot-{i}" for i in range(60)]


def checkpointed(stack: EmbeddedStack, run_id: str) -> int:
    assert stack.info is not None
    listing = stack.client("s3").list_objects_v2(
        Bucket=stack.info.artifacts_bucket, Prefix=layout.checkpoint_prefix(run_id)
    )
    return sum(1 for o in listing.get("Contents", []) if o["Key"].endswith(".tar.gz"))


def wait_for_checkpoints(stack: EmbeddedStack, run_id: str, customers: int) -> None:
    """Until the run's training job has checkpointed ``customers`` models to S3."""
    deadline = time.monotonic() + 300
    while checkpointed(stack, run_id) < customers:
        assert time.monotonic() < deadline, f"training never checkpointed {customers} customers"
        time.sleep(0.2)


def test_an_interrupted_training_job_resumes_without_retraining_or_losing_customers(
    stack: EmbeddedStack,
) -> None:
    assert stack.runner is not None and stack.info is not None
    # Given a training job under way with some customers already checkpointed to S3
    run_id = upload(stack, "spot.csv", to_csv(readings(CUSTOMERS, "2023-01-01", 400, seed=5)))
    job = f"{stack.info.job_name_prefix}-t-{run_id}"
    wait_for_checkpoints(stack, run_id, 10)
    # When the spot capacity is reclaimed
    assert stack.runner.interrupt(job)
    done_before = checkpointed(stack, run_id)
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
    assert counts[CustomerOutcome.RESUMED] >= min(done_before, 10)
    assert counts[CustomerOutcome.RESUMED] + counts[CustomerOutcome.TRAINED] == len(CUSTOMERS)
    assert sorted(c.customer_id for c in outcomes) == sorted(CUSTOMERS)
    assert all(registry(stack).live(customer_id) is not None for customer_id in CUSTOMERS)
