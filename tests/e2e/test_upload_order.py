"""Two uploads close together: both are processed, one after the other, so the second
merges into the history the first wrote; every customer ends at the newer model."""

import time
from datetime import date, timedelta

import pytest
from test_pipeline import finished, readings, registry, to_csv

from fleetcast.localstack.stack import LocalStack
from fleetcast.status import WAITING, pipeline_status, run_ids, wait_for_new_run
from fleetcast_common.upload_queue import UploadQueue

pytestmark = pytest.mark.e2e
START = date(2024, 3, 1)
FIRST_DAYS, SECOND_DAYS = 120, 30
ONLY_FIRST = [f"order-{i}" for i in range(0, 4)]
BOTH = [f"order-{i}" for i in range(4, 8)]
ONLY_SECOND = [f"order-{i}" for i in range(8, 12)]


def test_uploads_close_together_are_processed_in_order_and_lose_nothing(
    stack: LocalStack,
) -> None:
    assert stack.info is not None
    info = stack.info
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    known = run_ids(info.job_name_prefix, sagemaker)
    # Given two files, the second continuing some of the first's customers
    first = readings(ONLY_FIRST + BOTH, START.isoformat(), FIRST_DAYS, seed=11)
    second_start = START + timedelta(days=FIRST_DAYS)
    second = readings(BOTH + ONLY_SECOND, second_start.isoformat(), SECOND_DAYS, seed=12)
    # When the second is uploaded while the first is being processed (the order of two
    # events handled at the same moment is tests/integration/test_upload_queue.py's)
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/order-1.csv", Body=to_csv(first))
    uploaded_at = time.monotonic()
    wait_for_new_run(info.job_name_prefix, sagemaker, known)
    # Run ids order uploads by their event's time, to the second (within one second, by
    # content hash): the second upload is made in a later second.
    time.sleep(max(0.0, 1.1 - (time.monotonic() - uploaded_at)))
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/order-2.csv", Body=to_csv(second))
    queue = UploadQueue(stack.resource("dynamodb").Table(info.upload_queue_table))
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + 300
    while len(new := run_ids(info.job_name_prefix, sagemaker) - known) < 2:
        assert time.monotonic() < deadline, f"only {len(new)} of 2 uploads started processing"
        for run in pipeline_status(
            info.job_name_prefix,
            info.artifacts_bucket,
            sagemaker,
            s3,
            stack.resource("dynamodb").Table(info.registry_table),
            queue,
        ):
            if run.run_id not in known:
                seen.setdefault(run.run_id, set()).add(run.processing_status)
        time.sleep(0.1)
    older, newer = sorted(new)
    # (fleetcast status showed the newer upload waiting while the older was processed)
    assert WAITING in seen.get(newer, set()), seen
    statuses = {run_id: finished(stack, run_id) for run_id in (older, newer)}

    # Then both were processed, the newer only after the older had finished
    assert all(status.processing_status == "Completed" for status in statuses.values())
    jobs = {
        run_id: sagemaker.describe_processing_job(
            ProcessingJobName=f"{info.job_name_prefix}-p-{run_id}"
        )
        for run_id in (older, newer)
    }
    assert jobs[newer]["CreationTime"] >= jobs[older]["ProcessingEndTime"]
    # And every customer's live model is the newest that has its data
    models = registry(stack)
    live = {customer: models.live(customer) for customer in ONLY_FIRST + BOTH + ONLY_SECOND}
    assert all(model is not None for model in live.values())
    assert {c: m.run_id for c, m in live.items() if m} == {
        **dict.fromkeys(ONLY_FIRST, older),
        **dict.fromkeys(BOTH + ONLY_SECOND, newer),
    }
    # And the customers in both files were trained on both files' days
    last_day = START + timedelta(days=FIRST_DAYS + SECOND_DAYS - 1)
    for customer in BOTH:
        model = live[customer]
        assert model is not None
        assert (model.data_start, model.data_end) == (START, last_day), customer
