"""Identifiers and the SageMaker job requests the pipeline makes."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from fleetcast_common.jobs import (
    Upload,
    processing_job_request,
    training_instance_count,
    training_job_request,
)
from fleetcast_common.settings import ProcessingSettings, TrainingSettings
from fleetcast_contracts import layout
from fleetcast_contracts.ids import (
    InvalidCustomerIdError,
    is_valid_customer_id,
    is_valid_run_id,
    run_id_for_upload,
    sequencer_order,
    upload_sequence,
    validate_customer_id,
)
from fleetcast_contracts.processing import source_key_from_environment
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_processing.__main__ import argument_parser

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
# Where the run's copy of UPLOAD is staged (pipeline._stage_upload)
STAGED_A = "runs/q0000000001-20261129t120000/upload/a.csv"


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
        layout.model_key("../x", "q0000000909-20261129t120000")
    # The key the training job's checkpoint sync writes, and the TargetModel under models/
    assert layout.model_key("42", "r") == "models/r/42.tar.gz"
    assert layout.model_key("42", "r") == layout.checkpoint_prefix("r") + "42.tar.gz"
    assert layout.target_model("42", "r") == "r/42.tar.gz"


def test_run_ids_sort_by_the_queue_number_whatever_the_event_time() -> None:
    # Given uploads numbered 9, 10 and 11 by the queue, the later ones with earlier times
    ninth = run_id_for_upload(9, datetime(2026, 11, 29, 13, tzinfo=UTC))
    tenth = run_id_for_upload(10, datetime(2026, 11, 29, 12, tzinfo=UTC))
    eleventh = run_id_for_upload(11, datetime(2026, 11, 29, 12, tzinfo=UTC))
    # Then their run ids sort by number (text order, as the registry compares them)
    assert ninth < tenth < eleventh
    assert tenth == "q0000000010-20261129t120000"
    assert [upload_sequence(r) for r in (ninth, tenth, eleventh)] == [9, 10, 11]
    # And only a numbered run id is one
    assert not is_valid_run_id("20261129t235959-0123456789")
    assert upload_sequence("20261129t235959-0123456789") is None
    assert not is_valid_run_id("q12-20261129t120000")
    assert PROCESSING.run_id_of("fleetcast", PROCESSING.job_name("fleetcast", tenth)) == tenth
    assert TRAINING.run_id_of("fleetcast", TRAINING.job_name("fleetcast", ninth)) == ninth
    # each stage knows only its own jobs
    assert PROCESSING.run_id_of("fleetcast", TRAINING.job_name("fleetcast", ninth)) is None
    assert PROCESSING.run_id_of("fleetcast", "someone-elses-job") is None
    # The longest job name prefix the template allows still makes a valid job name
    assert len(TRAINING.job_name("abcdefghijklmnopqrstu", eleventh)) <= 63
    with pytest.raises(ValueError, match="outside"):
        run_id_for_upload(0, UPLOAD.uploaded_at)


def test_sequencers_of_one_key_compare_by_s3s_rule_left_padded_with_zeros() -> None:
    # "9" then "10": as text "9" sorts last, as S3 orders them it comes first
    assert sequencer_order("9") < sequencer_order("10")
    assert sequencer_order("00674A9C2B1E7D3F05") < sequencer_order("674a9c2b1e7d3f06")
    assert sequencer_order("0A") == sequencer_order("a")
    with pytest.raises(ValueError, match="not a hexadecimal"):
        sequencer_order("12-34")


@pytest.mark.parametrize(
    ("key", "file_name"),
    [("incoming/a.csv", "a.csv"), ("incoming/" + "é" * 505 + ".csv", "upload.csv")],
)
def test_processing_request_reads_the_runs_copy_and_carries_the_uploads_real_key(
    key: str, file_name: str
) -> None:
    # Given an upload (one whose key is 1023 bytes, near the most S3 allows, too)
    settings = ProcessingSettings.from_env(
        {
            **BASE_ENV,
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": "queue",
        }
    )
    upload = UPLOAD.model_copy(update={"key": key})
    run_id = run_id_for_upload(1, UPLOAD.uploaded_at)
    # When its job is requested
    request = processing_job_request(
        settings, run_id, upload, layout.staged_upload_key(run_id, key), False
    )
    # Then the job reads the run's copy under its short name, never the raw key
    (raw,) = request["ProcessingInputs"]
    assert raw["S3Input"]["S3Uri"] == f"s3://artifacts/runs/{run_id}/upload/{file_name}"
    assert request["AppSpecification"]["ContainerArguments"][-2:] == ["--upload-file", file_name]
    # And its environment carries the real key, all within SageMaker's limits
    assert source_key_from_environment(request["Environment"]) == key
    assert all(len(a) <= 256 for a in request["AppSpecification"]["ContainerArguments"])
    assert all(len(v) <= 256 for v in request["Environment"].values())


def test_processing_request_names_the_file_and_adds_history_only_when_some_exists() -> None:
    settings = ProcessingSettings.from_env(
        {
            **BASE_ENV,
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": "queue",
        }
    )
    run_id = run_id_for_upload(1, UPLOAD.uploaded_at)
    without = processing_job_request(settings, run_id, UPLOAD, STAGED_A, with_history=False)
    with_history = processing_job_request(settings, run_id, UPLOAD, STAGED_A, with_history=True)
    assert [i["InputName"] for i in without["ProcessingInputs"]] == ["raw"]
    assert [i["InputName"] for i in with_history["ProcessingInputs"]] == ["raw", "history"]
    assert without["AppSpecification"]["ContainerArguments"] == [
        "--frequency",
        "D",
        "--training-instances",
        "2",
        "--input-kind",
        "readings",
        "--upload-file",
        "a.csv",
    ]
    outputs = {
        o["OutputName"]: o["S3Output"]["S3Uri"]
        for o in without["ProcessingOutputConfig"]["Outputs"]
    }
    assert outputs["train"] == f"s3://artifacts/runs/{run_id}/train/"
    # Neither container needs the network: SageMaker moves their data.
    assert without["NetworkConfig"] == {"EnableNetworkIsolation": True}


def test_a_metadata_upload_is_processed_as_metadata_with_the_store() -> None:
    # Given an upload under incoming/metadata/, and a metadata store that exists
    settings = ProcessingSettings.from_env(
        {
            **BASE_ENV,
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": "queue",
        }
    )
    run_id = run_id_for_upload(1, UPLOAD.uploaded_at)
    upload = UPLOAD.model_copy(update={"key": "incoming/metadata/customers.csv"})
    request = processing_job_request(
        settings, run_id, upload, "runs/r/upload/customers.csv", True, with_metadata=True
    )
    # Then the job is told it is metadata, reads the store and history, writes the store
    arguments = request["AppSpecification"]["ContainerArguments"]
    assert arguments[arguments.index("--input-kind") + 1] == "metadata"
    assert [i["InputName"] for i in request["ProcessingInputs"]] == ["raw", "history", "metadata"]
    outputs = {
        o["OutputName"]: o["S3Output"]["S3Uri"]
        for o in request["ProcessingOutputConfig"]["Outputs"]
    }
    assert outputs["metadata"] == "s3://artifacts/metadata/"
    assert outputs["calendars"] == f"s3://artifacts/runs/{run_id}/calendars/"
    # And a readings job reads the store (for calendars) but never writes it
    readings = processing_job_request(settings, run_id, UPLOAD, STAGED_A, True, with_metadata=True)
    assert "metadata" not in {
        o["OutputName"] for o in readings["ProcessingOutputConfig"]["Outputs"]
    }
    assert "calendars" in {o["OutputName"] for o in readings["ProcessingOutputConfig"]["Outputs"]}


@pytest.mark.parametrize(
    ("key", "frequency", "input_kind"),
    [("incoming/a.csv", "H", "readings"), ("incoming/metadata/customers.csv", "D", "metadata")],
)
def test_the_processing_container_reads_the_arguments_start_processing_writes(
    key: str, frequency: str, input_kind: str
) -> None:
    # Given start-processing's settings (hourly models, three training instances)
    settings = ProcessingSettings.from_env(
        {
            **BASE_ENV,
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": "queue",
            "MODEL_FREQUENCY": frequency,
            "TRAINING_INSTANCE_COUNT": "3",
        }
    )
    run_id = run_id_for_upload(1, UPLOAD.uploaded_at)
    upload = UPLOAD.model_copy(update={"key": key})
    staged = layout.staged_upload_key(run_id, key)
    # When the container parses the job's arguments
    request = processing_job_request(settings, run_id, upload, staged, False)
    parsed = argument_parser().parse_args(request["AppSpecification"]["ContainerArguments"])
    # Then it reads each as start-processing meant it
    assert (parsed.frequency, parsed.training_instances) == (frequency, 3)
    assert (parsed.input_kind, parsed.upload_file) == (input_kind, staged.rsplit("/", 1)[-1])


def test_training_request_shards_by_customer_on_spot_with_checkpoints() -> None:
    settings = TrainingSettings.from_env(
        {
            **BASE_ENV,
            "TRAINING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:test",
            "TRAINING_INSTANCE_COUNT": "4",
        }
    )
    request = training_job_request(settings, "q0000000909-20261129t120000", parts=30)
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
        "s3://artifacts/models/q0000000909-20261129t120000/"
    )
    assert request["EnableNetworkIsolation"] is True
    assert request["ResourceConfig"]["InstanceCount"] == 4
    assert all(isinstance(v, str) for v in request["HyperParameters"].values())


def test_training_gets_every_calendar_on_every_instance_and_the_default_country() -> None:
    # Given a stack whose default holiday country is DE
    settings = TrainingSettings.from_env(
        {
            **BASE_ENV,
            "TRAINING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:test",
            "DEFAULT_HOLIDAY_COUNTRY": "DE",
        }
    )
    request = training_job_request(settings, "q0000000909-20261129t120000", parts=30)
    # Then the calendars channel is one prefix replicated to every instance
    channels = {
        c["ChannelName"]: c["DataSource"]["S3DataSource"] for c in request["InputDataConfig"]
    }
    assert channels["calendars"] == {
        "S3DataType": "S3Prefix",
        "S3Uri": "s3://artifacts/runs/q0000000909-20261129t120000/calendars/",
        "S3DataDistributionType": "FullyReplicated",
    }
    assert channels["train"]["S3DataDistributionType"] == "ShardedByS3Key"
    assert request["HyperParameters"]["default_holiday_country"] == "DE"
    # And a country code that is not one is refused when the function starts
    with pytest.raises(ValidationError, match="DEFAULT_HOLIDAY_COUNTRY"):
        TrainingSettings.from_env(
            {
                **BASE_ENV,
                "TRAINING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:test",
                "DEFAULT_HOLIDAY_COUNTRY": "germany",
            }
        )


def test_never_more_training_instances_than_customer_files() -> None:
    assert training_instance_count(10, 3) == 3
    assert training_instance_count(2, 1000) == 2
    assert training_instance_count(5, 0) == 1


def test_on_demand_training_has_no_max_wait() -> None:
    settings = TrainingSettings.from_env(
        {
            **BASE_ENV,
            "TRAINING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:test",
            "TRAINING_USE_SPOT": "false",
        }
    )
    request = training_job_request(settings, "q0000000909-20261129t120000", parts=3)
    assert request["EnableManagedSpotTraining"] is False
    assert "MaxWaitTimeInSeconds" not in request["StoppingCondition"]


def test_settings_say_which_variable_is_missing() -> None:
    with pytest.raises(ValueError, match="PROCESSING_IMAGE_URI"):
        ProcessingSettings.from_env(BASE_ENV)
