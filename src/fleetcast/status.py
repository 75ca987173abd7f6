"""Where each upload is in the pipeline, read from the same APIs on AWS and locally:
its processing job and report, its training job and manifests, and the registry."""

from __future__ import annotations

import json
import posixpath
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from fleetcast_common import layout
from fleetcast_common.aws import error_code
from fleetcast_common.ids import run_id_from_job_name, training_job_name
from fleetcast_common.registration import read_manifests
from fleetcast_common.training_manifest import CustomerOutcome


class RunStatus(BaseModel):
    run_id: str
    source: str | None = None
    processing_job: str
    processing_status: str
    processing_failure: str | None = None
    rows_read: int | None = None
    rows_rejected: int | None = None
    customers_processed: int | None = None
    training_job: str | None = None
    training_status: str | None = None
    training_secondary_status: str | None = None
    training_failure: str | None = None
    instances: int | None = None
    customers_checkpointed: int = 0
    customers_trained: int | None = None
    customers_failed: int | None = None
    customers_registered: int = 0
    customers_decided: int = 0
    created_at: datetime | None = None
    processing_started_at: datetime | None = None
    processing_ended_at: datetime | None = None
    training_started_at: datetime | None = None
    training_ended_at: datetime | None = None

    @property
    def done(self) -> bool:
        """Nothing more will happen to this run."""
        if self.processing_status in ("Failed", "Stopped"):
            return True
        if self.training_status in ("Failed", "Stopped"):
            return True
        if self.training_status == "Completed" and self.customers_trained is not None:
            return self.customers_decided >= self.customers_trained
        return False


def decisions_per_run(table: Any) -> dict[str, dict[str, int]]:
    """Per run: how many of its models are recorded, and how many of them went live."""
    counts: dict[str, dict[str, int]] = {}
    scan: dict[str, Any] = {
        "FilterExpression": "begins_with(#r, :model)",
        "ExpressionAttributeNames": {"#r": "record", "#s": "status"},
        "ExpressionAttributeValues": {":model": "MODEL#"},
        "ProjectionExpression": "run_id, #s",
    }
    while True:
        page = table.scan(**scan)
        for item in page.get("Items", []):
            run = counts.setdefault(str(item["run_id"]), {"decided": 0, "live": 0})
            run["decided"] += 1
            run["live"] += item.get("status") == "live"
        if "LastEvaluatedKey" not in page:
            return counts
        scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def run_status(
    run_id: str,
    prefix: str,
    bucket: str,
    sagemaker: Any,
    s3: Any,
    decisions: dict[str, dict[str, int]],
) -> RunStatus:
    processing_job = f"{prefix}-p-{run_id}"
    described = sagemaker.describe_processing_job(ProcessingJobName=processing_job)
    status = RunStatus(
        run_id=run_id,
        processing_job=processing_job,
        processing_status=described["ProcessingJobStatus"],
        processing_failure=described.get("FailureReason") or None,
        created_at=described.get("CreationTime"),
        processing_started_at=described.get("ProcessingStartTime"),
        processing_ended_at=described.get("ProcessingEndTime"),
        customers_registered=decisions.get(run_id, {}).get("live", 0),
        customers_decided=decisions.get(run_id, {}).get("decided", 0),
    )
    try:
        summary = json.loads(
            s3.get_object(Bucket=bucket, Key=layout.report_prefix(run_id) + "summary.json")[
                "Body"
            ].read()
        )
        status.source = summary.get("source") or summary.get("source_name")
        status.rows_read = summary.get("rows_read")
        status.rows_rejected = summary.get("rows_rejected")
        status.customers_processed = summary.get("customers")
    except Exception as error:
        if error_code(error) not in ("NoSuchKey", "404"):
            raise
    if status.processing_status != "Completed":
        return status
    try:
        training = sagemaker.describe_training_job(
            TrainingJobName=training_job_name(prefix, run_id)
        )
    except Exception as error:
        if error_code(error) in ("ValidationException", "ResourceNotFound"):
            return status
        raise
    status.training_job = training["TrainingJobName"]
    status.training_status = training["TrainingJobStatus"]
    status.training_secondary_status = training.get("SecondaryStatus")
    status.training_failure = training.get("FailureReason") or None
    status.instances = training.get("ResourceConfig", {}).get("InstanceCount")
    status.training_started_at = training.get("TrainingStartTime")
    status.training_ended_at = training.get("TrainingEndTime")
    checkpoint = layout.checkpoint_prefix(run_id)
    paginator = s3.get_paginator("list_objects_v2")
    status.customers_checkpointed = sum(
        1
        for page in paginator.paginate(Bucket=bucket, Prefix=checkpoint)
        for entry in page.get("Contents", [])
        if entry["Key"].endswith(layout.MODEL_ARCHIVE_SUFFIX)
        and not posixpath.basename(entry["Key"]).startswith("manifest-")
    )
    if status.training_status == "Completed":
        manifests = read_manifests(s3, bucket, run_id)
        results = [r for m in manifests for r in m.customers]
        status.customers_trained = sum(
            1 for r in results if r.outcome is not CustomerOutcome.FAILED
        )
        status.customers_failed = sum(1 for r in results if r.outcome is CustomerOutcome.FAILED)
    return status


def pipeline_status(
    prefix: str, bucket: str, sagemaker: Any, s3: Any, table: Any
) -> list[RunStatus]:
    """Every run of this stack, oldest first."""
    names: list[str] = []
    for page in sagemaker.get_paginator("list_processing_jobs").paginate(
        NameContains=f"{prefix}-p-"
    ):
        names.extend(job["ProcessingJobName"] for job in page.get("ProcessingJobSummaries", []))
    decisions = decisions_per_run(table)
    runs = []
    for name in names:
        run_id = run_id_from_job_name(prefix, name)
        if run_id is not None:
            runs.append(run_status(run_id, prefix, bucket, sagemaker, s3, decisions))
    return sorted(runs, key=lambda r: r.run_id)
