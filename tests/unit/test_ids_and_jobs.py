"""Identifiers and the SageMaker job requests the pipeline makes."""

from datetime import UTC, datetime

import pytest

from fleetcast_common import layout
from fleetcast_common.ids import (
    InvalidCustomerIdError,
    is_valid_customer_id,
    processing_job_name,
    run_id_for_upload,
    run_id_from_job_name,
    training_job_name,
    validate_customer_id,
)
from fleetcast_common.jobs import (
    Upload,
    processing_job_request,
    training_instance_count,
    training_job_request,
)
from fleetcast_common.settings import ProcessingSettings, TrainingSettings

BASE_ENV = {
    "RAW_BUCKET": "raw",
    "ARTIFACTS_BUCKET": "artifacts",
    "REGISTRY_TABLE": "registry",
    "JOB_NAME_PREFIX": "fleetcast",
    "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/sm",
}
UPLOAD = Upload(
    bucket="raw",
    key="incoming/a.csv",
    revision="v1",
    size=10,
    uploaded_at=datetime(2026, 11, 29, 12, tzinfo=UTC),
)


@pytest.mark.parametrize("customer_id", ["0", "42", "007", "abc-DEF_9", "a" * 64])
def test_valid_customer_ids_pass(customer_id: str) -> None:
    assert is_valid_customer_id(customer_id)
    assert validate_customer_id(customer_id) == customer_id


@pytest.mark.parametrize(
    "customer_id",
    [
        "",
        "../../etc/passwd",
        "a/b",
        "a b",
        "-lead",
        "_lead",
        "a" * 65,
        "é",
        "42\n",
        42,
        None,
        "a.b",
    ],
)
def test_invalid_customer_ids_are_refused_with_a_message(customer_id: object) -> None:
    assert not is_valid_customer_id(customer_id)
    with pytest.raises(InvalidCustomerIdError, match="invalid customer id"):
        validate_customer_id(customer_id)


def test_layout_refuses_an_invalid_customer_id_before_it_becomes_a_key() -> None:
    with pytest.raises(InvalidCustomerIdError):
        layout.model_key("../x", "20261129t120000-0123456789")
    # The key the training job's checkpoint sync writes, and the TargetModel under models/
    assert layout.model_key("42", "r") == "models/r/42.tar.gz"
    assert layout.model_key("42", "r") == layout.checkpoint_prefix("r") + "42.tar.gz"
    # Records registered before training wrote models in place keep their TargetModel
    assert layout.is_target_model_of("42/r.tar.gz", "42", "r")
    assert layout.is_target_model_of("r/42.tar.gz", "42", "r")
    assert not layout.is_target_model_of("r/43.tar.gz", "42", "r")
    assert not layout.is_target_model_of("r/manifest-algo-1.json", "42", "r")


def test_run_id_is_the_same_for_a_repeated_event_and_new_for_new_content() -> None:
    # Given one upload delivered twice, and the same key uploaded again with new content
    first = run_id_for_upload("raw", "incoming/a.csv", "etag-1", UPLOAD.uploaded_at)
    again = run_id_for_upload("raw", "incoming/a.csv", "etag-1", UPLOAD.uploaded_at)
    later = run_id_for_upload(
        "raw", "incoming/a.csv", "etag-2", datetime(2026, 11, 29, 13, tzinfo=UTC)
    )
    # Then the repeat maps to the same run, and the newer content to a later-sorting run
    assert first == again
    assert later != first and later > first
    assert run_id_from_job_name("fleetcast", processing_job_name("fleetcast", first)) == first
    assert run_id_from_job_name("fleetcast", training_job_name("fleetcast", first)) == first
    assert run_id_from_job_name("fleetcast", "someone-elses-job") is None
    assert len(training_job_name("abcdefghijklmnopqrst", first)) <= 63


def test_processing_request_names_the_file_and_adds_history_only_when_some_exists() -> None:
    settings = ProcessingSettings.from_env(
        {**BASE_ENV, "PROCESSING_IMAGE_URI": "img", "UPLOAD_QUEUE_TABLE": "queue"}
    )
    run_id = run_id_for_upload("raw", UPLOAD.key, UPLOAD.revision, UPLOAD.uploaded_at)
    without = processing_job_request(settings, run_id, UPLOAD, with_history=False)
    with_history = processing_job_request(settings, run_id, UPLOAD, with_history=True)
    assert [i["InputName"] for i in without["ProcessingInputs"]] == ["raw"]
    assert [i["InputName"] for i in with_history["ProcessingInputs"]] == ["raw", "history"]
    assert without["AppSpecification"]["ContainerArguments"] == [
        "--frequency",
        "D",
        "--source-name",
        "a.csv",
    ]
    outputs = {
        o["OutputName"]: o["S3Output"]["S3Uri"]
        for o in without["ProcessingOutputConfig"]["Outputs"]
    }
    assert outputs["train"] == f"s3://artifacts/runs/{run_id}/train/"
    # Neither container needs the network: SageMaker moves their data.
    assert without["NetworkConfig"] == {"EnableNetworkIsolation": True}


def test_training_request_shards_by_customer_on_spot_with_checkpoints() -> None:
    settings = TrainingSettings.from_env(
        {**BASE_ENV, "TRAINING_IMAGE_URI": "img", "TRAINING_INSTANCE_COUNT": "4"}
    )
    request = training_job_request(settings, "20261129t120000-0123456789", customers=30)
    source = request["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    assert source["S3DataDistributionType"] == "ShardedByS3Key"
    assert request["EnableManagedSpotTraining"] is True
    assert (
        request["StoppingCondition"]["MaxWaitTimeInSeconds"]
        >= request["StoppingCondition"]["MaxRuntimeInSeconds"]
    )
    # Checkpoints sync to the run's own folder of the endpoint's prefix: each archive is
    # written once, under the key the registry records (nothing is copied later)
    assert request["CheckpointConfig"]["S3Uri"] == (
        "s3://artifacts/models/20261129t120000-0123456789/"
    )
    assert request["EnableNetworkIsolation"] is True
    assert request["ResourceConfig"]["InstanceCount"] == 4
    assert all(isinstance(v, str) for v in request["HyperParameters"].values())


def test_never_more_training_instances_than_customer_files() -> None:
    assert training_instance_count(10, 3) == 3
    assert training_instance_count(2, 1000) == 2
    assert training_instance_count(5, 0) == 1


def test_on_demand_training_has_no_max_wait() -> None:
    settings = TrainingSettings.from_env(
        {**BASE_ENV, "TRAINING_IMAGE_URI": "img", "TRAINING_USE_SPOT": "false"}
    )
    request = training_job_request(settings, "20261129t120000-0123456789", customers=3)
    assert request["EnableManagedSpotTraining"] is False
    assert "MaxWaitTimeInSeconds" not in request["StoppingCondition"]


def test_settings_say_which_variable_is_missing() -> None:
    with pytest.raises(ValueError, match="PROCESSING_IMAGE_URI"):
        ProcessingSettings.from_env(BASE_ENV)
