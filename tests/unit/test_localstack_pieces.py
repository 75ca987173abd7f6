"""The local stack's pure parts: template resolution, sharding, entrypoints, event fixes."""

import json
from pathlib import Path

import pytest

from fleetcast.localstack.events import normalise_event
from fleetcast.localstack.sagemaker_jobs import (
    image_entrypoint,
    local_command,
    shard,
    split_s3_uri,
    under_root,
)
from fleetcast.localstack.template import LocalTemplate

ROOT = Path(__file__).resolve().parents[2]


def test_shards_cover_every_key_once_and_are_within_one_of_even() -> None:
    keys = [f"runs/r/train/{i}.csv" for i in range(31)]
    shards = [shard(keys, 4, i) for i in range(4)]
    assert sorted(k for s in shards for k in s) == sorted(keys)
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


def test_image_entrypoint_is_read_from_the_dockerfile_that_ships(tmp_path: Path) -> None:
    # Given a containers folder with a Dockerfile per family
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "Dockerfile").write_text(
        'FROM x\nENTRYPOINT ["python3", "-m", "fleetcast_training"]\n'
    )
    # When an ECR image URI of that family is resolved
    command = image_entrypoint(
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:abc", tmp_path
    )
    # Then it is the Dockerfile's entrypoint, run with this interpreter
    assert command == ["python3", "-m", "fleetcast_training"]
    assert local_command(command)[1:] == ["-m", "fleetcast_training"]
    with pytest.raises(LookupError, match="no container for image"):
        image_entrypoint("fleetcast-unknown:1", tmp_path)


def test_container_paths_map_under_the_instance_root(tmp_path: Path) -> None:
    assert under_root(tmp_path, "/opt/ml/processing/input/raw") == tmp_path / "processing/input/raw"
    assert split_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    with pytest.raises(ValueError, match="not an S3 URI"):
        split_s3_uri("bucket/a")


def test_moto_s3_event_is_put_back_into_the_documented_shape() -> None:
    event = {
        "source": "aws.s3",
        "detail": {"object": {"key": "k", "eTag": "abc", "version-id": "null"}},
    }
    fixed = normalise_event(event)
    assert fixed["detail"]["object"] == {"key": "k", "etag": "abc"}


def test_events_get_the_account_moto_leaves_out_of_the_envelope() -> None:
    # moto's EventBridge -> SQS delivery has no "account"; the handlers' parser needs it.
    event = {"version": "0", "id": "1", "source": "aws.sagemaker", "detail": {}}
    assert normalise_event(event)["account"] == "123456789012"


def test_template_resolves_names_refs_subs_and_function_environment() -> None:
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name="demo",
        parameter_overrides={"TrainingInstanceCount": "3"},
    )
    env = template.function_environment("StartTrainingFunction")
    assert env["TRAINING_INSTANCE_COUNT"] == "3"
    assert env["ARTIFACTS_BUCKET"] == template.physical_name("ArtifactsBucket")
    assert env["SAGEMAKER_ROLE_ARN"] == "arn:aws:iam::123456789012:role/demo-SageMakerExecutionRole"
    pattern = template.resolve(
        template.resources["StartProcessingFunction"]["Properties"]["Events"]["UploadedCsv"][
            "Properties"
        ]["Pattern"]
    )
    assert pattern["detail"]["bucket"]["name"] == [template.physical_name("RawBucket")]
    json.dumps(pattern)  # fully resolved: no intrinsic left
    assert "Fn::" not in json.dumps(pattern) and '"Ref"' not in json.dumps(pattern)
