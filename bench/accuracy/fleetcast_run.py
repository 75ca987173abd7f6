"""fleetcast's forecasts: what a customer of a deployed stack would be served.

The fit readings are written as one CSV upload (``customer_id,timestamp,consumption``)
and taken through the real jobs, as a deployed stack runs them:

1. the **processing job** (``fleetcast_processing.__main__.main``, the container's entry
   point) with the arguments and environment of the CreateProcessingJob request that
   start-processing builds (``fleetcast_common.jobs.processing_job_request``) from the
   settings template.yaml gives it by default;
2. the **training job** (``fleetcast_training.job.run_job``, what the container's entry
   point runs) with the hyperparameters of the CreateTrainingJob request start-training
   builds (``training_job_request``) the same way, on every instance the request asks for,
   each given its ``ShardedByS3Key`` share of processing's training parts and the
   calendars file, one instance after the other on this machine;
3. each customer's forecast is read from the run's **forecast export**
   (``exports/forecasts/``, ``ForecastExportDays`` days from the end of its history: as
   many days, or for ``ModelFrequency=H`` 24 times as many hours),
   which equals what the endpoint serves for that model: ``yhat``, and its served 80%
   interval ``yhat_lower``/``yhat_upper`` as the 0.1 and 0.9 quantiles (the export has no
   median: the point forecast stands for it in wQL).

So whatever the jobs do to readings or models (cleaning, model choice, gates) is in what
is measured, and a change to them needs no change here. CPU is the training job's own
(user + system of the job and its worker processes, every instance), per customer trained.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from bench.accuracy.datasets import CustomerSplit
from bench.accuracy.metrics import LOWER, UPPER
from bench.accuracy.peers import Forecasts
from bench.measure import cpu_seconds
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.sagemaker_jobs.transfer import shard
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.jobs import Upload, processing_job_request, training_job_request
from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_contracts import layout
from fleetcast_contracts import processing as processing_contract
from fleetcast_contracts import training as training_contract
from fleetcast_contracts.opt_ml import OPT_ML_ENV, resolve
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_processing.__main__ import main as processing_main
from fleetcast_training.environment import TrainingEnvironment
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.job import run_job
from fleetcast_training.run_exports import EXPORTS_DIR, FORECASTS

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
RUN_ID = "q0000000001-20240101t000000"
UPLOAD_NAME = "readings.csv"
EXPORT_DAYS_PARAMETER = "ForecastExportDays"


def export_horizon(template: Path = TEMPLATE) -> int:
    """The forecast export's days as a deployed stack has them: the template's default of
    ``ForecastExportDays``."""
    return int(LocalTemplate(template).parameters[EXPORT_DAYS_PARAMETER])


@dataclass(frozen=True)
class FleetcastRun:
    forecasts: Forecasts
    training_cpu_seconds: float
    processing_cpu_seconds: float
    trained: int
    failed: dict[str, str]
    hyperparameters: dict[str, str]
    instances: int
    # Customers whose export lacks one or more of the horizon's days.
    incomplete: list[str]


def run(
    customers: list[CustomerSplit], scratch: Path, parameters: dict[str, str] | None = None
) -> FleetcastRun:
    """fleetcast's processing and training jobs on ``customers``, with the settings the
    template gives a stack (the local stack's image URIs, and ``parameters`` over its
    defaults, as ``sam deploy --parameter-overrides`` would)."""
    template = LocalTemplate(
        TEMPLATE, parameter_overrides={**LOCAL_IMAGE_PARAMETERS, **(parameters or {})}
    )
    processing_settings = ProcessingSettings.from_env(
        template.function_environment("StartProcessingFunction")
    )
    training_settings = TrainingSettings.from_env(
        template.function_environment("StartTrainingFunction")
    )
    scratch.mkdir(parents=True, exist_ok=True)
    upload_path = scratch / UPLOAD_NAME
    write_upload(customers, upload_path)
    upload = Upload(
        bucket=processing_settings.raw_bucket,
        key=f"incoming/{UPLOAD_NAME}",
        revision="bench",
        size=upload_path.stat().st_size,
        uploaded_at=datetime.now(UTC),
    )
    staged = layout.staged_upload_key(RUN_ID, upload.key)
    request = processing_job_request(processing_settings, RUN_ID, upload, staged, False)

    processing_root = scratch / "processing"
    raw = resolve(processing_contract.RAW_INPUT, processing_root)
    raw.mkdir(parents=True)
    shutil.copy(upload_path, raw / UPLOAD_NAME)
    started = cpu_seconds()
    with _environment({**request["Environment"], OPT_ML_ENV: str(processing_root)}):
        code = processing_main(list(request["AppSpecification"]["ContainerArguments"]))
    processing_cpu = cpu_seconds() - started
    if code != 0:
        message = resolve(processing_contract.MESSAGE_FILE, processing_root)
        raise RuntimeError(
            f"processing failed: {message.read_text() if message.exists() else code}"
        )
    train_parts = sorted(resolve(processing_contract.TRAIN_OUTPUT, processing_root).iterdir())
    calendars = resolve(processing_contract.CALENDARS_OUTPUT, processing_root)

    training = training_job_request(training_settings, RUN_ID, len(train_parts))
    hyperparameters = {str(k): str(v) for k, v in training["HyperParameters"].items()}
    hosts = training_contract.host_names(int(training["ResourceConfig"]["InstanceCount"]))
    started = cpu_seconds()
    trained = 0
    failed: dict[str, str] = {}
    exports: list[Path] = []
    for index, host in enumerate(hosts):
        root = scratch / "training" / host
        parts = shard([str(p) for p in train_parts], len(hosts), index)
        environment = _lay_out_instance(
            root, host, hosts, training, hyperparameters, parts, calendars
        )
        result = run_job(environment, Hyperparameters.parse(environment.hyperparameters))
        for customer in result.results.customers():
            if customer.outcome is CustomerOutcome.TRAINED:
                trained += 1
            elif customer.outcome is CustomerOutcome.FAILED:
                failed[customer.customer_id] = customer.reason or ""
        exports += sorted((environment.checkpoint_dir / EXPORTS_DIR / FORECASTS).glob("*.parquet"))
    training_cpu = cpu_seconds() - started

    values, quantiles, incomplete = _horizon_forecasts(exports, customers)
    per_customer = training_cpu / max(trained, 1)
    return FleetcastRun(
        forecasts=Forecasts(values, dict.fromkeys(values, per_customer), quantiles),
        training_cpu_seconds=training_cpu,
        processing_cpu_seconds=processing_cpu,
        trained=trained,
        failed=failed,
        hyperparameters=hyperparameters,
        instances=len(hosts),
        incomplete=incomplete,
    )


def write_upload(customers: list[CustomerSplit], path: Path) -> None:
    """The fit readings as fleetcast's upload CSV, timestamps as the source wrote them."""
    frame = pd.concat([c.fit_readings for c in customers], ignore_index=True)
    frame.to_csv(path, index=False, date_format="%Y-%m-%dT%H:%M:%S")


