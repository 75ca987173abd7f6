"""A customer metadata upload through the pipeline on a moto server: start-processing
routes it to a metadata job, the job (run here as SageMaker would: inputs downloaded,
the container's entrypoint, outputs uploaded) merges it into the store, and training is
started for the customers whose calendar changed, with their calendars."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from function_helpers import load_function
from test_pipeline_observability import _Context, _event, world

from fleetcast.embedded.sagemaker_jobs.transfer import split_s3_uri
from fleetcast_contracts import layout
from fleetcast_contracts.opt_ml import OPT_ML_ENV
from fleetcast_contracts.processing import ProcessingSummary
from fleetcast_contracts.training import CALENDARS_FILE
from fleetcast_processing.__main__ import main as processing_main

__all__ = ["world"]


def upload(world: dict[str, Any], key: str, body: str, time: str) -> dict[str, Any]:
    """Put ``body`` under ``key`` in the raw bucket; the S3 event EventBridge would send.

    ``time`` decides the run id, and so the job name, on the moto server the session's
    tests share: no other test's upload may have it."""
    event = _event("s3_object_created.json")
    bucket = event["detail"]["bucket"]["name"]
    s3 = world["s3"]
    s3.create_bucket(Bucket=bucket)
    put = s3.put_object(Bucket=bucket, Key=key, Body=body.encode())
    event["time"] = time
    event["detail"]["object"].update(
        key=key, size=len(body), sequencer=None, etag=put["ETag"].strip('"')
    )
    event["detail"]["object"].pop("version-id")
    return event


