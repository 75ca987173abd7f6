"""Training jobs that lose an instance, end to end on the local stack.

An instance whose customers all fail is not a failed instance: the job completes and the
healthy customers of the other instance go live. A container killed in the middle of its
work (the out-of-memory killer, say) fails the job with a FailureReason naming the cause;
what it had written is still registered once checked, and every customer it took with
it is named, with why, in the run's registration record and in ``fleetcast status``."""

import json
from pathlib import Path

import pandas as pd
import pytest
from test_pipeline import finished, readings, registry, to_csv, upload, wait_for_chunks
from test_serving import get

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.registration import read_registration_record
from fleetcast_contracts import layout
from fleetcast_contracts.stages import TRAINING

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
ROOT = Path(__file__).resolve().parents[2]
# Several batches an instance: ``crash`` kills the first instance once it has written a few
# archives, with most of its customers still to train.
CUSTOMERS = [f"crash-{i}" for i in range(400)]
# ShardedByS3Key over sorted keys on 2 instances: the first gets lone-a and lone-c (one
# reading each), the second lone-b (120 good days).
SHORT, HEALTHY = ["lone-a", "lone-c"], "lone-b"


def test_an_instance_whose_customers_all_fail_does_not_take_the_healthy_ones_with_it(
    stack: EmbeddedStack,
) -> None:
    assert stack.info is not None
    # Given an upload of two customers whose 10 days are all zeros (meters that were off:
    # no day to fit, not even a cold start) and one with 120 good days
    off = readings(SHORT, "2025-01-01", 10, seed=1)
    off["consumption"] = 0.0
    frame = pd.concat([off, readings([HEALTHY], "2025-01-01", 120, seed=2)])
    run_id = upload(stack, "lone.csv", to_csv(frame))
    # When it is trained on two instances
    status = finished(stack, run_id)
    # Then the job completes: the short customers failed, each with its reason
    assert status.job(TRAINING).instances == 2
    assert status.job(TRAINING).status == "Completed", status.job(TRAINING).failure
    assert (status.customers_trained, status.customers_failed, status.customers_lost) == (1, 2, 0)
    record = read_registration_record(stack.client("s3"), stack.info.artifacts_bucket, run_id)
    assert record is not None and record.hosts_reporting == 2
    assert sorted(f.customer_id for f in record.failures) == sorted(SHORT)
    assert all(f.reason.startswith("has 0 rows to fit") for f in record.failures)
    # And the healthy customer's model is live and served
    live = registry(stack).live(HEALTHY)
    assert live is not None and live.run_id == run_id
    code, _, body = get(stack.info.environment(), f"/customers/{HEALTHY}/model")
    assert code == 200, body
    assert body["run_id"] == run_id


def test_a_crashed_training_job_fails_with_its_cause_and_registers_what_it_wrote(
    stack: EmbeddedStack,
) -> None:
    assert stack.runner is not None and stack.info is not None
    s3, bucket = stack.client("s3"), stack.info.artifacts_bucket
    models = registry(stack)
    # Given a training job with some customers already checkpointed
    run_id = upload(stack, "crash.csv", to_csv(readings(CUSTOMERS, "2023-01-01", 400, seed=9)))
    job = f"{stack.info.job_name_prefix}-t-{run_id}"
    # When its first instance's container is killed once it has written 5 model archives
    assert stack.runner.crash(job, after_archives=5)
    status = finished(stack, run_id)
    # Then the job fails, and its FailureReason says what killed it
    assert status.job(TRAINING).status == "Failed"
    assert status.job(TRAINING).failure is not None
    assert "killed by SIGKILL" in status.job(TRAINING).failure
    described = stack.client("sagemaker").describe_training_job(TrainingJobName=job)
    assert described["FailureReason"] == status.job(TRAINING).failure
    # And the other instance's models and the killed one's checked archives are live
    record = read_registration_record(s3, bucket, run_id)
    assert record is not None and record.job_failure == status.job(TRAINING).failure
    progress = models.run(run_id)
    assert progress is not None and progress.complete
    assert status.registration == "registered"
    registered = {c for c in CUSTOMERS if models.model(c, run_id) is not None}
    assert record.hosts_reporting == 1 and progress.failed_training == 0
    assert progress.trained == progress.registered == len(registered)
    archived = {
        o["Key"].rsplit("/", 1)[1].removesuffix(layout.MODEL_ARCHIVE_SUFFIX)
        for o in s3.list_objects_v2(Bucket=bucket, Prefix=layout.checkpoint_prefix(run_id))[
            "Contents"
        ]
        if o["Key"].endswith(layout.MODEL_ARCHIVE_SUFFIX)
    }
    assert registered == archived
    # (the killed instance's archives are the recovered ones: no manifest listed them)
    assert 0 < progress.recovered < len(registered)
    for customer_id in registered:
        live = models.live(customer_id)
        assert live is not None and live.run_id == run_id
        s3.head_object(Bucket=bucket, Key=layout.model_key(customer_id, run_id))
    # And every other customer is lost with the job's reason: none disappears unsaid
    lost = {c.customer_id: c.reason for c in record.lost}
    assert progress.lost == len(lost)
    assert registered.isdisjoint(lost) and registered | lost.keys() == set(CUSTOMERS)
    assert all(reason.endswith(status.job(TRAINING).failure) for reason in lost.values())
    assert status.customers_lost == len(lost)
    assert status.customers_trained == len(registered)
    for customer_id in lost:
        assert models.live(customer_id) is None
        assert models.models(customer_id) == []
    # And the failure event, delivered again, registers nothing twice
    event = json.loads((ROOT / "events" / "training_job_failed.json").read_text())
    event["detail"].update(TrainingJobName=job, FailureReason=status.job(TRAINING).failure)
    again = stack.functions["RegisterModelsFunction"].invoke(event)
    assert (again["outcome"], again["chunks"], again["lost"]) == (
        "queued",
        progress.chunks_total,
        len(lost),
    )
    wait_for_chunks(stack)
    assert models.run(run_id) == progress
    for customer_id in registered:
        live = models.live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (run_id, 1)
