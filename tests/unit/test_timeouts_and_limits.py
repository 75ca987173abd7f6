"""Issue 27, finding 4: limits and timeouts that fail on AWS and nowhere here unless
checked: the forecast API's retries against its 29 s, processing's MaxRuntimeInSeconds
(now a parameter, set per environment), and start-processing's time for its copy.

The SQS batch total is tests/integration/test_chunk_queue_limits.py (moto enforces it).
"""

from __future__ import annotations

import math
from typing import Any

import botocore.session
import pytest
from template_helpers import REPO_ROOT, local_template

from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS, samconfig_overrides
from fleetcast_common.forecast_endpoint import RUNTIME_CONFIG
from fleetcast_common.jobs import Upload, processing_job_request
from fleetcast_common.pipeline import STAGING_TRANSFER
from fleetcast_common.settings import ProcessingSettings

ADDRESSES = {"CostReportRecipients": "ops@example.com", "CostReportSender": "cost@example.com"}
TEMPLATE = local_template({**ADDRESSES, **LOCAL_IMAGE_PARAMETERS})
RESOURCES: dict[str, dict[str, Any]] = TEMPLATE.body["Resources"]
PARAMETERS: dict[str, dict[str, Any]] = TEMPLATE.body["Parameters"]
GLOBAL_TIMEOUT = int(TEMPLATE.body["Globals"]["Function"]["Timeout"])
ENVIRONMENTS = ("default", "prod")
# API Gateway quotas: "Integration timeout: 50 milliseconds - 29 seconds" for a REST API.
API_GATEWAY_SECONDS = 29
# What the forecast function needs besides the endpoint: its registry lookup (a warm
# function's is cached) and writing the answer.
REGISTRY_AND_ANSWER_SECONDS = 5
# Slowest processing this repository has measured (bench, make bench's processing rows:
# 54 MiB/s on 2 EPYC cores), divided by ten for an ml.t3.medium at its baseline CPU
# (20% of 2 vCPUs, EC2's burstable baseline) and the download: 5 MiB/s.
SLOWEST_PROCESSING_MIB_PER_SECOND = 5


def _timeout(function: str) -> int:
    return int(RESOURCES[function]["Properties"].get("Timeout", GLOBAL_TIMEOUT))


def _worst_case_seconds(config: Any) -> float:
    """botocore's standard retry mode: ``max_attempts`` attempts in all, each up to its
    connect and read timeouts, and before retry ``i`` (0-based) a backoff of at most
    ``min(1 s x 2**i, 20 s)`` (botocore.retries.standard.ExponentialBackoff, throttling)."""
    attempts = int(config.retries["max_attempts"])
    assert config.retries["mode"] == "standard"
    backoff = sum(min(2**i, 20) for i in range(attempts - 1))
    return attempts * (config.connect_timeout + config.read_timeout) + backoff


def test_the_forecast_clients_retries_fit_the_functions_and_api_gateways_time() -> None:
    # Given the forecast function's time: its Timeout, and API Gateway's 29 s
    timeout = _timeout("ForecastApiFunction")
    assert timeout <= API_GATEWAY_SECONDS
    # Then every attempt at the endpoint, with the backoffs between them, ends in time to
    # answer (a 503 with Retry-After, not API Gateway's 504 after the function is killed)
    assert _worst_case_seconds(RUNTIME_CONFIG) <= timeout - REGISTRY_AND_ANSWER_SECONDS


def test_processings_longest_run_is_a_parameter_within_the_apis_bounds() -> None:
    # Given the parameter and the API's bounds for a processing job's MaxRuntimeInSeconds
    shape = botocore.session.get_session().get_service_model("sagemaker")
    bounds = shape.shape_for("ProcessingMaxRuntimeInSeconds").metadata
    spec = PARAMETERS["ProcessingMaxRuntimeSeconds"]
    assert bounds["min"] <= spec["MinValue"] <= spec["Default"] <= spec["MaxValue"] <= bounds["max"]
    # Then start-processing is given it, and each job is stopped after exactly that long
    variables = RESOURCES["StartProcessingFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["PROCESSING_MAX_RUNTIME_SECONDS"] == {"Ref": "ProcessingMaxRuntimeSeconds"}
    settings = ProcessingSettings.model_validate(
        {
            "RAW_BUCKET": "raw",
            "ARTIFACTS_BUCKET": "artifacts",
            "REGISTRY_TABLE": "registry",
            "JOB_NAME_PREFIX": "fleetcast",
            "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/jobs",
            "UPLOAD_QUEUE_TABLE": "queue",
            "PROCESSING_IMAGE_URI": LOCAL_IMAGE_PARAMETERS["ProcessingImageUri"],
            "PROCESSING_MAX_RUNTIME_SECONDS": "5400",
        }
    )
    upload = Upload.model_validate(
        {
            "bucket": "raw",
            "key": "incoming/a.csv",
            "revision": "v1",
            "size": 1,
            "uploaded_at": "2026-12-01T00:00:00Z",
        }
    )
    request = processing_job_request(
        settings, "q0000000001-20261201t000000", upload, "runs/q/upload/a.csv", False
    )
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 5400}


@pytest.mark.parametrize("environment", ENVIRONMENTS)
def test_each_environment_sets_a_runtime_and_a_disk_its_largest_upload_fits(
    environment: str,
) -> None:
    # Given the environment's processing instance, disk, largest upload and longest run
    overrides = samconfig_overrides(REPO_ROOT / "samconfig.toml", environment)
    values = {**TEMPLATE.parameters, **overrides}
    assert "ProcessingMaxRuntimeSeconds" in overrides, "set per environment, for its instance"
    largest_mib = int(values["ProcessingMaxUploadMB"])
    # Then the disk holds the largest upload and what the job writes from it (about as
    # much again: the training parts and the rewritten history)...
    assert int(values["ProcessingVolumeSizeGB"]) * 1024 >= 2 * largest_mib
    # ...and the job has time for it at the slowest rate measured for its work
    assert int(values["ProcessingMaxRuntimeSeconds"]) >= (
        largest_mib / SLOWEST_PROCESSING_MIB_PER_SECOND
    )


# start-processing stages every upload with boto3's managed copy in parts of
# pipeline.STAGING_TRANSFER's size, 10 at a time. S3 publishes no rate for a server-side
# UploadPartCopy; a second per 8 MiB of a round of parts is what a client should allow
# (a slow copy of ten 256 MiB parts: 32 s).
_PART_MIB = STAGING_TRANSFER.multipart_chunksize // 2**20
_PARTS_AT_ONCE = STAGING_TRANSFER.max_request_concurrency
_SECONDS_PER_ROUND = _PART_MIB / 8


def test_start_processing_has_time_to_copy_the_largest_upload() -> None:
    largest_mib = max(
        int(PARAMETERS["ProcessingMaxUploadMB"]["Default"]),
        *(
            int(
                samconfig_overrides(REPO_ROOT / "samconfig.toml", e).get("ProcessingMaxUploadMB", 0)
            )
            for e in ENVIRONMENTS
        ),
    )
    rounds = math.ceil(math.ceil(largest_mib / _PART_MIB) / _PARTS_AT_ONCE)
    assert _timeout("StartProcessingFunction") >= rounds * _SECONDS_PER_ROUND + 10
