"""The spine, end to end on the embedded local stack: S3 drop -> processing -> sharded
training -> registration, with every job really run."""

import csv
import gzip
import io
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prophet.serialize import model_from_json

from fleetcast.cli import main
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.status import RunStatus, follow_run, run_ids, wait_for_new_run
from fleetcast_common.registry import ModelRegistry
from fleetcast_contracts import layout
from fleetcast_contracts.families import PROPHET
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_contracts.training_manifest import CustomerOutcome, TrainingManifest
from fleetcast_forecasters.families import compile_archive

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
DAYS = 150
TIMEOUT = 300


def readings(customers: list[str], start: str, days: int, seed: int = 0) -> pd.DataFrame:
    """Daily readings with a weekly pattern: what a meter export looks like."""
    dates = pd.date_range(start, periods=days, freq="D")
    random = np.random.default_rng(seed)
    frames = []
    for index, customer_id in enumerate(customers):
        base = 500 + 10 * index
        weekly = 1 - 0.2 * (dates.day_of_week >= 5)
        noise = random.normal(0, 0.08 * base, days)
        frames.append(
            pd.DataFrame(
                {
                    "customer_id": customer_id,
                    "timestamp": dates.strftime("%Y-%m-%dT08:00:00Z"),
                    "consumption": (base * weekly + noise).round(3),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def upload(stack: EmbeddedStack, name: str, body: bytes) -> str:
    """Drop a file under incoming/ and return the run id of the job it starts."""
    assert stack.info is not None
    sagemaker = stack.client("sagemaker")
    known = run_ids(stack.info.job_name_prefix, sagemaker)
    stack.client("s3").put_object(Bucket=stack.info.raw_bucket, Key=f"incoming/{name}", Body=body)
    return wait_for_new_run(stack.info.job_name_prefix, sagemaker, known)


def finished(stack: EmbeddedStack, run_id: str) -> RunStatus:
    assert stack.info is not None
    info = stack.info
    return follow_run(
        run_id,
        info.job_name_prefix,
        info.artifacts_bucket,
        stack.client("sagemaker"),
        stack.client("s3"),
        stack.resource("dynamodb").Table(info.registry_table),
        TIMEOUT,
    )


def manifests(stack: EmbeddedStack, run_id: str) -> list[TrainingManifest]:
    assert stack.info is not None
    s3 = stack.client("s3")
    prefix = layout.checkpoint_prefix(run_id)
    keys = [
        o["Key"]
        for o in s3.list_objects_v2(Bucket=stack.info.artifacts_bucket, Prefix=prefix).get(
            "Contents", []
        )
    ]
    return [
        TrainingManifest.model_validate_json(
            s3.get_object(Bucket=stack.info.artifacts_bucket, Key=k)["Body"].read()
        )
        for k in keys
        if Path(k).name.startswith("manifest-")
    ]


def wait_for_chunks(stack: EmbeddedStack) -> None:
    """Until the registration chunks queue has nothing queued or in flight."""
    sqs = stack.client("sqs")
    url = sqs.get_queue_url(QueueName=stack.template.physical_name("RegistrationChunksQueue"))[
        "QueueUrl"
    ]
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    deadline = time.monotonic() + TIMEOUT
    while any(
        int(v)
        for v in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"].values()
    ):
        assert time.monotonic() < deadline, "registration chunks were never all delivered"
        time.sleep(0.2)


def wait_for_events(stack: EmbeddedStack, function: str) -> None:
    """Until the queues of the function's rules hold nothing queued or in flight: every
    event that matched one of them (put there before the call that caused it returned)
    has been handled."""
    assert stack.delivery is not None
    sqs = stack.client("sqs")
    urls = stack.delivery.queue_urls(stack.functions[function].name)
    assert urls, f"{function} has no EventBridge rule"
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    deadline = time.monotonic() + TIMEOUT
    while any(
        int(count)
        for url in urls
        for count in sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)[
            "Attributes"
        ].values()
    ):
        assert time.monotonic() < deadline, f"events for {function} were never all handled"
        time.sleep(0.2)


def registry(stack: EmbeddedStack) -> ModelRegistry:
    assert stack.info is not None
    return ModelRegistry(stack.resource("dynamodb").Table(stack.info.registry_table))


def to_csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


@pytest.fixture(scope="module")
def first_run(stack: EmbeddedStack) -> dict[str, Any]:
    customers = [str(i) for i in range(30)]
    body = gzip.compress(to_csv(readings(customers, "2024-01-01", DAYS)))
    run_id = upload(stack, "first.csv.gz", body)
    return {"run_id": run_id, "customers": customers, "status": finished(stack, run_id)}


def test_every_customer_gets_a_live_loadable_model(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    status: RunStatus = first_run["status"]
    assert status.job(PROCESSING).status == "Completed", status.job(PROCESSING).failure
    assert status.job(TRAINING).status == "Completed", status.job(TRAINING).failure
    assert status.customers_processed == 30 and status.customers_trained == 30
    assert status.customers_registered == 30
    # Registered through chunks, every one of them counted
    assert status.registered and status.chunks_done == status.chunks_total
    assert status.chunks_total is not None and status.chunks_total >= 2  # two instances
    assert stack.info is not None
    s3 = stack.client("s3")
    for customer_id in first_run["customers"]:
        live = registry(stack).live(customer_id)
        assert live is not None and live.model_version == 1 and live.run_id == first_run["run_id"]
        assert live.rows == DAYS
        # The model served is a real, loadable model of the family the backtest chose, at a
        # path of its own: the key the training job wrote it to (registration copies
        # nothing)
        key = layout.MODELS_PREFIX + live.target_model
        assert key == layout.checkpoint_prefix(first_run["run_id"]) + f"{customer_id}.tar.gz"
        model_json, metadata = read_archive(
            s3.get_object(Bucket=stack.info.artifacts_bucket, Key=key)["Body"].read()
        )
        assert metadata.customer_id == customer_id
        assert metadata.model_kind == live.model_kind
        if metadata.model_kind == PROPHET:
            model = model_from_json(model_json)
            future = model.make_future_dataframe(periods=7, include_history=False)
            assert len(model.predict(future)) == 7
        forecast = compile_archive(model_json, metadata.model_kind, "D").forecast(7, seed=1)
        assert len(forecast.yhat) == 7 and np.isfinite(forecast.yhat).all()


def test_each_customer_is_trained_once_across_instances_and_shards_are_even(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    found = manifests(stack, first_run["run_id"])
    assert sorted(m.host for m in found) == ["algo-1", "algo-2"]
    trained = Counter(c.customer_id for m in found for c in m.customers)
    assert set(trained) == set(first_run["customers"]) and set(trained.values()) == {1}
    sizes = [len(m.customers) for m in found]
    assert max(sizes) - min(sizes) <= 1


def test_a_second_upload_retrains_only_its_customers_on_their_whole_history(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    # Given 5 existing customers get 10 more days
    touched = ["3", "7", "11", "19", "23"]
    more = readings(touched, pd.Timestamp("2024-01-01") + pd.Timedelta(days=DAYS), 10)
    # When they are uploaded
    run_id = upload(stack, "second.csv", to_csv(more))
    status = finished(stack, run_id)
    # Then exactly those 5 are retrained, on old + new rows, and only their versions go up
    assert status.customers_trained == 5, status
    retrained = sorted(c.customer_id for m in manifests(stack, run_id) for c in m.customers)
    assert retrained == sorted(touched)
    for customer_id in first_run["customers"]:
        live = registry(stack).live(customer_id)
        assert live is not None
        if customer_id in touched:
            assert (live.model_version, live.rows, live.run_id) == (2, DAYS + 10, run_id)
        else:
            assert (live.model_version, live.rows) == (1, DAYS)


def test_a_file_missing_columns_fails_processing_with_a_clear_reason_and_trains_nothing(
    stack: EmbeddedStack,
) -> None:
    run_id = upload(stack, "broken.csv", b"customer_id,when,kwh\n1,2024-01-01,3.5\n")
    status = finished(stack, run_id)
    assert status.job(PROCESSING).status == "Failed"
    assert status.job(PROCESSING).failure is not None
    assert (
        "timestamp" in status.job(PROCESSING).failure
        and "consumption" in status.job(PROCESSING).failure
    )
    assert status.job(TRAINING).name is None
    # And SageMaker reports it as on AWS: the container's words as the job's ExitMessage,
    # its own generic FailureReason (issue 41)
    described = stack.client("sagemaker").describe_processing_job(
        ProcessingJobName=status.job(PROCESSING).name
    )
    assert described["ExitMessage"] == status.job(PROCESSING).failure
    assert described["FailureReason"] == "AlgorithmError: See job logs for more information"


def test_a_mixed_file_processes_good_rows_and_reports_every_bad_one(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    # Given a store of the first run's 30 customers, and an upload of 2 good customers and
    # one bad row of each kind, plus a customer with 3 rows
    good = readings(["mix-a", "mix-b"], "2024-01-01", 90)
    short = readings(["mix-short"], "2024-01-01", 3)
    bad = pd.DataFrame(
        {
            "customer_id": ["mix-a", "../../etc/passwd", "mix-b", "mix-b", "mix-a"],
            "timestamp": [
                "not-a-date",
                "2024-01-02T08:00:00Z",
                "2024-01-03T08:00:00Z",
                "2024-01-04T08:00:00Z",
                good.iloc[0]["timestamp"],
            ],
            "consumption": ["1", "1", "abc", "-5", "7"],
        }
    )
    frame = pd.concat([good, short, bad], ignore_index=True)
    run_id = upload(stack, "mixed.csv", to_csv(frame))
    status = finished(stack, run_id)
    assert status.job(PROCESSING).status == "Completed"
    assert status.rows_rejected == len(bad)
    assert stack.info is not None
    report = stack.client("s3").get_object(
        Bucket=stack.info.artifacts_bucket, Key=layout.report_prefix(run_id) + "rejected.csv"
    )
    rejected = list(csv.DictReader(io.StringIO(report["Body"].read().decode())))
    first_bad_line = len(good) + len(short) + 2  # header is line 1
    assert [int(r["line"]) for r in rejected] == list(
        range(first_bad_line, first_bad_line + len(bad))
    )
    assert len({r["reason"] for r in rejected}) == len(bad)
    # And the 3-day customer, too short for a model of its own, is served the fleet's cold
    # start (learnt from the stored customers too: the run has three), the others their own
    results = {c.customer_id: c for m in manifests(stack, run_id) for c in m.customers}
    assert {c.outcome for c in results.values()} == {CustomerOutcome.TRAINED}
    short = results["mix-short"].metadata
    assert short is not None and short.model_kind == "cold_start" and short.metrics is None
    assert results["mix-a"].metadata is not None
    assert results["mix-a"].metadata.model_kind != "cold_start"
    assert registry(stack).live("mix-short") is not None
    assert registry(stack).live("mix-a") is not None


def test_a_repeated_upload_event_starts_one_processing_job(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    assert stack.info is not None
    # Given an upload (the job copies the object its event names, so it must exist), whose
    # S3 event is delivered twice more besides the one S3 sends
    key = "incoming/delivered-twice.csv"
    body = to_csv(readings(["twice"], "2024-01-01", 10))
    put = stack.client("s3").put_object(Bucket=stack.info.raw_bucket, Key=key, Body=body)
    event = json.loads((ROOT / "events" / "s3_object_created.json").read_text())
    event["detail"]["bucket"]["name"] = stack.info.raw_bucket
    event["detail"]["object"].update(
        key=key, size=len(body), etag=put["ETag"].strip('"'), **{"version-id": put["VersionId"]}
    )
    function = stack.functions["StartProcessingFunction"]
    first = function.invoke(event)
    again = function.invoke(event)
    # Then every delivery names the one job (started by whichever came first, or waiting
    # behind another upload's), and only one exists
    assert first["outcome"] in ("started", "already_started", "queued")
    assert again["outcome"] in ("already_started", "queued")
    assert again["job_name"] == first["job_name"]
    deadline = time.monotonic() + TIMEOUT
    while first["run_id"] not in run_ids(stack.info.job_name_prefix, stack.client("sagemaker")):
        assert time.monotonic() < deadline, "the upload never started processing"
        time.sleep(0.5)
    status = finished(stack, first["run_id"])
    assert status.job(PROCESSING).status == "Completed" and status.source_key == key
    jobs = stack.client("sagemaker").list_processing_jobs(NameContains=first["run_id"])
    assert len(jobs["ProcessingJobSummaries"]) == 1


def test_repeated_job_events_start_one_training_job_and_register_once(
    stack: EmbeddedStack, first_run: dict[str, Any]
) -> None:
    assert stack.info is not None
    prefix, run_id = stack.info.job_name_prefix, first_run["run_id"]
    # Given the first run's processing and training job events, delivered again
    processing = json.loads((ROOT / "events" / "processing_job_completed.json").read_text())
    processing["detail"]["ProcessingJobName"] = f"{prefix}-p-{run_id}"
    training = json.loads((ROOT / "events" / "training_job_completed.json").read_text())
    training["detail"]["TrainingJobName"] = f"{prefix}-t-{run_id}"
    training["detail"]["ResourceConfig"]["InstanceCount"] = (
        first_run["status"].job(TRAINING).instances
    )
    versions_before = {c: registry(stack).live(c) for c in first_run["customers"]}
    # When the functions get them
    started = stack.functions["StartTrainingFunction"].invoke(processing)
    registered = stack.functions["RegisterModelsFunction"].invoke(training)
    # Then no second training job starts, and no customer is registered a second time
    assert started["outcome"] == "already_started"
    jobs = stack.client("sagemaker").list_training_jobs(NameContains=run_id)
    assert len(jobs["TrainingJobSummaries"]) == 1
    progress_before = registry(stack).run(run_id)
    assert progress_before is not None and progress_before.complete
    assert (registered["outcome"], registered["chunks"]) == ("queued", progress_before.chunks_total)
    # And once its chunks are delivered again, every decision and count stays as it was
    wait_for_chunks(stack)
    assert registry(stack).run(run_id) == progress_before
    assert progress_before.registered == len(first_run["customers"])
    assert {c: registry(stack).live(c) for c in first_run["customers"]} == versions_before


def test_status_reports_each_upload_with_its_jobs_and_counts(
    stack: EmbeddedStack,
    first_run: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a standard client environment from the running stack (what `fleetcast env` prints)
    assert stack.info is not None
    for name, value in stack.info.environment().items():
        monkeypatch.setenv(name, value)
    # When `fleetcast status --json` runs
    assert main(["status", "--json"]) == 0
    runs = {run["run_id"]: run for run in json.loads(capsys.readouterr().out)}
    # Then the first upload shows both jobs and its customer counts
    first = runs[first_run["run_id"]]
    jobs = first["jobs"]
    assert (jobs["processing"]["status"], jobs["training"]["status"]) == ("Completed", "Completed")
    assert jobs["training"]["instances"] == 2
    assert (
        first["customers_processed"],
        first["customers_trained"],
        first["customers_failed"],
    ) == (30, 30, 0)
    assert first["customers_registered"] == 30 and first["rows_rejected"] == 0
    assert first["source"] == "first.csv.gz"
    # And a failed upload says why
    failed = [run for run in runs.values() if run["jobs"]["processing"]["status"] == "Failed"]
    assert failed and all(run["jobs"]["processing"]["failure"] for run in failed)


def test_upload_puts_files_only_under_incoming_and_only_incoming_starts_a_run(
    stack: EmbeddedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert stack.info is not None
    for name, value in stack.info.environment().items():
        monkeypatch.setenv(name, value)
    sagemaker = stack.client("sagemaker")
    jobs_before = len(sagemaker.list_processing_jobs()["ProcessingJobSummaries"])
    path = tmp_path / "notes.csv"
    path.write_text("customer_id,timestamp,consumption\n1,2024-01-01,1\n")
    # When fleetcast upload is asked to put a file outside incoming/
    assert main(["upload", str(path), "--prefix", "manual/"]) == 2
    # Then it refuses, uploading nothing (tests/unit/test_cli_upload.py: saying why)
    s3 = stack.client("s3")
    assert "Contents" not in s3.list_objects_v2(Bucket=stack.info.raw_bucket, Prefix="manual/")
    # And a file put there by other means is stored, and no rule fires for it
    s3.put_object(Bucket=stack.info.raw_bucket, Key="manual/notes.csv", Body=path.read_bytes())
    wait_for_events(stack, "StartProcessingFunction")
    assert len(sagemaker.list_processing_jobs()["ProcessingJobSummaries"]) == jobs_before
    # And a missing file is a clear error, not a traceback
    assert main(["upload", str(tmp_path / "missing.csv")]) == 2