def _lay_out_instance(
    root: Path,
    host: str,
    hosts: list[str],
    request: dict[str, Any],
    hyperparameters: dict[str, str],
    parts: list[str],
    calendars: Path,
) -> TrainingEnvironment:
    """``/opt/ml`` of one training instance as SageMaker lays it out for ``request``."""
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (root / training_contract.HYPERPARAMETERS).write_text(json.dumps(hyperparameters))
    (root / training_contract.RESOURCE_CONFIG).write_text(
        json.dumps({"current_host": host, "hosts": hosts})
    )
    channels: dict[str, dict[str, str]] = {}
    for channel in request["InputDataConfig"]:
        name = channel["ChannelName"]
        source = channel["DataSource"]["S3DataSource"]
        channels[name] = {
            "ContentType": channel.get("ContentType", ""),
            "TrainingInputMode": request["AlgorithmSpecification"]["TrainingInputMode"],
            "S3DistributionType": source["S3DataDistributionType"],
        }
        target = root / training_contract.DATA_DIR / name
        target.mkdir(parents=True)
        if name == training_contract.TRAIN_CHANNEL:
            for part in parts:
                shutil.copy(part, target / Path(part).name)
        elif name == training_contract.CALENDARS_CHANNEL and calendars.is_dir():
            for file in calendars.iterdir():
                shutil.copy(file, target / file.name)
    (root / training_contract.INPUT_DATA_CONFIG).write_text(json.dumps(channels))
    for folder in (
        training_contract.MODEL_DIR,
        training_contract.OUTPUT_DATA_DIR,
        training_contract.CHECKPOINT_DIR,
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
    return TrainingEnvironment.load(root)


def _horizon_forecasts(
    exports: list[Path], customers: list[CustomerSplit]
) -> tuple[dict[str, np.ndarray], dict[float, dict[str, np.ndarray]], list[str]]:
    """Each customer's exported ``yhat`` on its horizon's days or hours (NaN where one is
    missing), and its served 80% interval (``yhat_lower``, ``yhat_upper``) as the 0.1 and
    0.9 quantiles."""
    columns = ["customer_id", "ds", "yhat", "yhat_lower", "yhat_upper"]
    if exports:
        frame = pq.read_table(exports, columns=columns).to_pandas()
    else:
        frame = pd.DataFrame({column: [] for column in columns})
    by_customer = {str(k): rows for k, rows in frame.groupby("customer_id", sort=False)}
    values: dict[str, np.ndarray] = {}
    quantiles: dict[float, dict[str, np.ndarray]] = {LOWER: {}, UPPER: {}}
    incomplete: list[str] = []
    for customer in customers:
        rows = by_customer.get(customer.customer_id)
        if rows is None:
            continue
        stamps = pd.to_datetime(rows["ds"]).dt.floor(customer.frequency.alias)
        indexed = rows.set_index(stamps)
        aligned = indexed["yhat"].reindex(customer.horizon_index).to_numpy(np.float64)
        if np.isnan(aligned).any():
            incomplete.append(customer.customer_id)
        values[customer.customer_id] = aligned
        for level, column in ((LOWER, "yhat_lower"), (UPPER, "yhat_upper")):
            bound = indexed[column].reindex(customer.horizon_index).to_numpy(np.float64)
            if not np.isnan(bound).any():
                quantiles[level][customer.customer_id] = bound
    return values, quantiles, incomplete


@contextlib.contextmanager
def _environment(variables: dict[str, str]) -> Iterator[None]:
    """The container's environment variables, for the one in-process job run."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
