"""The local stack writes SageMaker's own S3 copies (checkpoints, job outputs) into moto in
process, with what a PutObject request would leave (fleetcast.embedded.gateway)."""

from __future__ import annotations

import functools
import hashlib
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.sagemaker_jobs.checkpoints import CheckpointSync
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer
from fleetcast.embedded.template import ACCOUNT_ID


@pytest.fixture
def s3_bucket(gateway: Gateway) -> tuple[Any, str]:
    """A client of the gateway, and a new bucket."""
    s3: Any = boto3.client("s3", endpoint_url=gateway.url)
    name = f"gateway-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return s3, name


def heard_by(gateway: Gateway) -> list[tuple[str, str, str]]:
    """What the gateway tells its observers from now on (method, bucket, key)."""
    heard: list[tuple[str, str, str]] = []
    gateway.observe_s3_writes(lambda *request: heard.append(request))
    return heard


def test_a_checkpoint_written_in_process_is_the_object_a_put_request_makes(
    gateway: Gateway, s3_bucket: tuple[Any, str], tmp_path: Path
) -> None:
    # Given a bucket, a transfer writing in process and someone counting the writes
    s3, bucket = s3_bucket
    heard = heard_by(gateway)
    transfer = S3Transfer(s3, lambda b, k, body: gateway.put_object(ACCOUNT_ID, b, k, body))
    local = tmp_path / "checkpoints"
    local.mkdir()
    archive = bytes(range(256)) * 100
    (local / "a.tar.gz").write_bytes(archive)
    (local / "b.tar.gz.partial").write_bytes(b"half")
    # When the checkpoint sync copies the folder
    assert CheckpointSync(transfer, local, f"s3://{bucket}/models/run").sync() == 1
    # Then a client reads the object back, as a PutObject would have left it
    got = s3.get_object(Bucket=bucket, Key="models/run/a.tar.gz")
    assert got["Body"].read() == archive
    assert got["ETag"] == f'"{hashlib.md5(archive).hexdigest()}"'
    assert got["ContentLength"] == len(archive)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="models/")["Contents"]
    assert [o["Key"] for o in listed] == ["models/run/a.tar.gz"]
    # And the write was told, as a request counter would count it
    assert heard == [("PUT", bucket, "models/run/a.tar.gz")]


def test_a_write_to_a_missing_bucket_fails_loudly(gateway: Gateway) -> None:
    with pytest.raises(Exception, match="bucket does not exist"):
        gateway.put_object(ACCOUNT_ID, f"missing-{uuid.uuid4().hex[:8]}", "k", b"body")


def test_a_jobs_inputs_are_copied_in_process_whole_as_a_client_reads_them(
    gateway: Gateway, s3_bucket: tuple[Any, str], tmp_path: Path
) -> None:
    # Given an upload of 12 MB put in parts by a client, and a small file beside it
    s3, bucket = s3_bucket
    large = uuid.uuid4().bytes * (750 * 1024)
    source = tmp_path / "readings.csv.gz"
    source.write_bytes(large)
    s3.upload_file(str(source), bucket, "incoming/readings.csv.gz")
    s3.put_object(Bucket=bucket, Key="incoming/more/b.csv", Body=b"customer_id\n")
    heard = heard_by(gateway)
    transfer = S3Transfer(
        s3, download_object=functools.partial(gateway.download_object, ACCOUNT_ID)
    )
    # When a job's input prefix is copied to an instance's folder in process
    target = tmp_path / "input"
    keys = transfer.keys(bucket, "incoming/")
    assert transfer.download(bucket, "incoming/", keys, target) == 2
    # Then each file holds the object's bytes, at its path below the prefix
    assert (target / "readings.csv.gz").read_bytes() == large
    assert (target / "more" / "b.csv").read_bytes() == b"customer_id\n"
    # and each copy was told as the one GET it is (not 12 MB / 8 MB ranges)
    assert sorted(heard) == [
        ("GET", bucket, "incoming/more/b.csv"),
        ("GET", bucket, "incoming/readings.csv.gz"),
    ]
    # A key that is not there fails, naming it
    with pytest.raises(FileNotFoundError, match=r"incoming/gone\.csv"):
        gateway.download_object(ACCOUNT_ID, bucket, "incoming/gone.csv", target / "gone.csv")


def test_a_keys_versions_list_after_the_version_under_a_delete_marker_is_deleted(
    s3_bucket: tuple[Any, str],
) -> None:
    # Given a versioned key deleted (a marker over its version), then that version deleted,
    # as a lifecycle rule expiring noncurrent versions does
    s3, bucket = s3_bucket
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    version = s3.put_object(Bucket=bucket, Key="k", Body=b"kept in a file")["VersionId"]
    marker = s3.delete_object(Bucket=bucket, Key="k")["VersionId"]
    s3.delete_object(Bucket=bucket, Key="k", VersionId=version)

    # When its versions are listed; then the marker alone is, not a 500
    listed = s3.list_object_versions(Bucket=bucket, Prefix="k")
    assert "Versions" not in listed
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker]
