"""The local stack keeps S3 objects' bytes in files, not in its memory
(fleetcast.embedded.moto_patches.s3): what clients see is what S3 gives."""

from __future__ import annotations

import gc
import hashlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig

from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.moto_patches.s3 import ObjectFile, ObjectFiles, keep_objects_in_files


@pytest.fixture
def s3(aws_env: str) -> Iterator[tuple[Any, str]]:
    gateway = Gateway()
    gateway.start()
    client: Any = boto3.client("s3", endpoint_url=gateway.url)
    bucket = f"files-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        yield client, bucket
    finally:
        gateway.stop()


def files_holding(data: bytes) -> list[Path]:
    return [
        path
        for path in keep_objects_in_files().folder.iterdir()
        if path.stat().st_size == len(data) and path.read_bytes() == data
    ]


def test_objects_read_back_whole_ranged_copied_and_multipart_from_files(
    s3: tuple[Any, str], tmp_path: Path
) -> None:
    client, bucket = s3
    small = uuid.uuid4().bytes * 1000  # 16 kB: moto kept this in memory
    # When a client writes an object
    client.put_object(Bucket=bucket, Key="models/a.tar.gz", Body=small)
    # Then its bytes are in a file of the stack's, and read back as written, with S3's ETag
    assert len(files_holding(small)) == 1
    got = client.get_object(Bucket=bucket, Key="models/a.tar.gz")
    assert got["Body"].read() == small
    assert got["ETag"] == f'"{hashlib.md5(small).hexdigest()}"'
    # a range, and a copy, are S3's too
    ranged = client.get_object(Bucket=bucket, Key="models/a.tar.gz", Range="bytes=100-199")
    assert ranged["Body"].read() == small[100:200]
    client.copy_object(
        Bucket=bucket,
        Key="models/b.tar.gz",
        CopySource={"Bucket": bucket, "Key": "models/a.tar.gz"},
    )
    assert client.get_object(Bucket=bucket, Key="models/b.tar.gz")["Body"].read() == small
    # and so is a multipart upload (three parts)
    large = uuid.uuid4().bytes * (700 * 1024)  # 11.2 MB
    source = tmp_path / "upload.bin"
    source.write_bytes(large)
    config = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)
    client.upload_file(str(source), bucket, "incoming/upload.bin", Config=config)
    assert client.get_object(Bucket=bucket, Key="incoming/upload.bin")["Body"].read() == large


def test_an_overwritten_or_deleted_objects_file_is_removed(s3: tuple[Any, str]) -> None:
    client, bucket = s3
    first, second = uuid.uuid4().bytes * 64, uuid.uuid4().bytes * 64
    client.put_object(Bucket=bucket, Key="history/shard-0", Body=first)
    assert len(files_holding(first)) == 1
    # When the object is overwritten, then deleted
    client.put_object(Bucket=bucket, Key="history/shard-0", Body=second)
    gc.collect()
    assert files_holding(first) == []
    assert client.get_object(Bucket=bucket, Key="history/shard-0")["Body"].read() == second
    client.delete_object(Bucket=bucket, Key="history/shard-0")
    gc.collect()
    # Then no file holds either
    assert files_holding(second) == []


def test_an_object_file_reads_writes_seeks_and_truncates_like_a_file(tmp_path: Path) -> None:
    value = ObjectFile(tmp_path / "object")
    assert value.write(b"hello world") == 11
    value.seek(0)
    assert value.read(5) == b"hello"
    assert value.read() == b" world"
    value.seek(0)
    value.truncate()
    value.write(b"bye")
    value.seek(0)
    assert value.read() == b"bye"
    # closing it (moto's dispose) removes the file
    value.close()
    assert not (tmp_path / "object").exists()


def test_a_read_in_one_thread_is_not_moved_by_a_read_in_another(tmp_path: Path) -> None:
    # Given an object a request is reading (moto's value: seek to the start, then read)
    value = ObjectFile(tmp_path / "object")
    value.write(b"the summary")
    value.seek(0)
    # When another request reads it to the end in between (moto's ETag, without the lock)
    other = threading.Thread(target=lambda: (value.seek(0), value.read()))
    other.start()
    other.join()
    # Then the first read still gets every byte
    assert value.read() == b"the summary"


def test_a_forked_child_leaves_its_parents_object_files_alone(tmp_path: Path) -> None:
    # Given object files made by this process
    files = ObjectFiles(tmp_path / "objects")
    files.folder.mkdir()
    files.new().write(b"kept")
    # When a forked child removes them on its way out, as its atexit would
    child = os.fork()
    if child == 0:
        files.remove()
        os._exit(0)
    os.waitpid(child, 0)
    # Then they are still there; this process removes them
    assert len(list(files.folder.iterdir())) == 1
    files.remove()
    assert not files.folder.exists()
