"""The local stack's S3 downloads follow SageMaker's S3Prefix semantics (moto server), and
no key writes outside the folder it is downloaded into."""

import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from fleetcast.embedded.endpoint import ModelDiskCache
from fleetcast.embedded.sagemaker_jobs.checkpoints import CheckpointSync
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer
from fleetcast_contracts.object_keys import UnsafeKeyError


@pytest.fixture
def bucket(aws_env: str) -> tuple[Any, str]:
    """An S3 client of the moto server and a new bucket in it."""
    s3 = boto3.client("s3")
    name = f"transfer-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return s3, name


def test_a_single_file_prefix_brings_every_match_under_its_own_name(
    bucket: tuple[Any, str], tmp_path: Path
) -> None:
    # Given an upload and a sibling whose key starts the same way
    s3, bucket_name = bucket
    s3.put_object(Bucket=bucket_name, Key="incoming/a.csv", Body=b"plain")
    s3.put_object(Bucket=bucket_name, Key="incoming/a.csv.gz", Body=b"zipped")
    s3.put_object(Bucket=bucket_name, Key="incoming/deep/b.csv", Body=b"deep")
    transfer = S3Transfer(s3)
    # When the prefix of one file is downloaded, and a folder prefix
    single = tmp_path / "single"
    transfer.download(
        bucket_name, "incoming/a.csv", transfer.keys(bucket_name, "incoming/a.csv"), single
    )
    folder = tmp_path / "folder"
    transfer.download(bucket_name, "incoming/", transfer.keys(bucket_name, "incoming/"), folder)
    # Then each object keeps its name (and sub-folder) below the prefix's folder
    assert sorted(p.name for p in single.iterdir()) == ["a.csv", "a.csv.gz"]
    assert (single / "a.csv.gz").read_bytes() == b"zipped"
    assert (folder / "deep" / "b.csv").read_bytes() == b"deep"


def test_checkpoint_sync_copies_new_and_changed_files_and_each_archive_once(
    bucket: tuple[Any, str], tmp_path: Path
) -> None:
    # Given a training job's checkpoint directory synced to a bucket
    s3, bucket_name = bucket
    local = tmp_path / "checkpoints"
    (local / "pages").mkdir(parents=True)
    sync = CheckpointSync(S3Transfer(s3), local, f"s3://{bucket_name}/models/run")

    def synced() -> dict[str, bytes]:
        keys = S3Transfer(s3).keys(bucket_name, "models/run/")
        return {k: s3.get_object(Bucket=bucket_name, Key=k)["Body"].read() for k in keys}

    (local / "a.tar.gz").write_bytes(b"model a")
    (local / "b.tar.gz.partial").write_bytes(b"half")
    (local / "progress-algo-1.json").write_text('{"done": 1}')
    (local / "pages" / "algo-1-00000.json").write_text("[]")
    # When it syncs, then again after the progress changed and b was finished
    assert sync.sync() == 3
    (local / "progress-algo-1.json").write_text('{"done": 2, "total": 2}')
    (local / "b.tar.gz.partial").rename(local / "b.tar.gz")
    assert sync.sync() == 2
    # Then the bucket holds every finished file as it is now, nothing half-written
    assert synced() == {
        "models/run/a.tar.gz": b"model a",
        "models/run/b.tar.gz": b"half",
        "models/run/progress-algo-1.json": b'{"done": 2, "total": 2}',
        "models/run/pages/algo-1-00000.json": b"[]",
    }
    # And a round with nothing new copies nothing (a copied archive is not looked at again)
    assert sync.sync() == 0


UNSAFE_KEYS = [
    ("incoming//probe.csv", "empty segment"),
    ("incoming/u.csv_/../../../../outside/evil.csv", "'..' path segment"),
    ("incoming/./a.csv", "'.' path segment"),
    ("incoming/" + "x" * 300 + ".csv", "path segment of 304 bytes"),
    ("incoming/a\x01b.csv", "control character"),
]


@pytest.mark.parametrize(("key", "problem"), UNSAFE_KEYS)
def test_a_key_that_would_leave_its_folder_fails_the_download_naming_it_and_writes_nothing(
    bucket: tuple[Any, str], tmp_path: Path, key: str, problem: str
) -> None:
    # Given a plain upload and one under a key that is no path below its folder
    s3, bucket_name = bucket
    s3.put_object(Bucket=bucket_name, Key="incoming/u.csv", Body=b"plain")
    s3.put_object(Bucket=bucket_name, Key=key, Body=b"evil")
    transfer = S3Transfer(s3)
    target = tmp_path / "job" / "input"
    # When the prefix holding both is downloaded
    with pytest.raises(UnsafeKeyError) as refused:
        transfer.download(bucket_name, "incoming/", transfer.keys(bucket_name, "incoming/"), target)
    # Then it fails saying which key and what is wrong with it, and writes no file at all
    assert refused.value.key == key and problem in str(refused.value)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_key_that_is_the_folder_of_another_fails_the_download_naming_both(
    bucket: tuple[Any, str], tmp_path: Path
) -> None:
    # Given incoming/pre and incoming/pre/inner.csv
    s3, bucket_name = bucket
    s3.put_object(Bucket=bucket_name, Key="incoming/pre", Body=b"file")
    s3.put_object(Bucket=bucket_name, Key="incoming/pre/inner.csv", Body=b"inner")
    transfer = S3Transfer(s3)
    # When the S3Prefix incoming/pre (which matches both) is downloaded
    with pytest.raises(UnsafeKeyError, match="is also the folder of S3 key 'incoming/pre/inner"):
        transfer.download(
            bucket_name, "incoming/pre", transfer.keys(bucket_name, "incoming/pre"), tmp_path
        )
    # Then nothing was written (not "[Errno 17] File exists" half way through)
    assert list(tmp_path.iterdir()) == []


def test_unicode_keys_free_of_nul_are_downloaded_under_their_own_names(
    bucket: tuple[Any, str], tmp_path: Path
) -> None:
    s3, bucket_name = bucket
    keys = ["incoming/Zählerstände März.csv", "incoming/日本語/メーター.csv", "incoming/a+b%c.csv"]
    for key in keys:
        s3.put_object(Bucket=bucket_name, Key=key, Body=key.encode())
    transfer = S3Transfer(s3)
    transfer.download(bucket_name, "incoming/", transfer.keys(bucket_name, "incoming/"), tmp_path)
    for key in keys:
        assert (tmp_path / key.removeprefix("incoming/")).read_bytes() == key.encode()


@pytest.mark.parametrize("target_model", ["run/..", "run/", "run/" + "m" * 300, "run/a\x01b"])
def test_a_model_that_is_no_archive_lands_in_its_own_folder_whatever_its_target_model(
    bucket: tuple[Any, str], tmp_path: Path, target_model: str
) -> None:
    # Given an object that is not a model archive, under a TargetModel that is no file name
    s3, bucket_name = bucket
    s3.put_object(Bucket=bucket_name, Key="models/" + target_model, Body=b"not a tarball")
    cache = ModelDiskCache(tmp_path / "models", 2**20, s3, bucket_name, "models/")
    # When the endpoint's instance downloads it
    with cache.holding(target_model) as model:
        # Then it is one file in the model's own folder, under a name any disk takes
        (file,) = model.iterdir()
        assert file.read_bytes() == b"not a tarball"
        assert file.parent == model and model.is_relative_to(tmp_path / "models")
        assert file.name == "model"
