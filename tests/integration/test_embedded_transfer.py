"""The local stack's S3 downloads follow SageMaker's S3Prefix semantics (moto server)."""

import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from fleetcast.embedded.sagemaker_jobs import S3Transfer
from fleetcast.embedded.sagemaker_jobs.checkpoints import CheckpointSync


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
