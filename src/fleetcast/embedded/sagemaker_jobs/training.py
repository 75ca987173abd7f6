"""A training instance under the SageMaker training contract: its /opt/ml tree prepared,
its model uploaded, its metrics scraped from its log, its status transitions."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetcast.embedded.sagemaker_jobs.checkpoints import checkpoint_dir
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, shard, split_s3_uri
from fleetcast_contracts import training as training_contract


def now() -> datetime:
    return datetime.now(UTC)


def transition(job: Any, status: str, message: str) -> None:
    moment = now()
    if job.secondary_status_transitions:
        job.secondary_status_transitions[-1].setdefault("EndTime", moment)
    job.secondary_status_transitions.append(
        {"Status": status, "StartTime": moment, "StatusMessage": message}
    )
    job.secondary_status = status
    job.last_modified_time = moment


def prepare_instance(
    transfer: S3Transfer, job: Any, root: Path, host: str, hosts: list[str]
) -> Path:
    (root / training_contract.HYPERPARAMETERS).parent.mkdir(parents=True, exist_ok=True)
    (root / training_contract.HYPERPARAMETERS).write_text(json.dumps(job.hyper_parameters or {}))
    (root / training_contract.RESOURCE_CONFIG).write_text(
        json.dumps({"current_host": host, "hosts": hosts, "network_interface_name": "eth0"})
    )
    channels: dict[str, Any] = {}
    index = hosts.index(host)
    for channel in job.input_data_config or []:
        source = channel["DataSource"]["S3DataSource"]
        distribution = source.get("S3DataDistributionType", "FullyReplicated")
        channels[channel["ChannelName"]] = {
            "ContentType": channel.get("ContentType", ""),
            "TrainingInputMode": job.algorithm_specification.get("TrainingInputMode", "File"),
            "S3DistributionType": distribution,
            "RecordWrapperType": channel.get("RecordWrapperType", "None"),
        }
        target = root / training_contract.DATA_DIR / channel["ChannelName"]
        if target.exists():
            continue  # a restart after interruption keeps the data it downloaded
        target.mkdir(parents=True)
        bucket, prefix = split_s3_uri(source["S3Uri"])
        keys = transfer.keys(bucket, prefix)
        if distribution == "ShardedByS3Key":
            keys = shard(keys, len(hosts), index)
        transfer.download(bucket, prefix, keys, target)
    (root / training_contract.INPUT_DATA_CONFIG).write_text(json.dumps(channels))
    for folder in (
        training_contract.MODEL_DIR,
        training_contract.OUTPUT_DATA_DIR,
        training_contract.CHECKPOINT_DIR,
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
    checkpoint = job.checkpoint_config
    if checkpoint:
        # Restored from S3 at every start, as SageMaker does after a spot interruption.
        local = checkpoint_dir(root, checkpoint)
        # A restarted instance has a fresh disk: only what reached S3 comes back.
        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        bucket, prefix = split_s3_uri(checkpoint["S3Uri"])
        prefix = prefix if prefix.endswith("/") else prefix + "/"
        transfer.download(bucket, prefix, transfer.keys(bucket, prefix), local)
    return root


def upload_model(transfer: S3Transfer, job: Any, root: Path) -> None:
    output = job.output_data_config["S3OutputPath"].rstrip("/")
    bucket, prefix = split_s3_uri(f"{output}/{job.training_job_name}/output/model.tar.gz")
    archive = root / "model.tar.gz"
    model_dir = root / training_contract.MODEL_DIR
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(model_dir.rglob("*")):
            tar.add(path, arcname=path.relative_to(model_dir).as_posix(), recursive=False)
    transfer.upload(archive, bucket, prefix)
    job.model_artifacts = {"S3ModelArtifacts": f"s3://{bucket}/{prefix}"}


def scrape_metrics(job: Any, logs: list[Path]) -> list[dict[str, Any]]:
    definitions = job.algorithm_specification.get("MetricDefinitions") or []
    found: dict[str, float] = {}
    for log_path in logs:
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        for definition in definitions:
            for match in re.finditer(definition["Regex"], text):
                try:
                    found[definition["Name"]] = float(match.group(1))
                except (IndexError, ValueError):
                    continue
    return [{"MetricName": k, "Value": v, "Timestamp": now()} for k, v in found.items()]
