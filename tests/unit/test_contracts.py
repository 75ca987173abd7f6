"""The shared container contracts (fleetcast_contracts) as the processes use them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fleetcast_common.jobs import training_job_request
from fleetcast_common.settings import TrainingSettings
from fleetcast_contracts import inference, opt_ml, training
from fleetcast_contracts.model_archive import Backtest
from fleetcast_inference.errors import BadRequestError
from fleetcast_inference.protocol import render_error

TRAINING_ENV = {
    "RAW_BUCKET": "raw",
    "ARTIFACTS_BUCKET": "artifacts",
    "REGISTRY_TABLE": "registry",
    "JOB_NAME_PREFIX": "fleetcast",
    "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/sm",
    "TRAINING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:test",
}
METRIC_LINE_NAMES = [
    value
    for name, value in vars(training).items()
    if name.startswith("METRIC_") and isinstance(value, str)
]


def test_the_training_job_scrapes_every_metric_line_the_container_prints() -> None:
    # Given the request start-training sends
    settings = TrainingSettings.from_env(TRAINING_ENV)
    definitions = training_job_request(settings, "q0000000909-20261129t120000", 10)[
        "AlgorithmSpecification"
    ]["MetricDefinitions"]
    # Then each line the container can print is read by exactly one definition
    assert len(METRIC_LINE_NAMES) == 9
    for name in METRIC_LINE_NAMES:
        line = training.metric_line(name, 3)
        matched = [d["Name"] for d in definitions if re.search(d["Regex"], line)]
        assert len(matched) == 1, (name, matched)


def test_the_local_stack_reads_the_code_of_the_containers_error_body() -> None:
    body = render_error(BadRequestError("send a period"))
    assert inference.error_body_code(body) == "BadRequest"
    assert inference.error_body_code(b"not json") is None
    assert inference.error_body_code(b'{"message": "no code"}') is None


def test_container_paths_map_under_the_configured_root(tmp_path: Path) -> None:
    assert opt_ml.opt_ml_root({}) == Path("/opt/ml")
    assert opt_ml.opt_ml_root({opt_ml.OPT_ML_ENV: str(tmp_path)}) == tmp_path
    assert opt_ml.resolve(training.CHECKPOINT_LOCAL_PATH, tmp_path) == tmp_path / "checkpoints"


def test_only_an_instances_manifest_is_taken_for_one() -> None:
    assert training.is_manifest_name(training.manifest_name("algo-2"))
    assert not training.is_manifest_name("acme.tar.gz")
    assert not training.is_manifest_name("manifest-algo-1.json.partial")


@pytest.mark.parametrize(
    ("origin", "written"),
    [
        ("2023-10-03T00:00:00", "2023-10-03T00:00:00Z"),
        (datetime(2023, 10, 3), "2023-10-03T00:00:00Z"),
        ("2023-10-03T00:00:00Z", "2023-10-03T00:00:00Z"),
        (datetime(2023, 10, 3, 2, tzinfo=timezone(timedelta(hours=2))), "2023-10-03T00:00:00Z"),
    ],
    ids=["naive text", "naive", "utc", "another offset"],
)
def test_a_backtests_origins_are_written_in_utc_with_the_offset(
    origin: object, written: str
) -> None:
    # Given a backtest's origins as training gives them (the history's naive timestamps,
    # UTC's), as an archive or a record from before kept them, or aware
    backtest = Backtest(horizon=7, windows=1, origins=[origin], chosen="ets", candidates=[])
    # Then they are written RFC 3339, in UTC with their offset
    assert backtest.model_dump(mode="json")["origins"] == [written]
    assert Backtest.model_validate_json(backtest.model_dump_json()) == backtest
