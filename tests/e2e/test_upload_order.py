"""Uploads close together: all are processed, one after the other and in the order they
reached the upload queue, so each merges into the history the one before wrote; every
customer ends at the newer model."""

import itertools
import time
from datetime import date, timedelta

import pytest
from test_pipeline import finished, readings, registry, to_csv

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.serving_cli import read_history
from fleetcast.status import RunStatus, pipeline_status, run_ids, wait_for_new_run
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts.stages import PROCESSING

pytestmark = pytest.mark.e2e
START = date(2024, 3, 1)
FIRST_DAYS, SECOND_DAYS = 120, 30
ONLY_FIRST = [f"order-{i}" for i in range(0, 4)]
BOTH = [f"order-{i}" for i in range(4, 8)]
ONLY_SECOND = [f"order-{i}" for i in range(8, 12)]


def test_uploads_close_together_are_processed_in_order_and_lose_nothing(
    stack: EmbeddedStack,
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
    wait_for_new_run(info.job_name_prefix, sagemaker, known)
    s3.put_object(Bucket=info.raw_bucket, Key="incoming/order-2.csv", Body=to_csv(second))
    # (That fleetcast status shows the newer one waiting meanwhile is
    # tests/integration/test_upload_queue.py's: here the wait can be shorter than one
    # status call, which reads every earlier run of the shared stack.)
    deadline = time.monotonic() + 300
    while len(new := run_ids(info.job_name_prefix, sagemaker) - known) < 2:
        assert time.monotonic() < deadline, f"only {len(new)} of 2 uploads started processing"
        time.sleep(0.5)
    older, newer = sorted(new)
    statuses = {run_id: finished(stack, run_id) for run_id in (older, newer)}

    # Then both were processed, the newer only after the older had finished
    assert all(status.job(PROCESSING).status == "Completed" for status in statuses.values())
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


PAIRS = [f"pair-{i}" for i in range(6)]
PAIR_DAYS = 60


def _statuses(stack: EmbeddedStack) -> list[RunStatus]:
    assert stack.info is not None
    info = stack.info
    dynamodb = stack.resource("dynamodb")
    return pipeline_status(
        info.job_name_prefix,
        info.artifacts_bucket,
        stack.client("sagemaker"),
        stack.client("s3"),
        dynamodb.Table(info.registry_table),
        UploadQueue(dynamodb.Table(info.upload_queue_table)),
    )


def _finished_once_started(stack: EmbeddedStack, run_id: str) -> RunStatus:
    """The run's final status, waiting first for its turn in the upload queue."""
    assert stack.info is not None
    deadline = time.monotonic() + 600
    while run_id not in run_ids(stack.info.job_name_prefix, stack.client("sagemaker")):
        assert time.monotonic() < deadline, f"{run_id} never started processing"
        time.sleep(0.5)
    return finished(stack, run_id)


def test_twelve_uploads_in_one_second_are_processed_and_promoted_in_arrival_order(
    stack: EmbeddedStack,
) -> None:
    """The issue's case: a first and a second file for each of six customers, the second
    with newer readings for the same days, all put at once (within about a second)."""
    assert stack.info is not None
    info = stack.info
    sagemaker, s3 = stack.client("sagemaker"), stack.client("s3")
    # (Every run the shared stack already has, those never processed too: an upload
    # replaced or superseded before its turn is a run without a processing job)
    known = run_ids(info.job_name_prefix, sagemaker) | {run.run_id for run in _statuses(stack)}
    # Given a first file per customer and a second with different readings for its days
    first = {c: readings([c], START.isoformat(), PAIR_DAYS, seed=i) for i, c in enumerate(PAIRS)}
    second = {c: frame.assign(consumption=frame.consumption * 2 + 1) for c, frame in first.items()}
    # When each customer's first then second file is put, one customer after another
    put_order = []
    for customer in PAIRS:
        for name, files in (("first", first), ("second", second)):
            put_order.append(f"{customer}-{name}.csv")
            s3.put_object(
                Bucket=info.raw_bucket,
                Key=f"incoming/{put_order[-1]}",
                Body=to_csv(files[customer]),
            )
    # (fleetcast status lists all twelve at once, the ones not yet started as waiting)
    deadline = time.monotonic() + 120
    while len(queued := [r for r in _statuses(stack) if r.run_id not in known]) < len(put_order):
        assert time.monotonic() < deadline, f"only {len(queued)} of 12 uploads reached the queue"
        time.sleep(0.5)
    in_order = [run.run_id for run in queued]
    assert [run.upload_order for run in queued] == sorted(run.upload_order or 0 for run in queued)
    statuses = {run_id: _finished_once_started(stack, run_id) for run_id in in_order}

    # Then the runs, in run id order, are the uploads in the order they were put, each
    # processing job created only after the one before it had ended
    assert [statuses[r].source for r in in_order] == put_order
    assert all(status.job(PROCESSING).status == "Completed" for status in statuses.values())
    jobs = [
        sagemaker.describe_processing_job(ProcessingJobName=statuses[r].job(PROCESSING).name)
        for r in in_order
    ]
    for before, after in itertools.pairwise(jobs):
        assert after["CreationTime"] >= before["ProcessingEndTime"]
    # And fleetcast status shows them in that order, numbered
    shown = [run for run in _statuses(stack) if run.run_id not in known]
    assert [run.run_id for run in shown] == in_order
    assert all(run.upload_order is not None for run in shown)
    # And each second file's run says it replaced the first file's readings, every one of
    # them with another value (listed in its changed.csv)
    assert [statuses[r].readings_replaced for r in in_order] == [0, PAIR_DAYS] * len(PAIRS)
    assert [statuses[r].readings_changed for r in in_order] == [0, PAIR_DAYS] * len(PAIRS)
    # And each customer's history holds the second file's readings, and its live model
    # came from the second file's run
    run_of = {statuses[r].source: r for r in in_order}
    models = registry(stack)
    for customer in PAIRS:
        stored = read_history(s3, info.artifacts_bucket, customer)
        assert stored["y"].to_numpy() == pytest.approx(second[customer]["consumption"].to_numpy())
        live = models.live(customer)
        assert live is not None and live.run_id == run_of[f"{customer}-second.csv"], customer
