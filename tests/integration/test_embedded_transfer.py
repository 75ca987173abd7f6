"""The local stack's S3 downloads follow SageMaker's S3Prefix semantics (moto server)."""

import uuid
from pathlib import Path

import boto3

from fleetcast.embedded.sagemaker_jobs import S3Transfer


def test_a_single_file_prefix_brings_every_match_under_its_own_name(
    aws_env: str, tmp_path: Path
) -> None:
    # Given an upload and a sibling whose key starts the same way
    s3 = boto3.client("s3")
    bucket = f"raw-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="incoming/a.csv", Body=b"plain")
    s3.put_object(Bucket=bucket, Key="incoming/a.csv.gz", Body=b"zipped")
    s3.put_object(Bucket=bucket, Key="incoming/deep/b.csv", Body=b"deep")
    transfer = S3Transfer(s3)
    # When the prefix of one file is downloaded, and a folder prefix
    single = tmp_path / "single"
    transfer.download(bucket, "incoming/a.csv", transfer.keys(bucket, "incoming/a.csv"), single)
    folder = tmp_path / "folder"
    transfer.download(bucket, "incoming/", transfer.keys(bucket, "incoming/"), folder)
    # Then each object keeps its name (and sub-folder) below the prefix's folder
    assert sorted(p.name for p in single.iterdir()) == ["a.csv", "a.csv.gz"]
    assert (single / "a.csv.gz").read_bytes() == b"zipped"
    assert (folder / "deep" / "b.csv").read_bytes() == b"deep"
