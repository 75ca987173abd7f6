"""A training container killed in the middle of its work (the out-of-memory killer, say):
the job fails with a FailureReason naming the cause, and nothing of it is registered,
although some of its customers had already been checkpointed."""

import pytest
from test_pipeline import finished, readings, registry, to_csv, upload
from test_spot_interruption import wait_for_checkpoints

from fleetcast.localstack.stack import LocalStack
from fleetcast_common import layout

pytestmark = pytest.mark.e2e
CUSTOMERS = [f"crash-{i}" for i in range(40)]


def test_a_crashed_training_job_fails_with_its_cause_and_registers_nothing(
    stack: LocalStack,
) -> None:
    assert stack.runner is not None and stack.info is not None
    # Given a training job with some customers already checkpointed
    run_id = upload(stack, "crash.csv", to_csv(readings(CUSTOMERS, "2023-01-01", 400, seed=9)))
    job = f"{stack.info.job_name_prefix}-t-{run_id}"
    wait_for_checkpoints(stack, run_id, 5)
    # When its container is killed
    assert stack.runner.crash(job)
    status = finished(stack, run_id)
    # Then the job fails, and its FailureReason says what killed it
    assert status.training_status == "Failed"
    assert status.training_failure is not None
    assert "killed by SIGKILL" in status.training_failure
    described = stack.client("sagemaker").describe_training_job(TrainingJobName=job)
    assert described["FailureReason"] == status.training_failure
    # And none of its models reached the endpoint's prefix or the registry
    models = stack.client("s3").list_objects_v2(
        Bucket=stack.info.artifacts_bucket, Prefix=layout.MODELS_PREFIX + "crash-"
    )
    assert models.get("KeyCount", 0) == 0
    assert all(registry(stack).live(customer_id) is None for customer_id in CUSTOMERS)
    assert all(registry(stack).models(customer_id) == [] for customer_id in CUSTOMERS)