def run_like_sagemaker(job_name: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Download the job's inputs under ``root``, run the container's entrypoint with its
    arguments and environment, upload its outputs."""
    s3 = boto3.client("s3")
    job = boto3.client("sagemaker").describe_processing_job(ProcessingJobName=job_name)
    for entry in job["ProcessingInputs"]:
        bucket, prefix = split_s3_uri(entry["S3Input"]["S3Uri"])
        local = root / entry["S3Input"]["LocalPath"].removeprefix("/opt/ml/")
        for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", []):
            target = local / item["Key"][len(prefix) :].lstrip("/")
            if item["Key"] == prefix:  # an object input: the file itself
                target = local / Path(prefix).name
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, item["Key"], str(target))
    monkeypatch.setenv(OPT_ML_ENV, str(root))
    for name, value in job.get("Environment", {}).items():
        monkeypatch.setenv(name, value)
    exit_code = processing_main(job["AppSpecification"]["ContainerArguments"])
    if exit_code == 0:
        for entry in job["ProcessingOutputConfig"]["Outputs"]:
            bucket, prefix = split_s3_uri(entry["S3Output"]["S3Uri"])
            local = root / entry["S3Output"]["LocalPath"].removeprefix("/opt/ml/")
            for path in sorted(p for p in local.rglob("*") if p.is_file()):
                s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix())
    return exit_code


def completed(job_name: str) -> dict[str, Any]:
    event = _event("processing_job_completed.json")
    event["detail"]["ProcessingJobName"] = job_name
    return event


def read_text(world: dict[str, Any], key: str) -> str:
    return str(world["s3"].get_object(Bucket=world["bucket"], Key=key)["Body"].read().decode())


def test_metadata_uploads_merge_into_the_store_and_retrain_changed_calendars(
    world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a customer with history, and a metadata file for it, a customer without
    # readings yet, and a row with a country the holidays package does not know
    s3, bucket = world["s3"], world["bucket"]
    history = pa.table(
        {
            "customer_id": ["a1"] * 30,
            "ts": pa.array(
                [np.datetime64(f"2026-10-{day:02d}", "us") for day in range(1, 31)],
                pa.timestamp("us"),
            ),
            "y": [float(100 + day) for day in range(1, 31)],
        }
    )
    shard = io.BytesIO()
    pq.write_table(history, shard)
    s3.put_object(Bucket=bucket, Key=layout.history_shard_key("a1"), Body=shard.getvalue())
    first = upload(
        world,
        "incoming/metadata/customers-1.csv",
        "customer_id,country,subdivision,segment\na1,US,,retail\nb2,DE,BY,\nc3,XX,,\n",
        "2026-11-21T07:00:00Z",
    )
    start_processing = load_function("start_processing").lambda_handler
    start_training = load_function("start_training").lambda_handler
    # When start-processing handles its event and the job runs
    started = start_processing(first, _Context())
    assert started["outcome"] == "started", started
    job = boto3.client("sagemaker").describe_processing_job(ProcessingJobName=started["job_name"])
    arguments = job["AppSpecification"]["ContainerArguments"]
    assert arguments[arguments.index("--input-kind") + 1] == "metadata"
    assert run_like_sagemaker(started["job_name"], tmp_path / "first", monkeypatch) == 0
    run_id = started["run_id"]
    # Then every row is accounted for, the bad code named on its line
    summary = ProcessingSummary.model_validate_json(
        read_text(world, layout.report_prefix(run_id) + "summary.json")
    )
    assert (summary.rows_read, summary.rows_accepted, summary.rows_rejected) == (3, 2, 1)
    rejected = list(
        csv.DictReader(io.StringIO(read_text(world, layout.report_prefix(run_id) + "rejected.csv")))
    )
    assert [(r["line"], r["reason"]) for r in rejected] == [("4", "unknown_country")]
    assert "'XX'" in rejected[0]["message"]
    # And the store holds both customers, attributes kept
    store_key = layout.METADATA_PREFIX + layout.METADATA_STORE_FILE
    store = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=store_key)["Body"].read()))
    rows = {row["customer_id"]: row for row in store.to_pylist()}
    assert rows.keys() == {"a1", "b2"}
    assert json.loads(rows["a1"]["attributes"]) == {"segment": "retail"}
    # And the customer with history goes to training again, with its calendar; the other
    # waits for its readings
    assert summary.metadata is not None
    assert summary.metadata.retrained == ["a1"]
    assert summary.metadata.waiting_for_readings == ["b2"]
    (part,) = s3.list_objects_v2(Bucket=bucket, Prefix=layout.train_prefix(run_id))["Contents"]
    sent = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=part["Key"])["Body"].read()))
    assert sent.column("customer_id").to_pylist() == ["a1"] * 30
    assert sent.column("y").to_pylist() == [100.0 + day for day in range(1, 31)]
    calendars = read_text(world, layout.calendars_prefix(run_id) + CALENDARS_FILE)
    assert calendars.splitlines() == ["customer_id,country,subdivision", "a1,US,"]
    training = start_training(completed(started["job_name"]), _Context())
    assert training["outcome"] == "started", training
    request = boto3.client("sagemaker").describe_training_job(TrainingJobName=training["job_name"])
    channels = {c["ChannelName"] for c in request["InputDataConfig"]}
    assert channels == {"train", "calendars", "fleet"}

    # Given a second metadata file, uploaded later: a1 unchanged, b2 moved to Berlin
    second = upload(
        world,
        "incoming/metadata/customers-2.csv",
        "customer_id,country,subdivision\na1,US,\nb2,DE,BE\n",
        "2026-11-21T08:00:00Z",
    )
    # When start-processing handles it (moto reports the first job ended) and it runs
    started = start_processing(second, _Context())
    assert started["outcome"] == "started", started
    job = boto3.client("sagemaker").describe_processing_job(ProcessingJobName=started["job_name"])
    assert "metadata" in {i["InputName"] for i in job["ProcessingInputs"]}
    assert run_like_sagemaker(started["job_name"], tmp_path / "second", monkeypatch) == 0
    # Then the newest upload wins, whole rows at a time (b2's calendar, a1's attributes),
    # and a1, whose calendar did not change, is not retrained
    summary = ProcessingSummary.model_validate_json(
        read_text(world, layout.report_prefix(started["run_id"]) + "summary.json")
    )
    assert summary.metadata is not None
    assert summary.metadata.calendar_changed == ["b2"]
    assert summary.metadata.retrained == []
    store = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=store_key)["Body"].read()))
    rows = {row["customer_id"]: row for row in store.to_pylist()}
    assert (rows["b2"]["country"], rows["b2"]["subdivision"]) == ("DE", "BE")
    assert json.loads(rows["a1"]["attributes"]) == {}
    # And no training starts: nobody's calendar changed with history to retrain
    ignored = start_training(completed(started["job_name"]), _Context())
    assert ignored["outcome"] == "ignored", ignored
