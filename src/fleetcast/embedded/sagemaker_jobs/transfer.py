"""S3 objects to and from an instance's folder, as SageMaker's S3 inputs and outputs move them."""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetcast_contracts import opt_ml
from fleetcast_contracts.object_keys import local_paths

SMALL_OBJECT_BYTES = 8 * 1024 * 1024


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an S3 URI: {uri}")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key


def under_root(root: Path, container_path: str) -> Path:
    """Map a container path (``/opt/ml/...``) into an instance's local root; both
    containers' contracts lay out the same ``/opt/ml`` tree."""
    return opt_ml.resolve(container_path, root)


def shard(keys: list[str], hosts: int, index: int) -> list[str]:
    """ShardedByS3Key: each instance gets about 1/n of the objects. AWS does not document
    the assignment; round-robin over sorted keys keeps shards within one object of even."""
    return sorted(keys)[index::hosts]


@dataclass
class S3Transfer:
    """Bulk S3 copies between the local moto server and a folder, a few requests at a time.

    Small objects (per-customer files, model archives) go as single requests: the managed
    transfer of ``upload_file`` costs more than the object itself at that size.
    """

    s3: Any
    # Writes a small object in process (``Gateway.put_object`` for the stack's account),
    # as SageMaker's own copies are no client's requests; None: through ``s3``.
    put_object: Callable[[str, str, bytes], None] | None = None
    # Copies an object to a file in process (``Gateway.download_object``), likewise for
    # a job's inputs; None: through ``s3``.
    download_object: Callable[[str, str, Path], None] | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(16))

    def keys(self, bucket: str, prefix: str) -> list[str]:
        keys: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(entry["Key"] for entry in page.get("Contents", []))
        return keys

    def download(self, bucket: str, prefix: str, keys: list[str], target: Path) -> int:
        """Download ``keys`` (found under the S3Prefix ``prefix``) into ``target``, each at its
        path below the prefix's folder: ``incoming/a.csv`` matches ``a.csv`` and
        ``a.csv.gz``, which arrive as two files of those names.

        Every key's path is decided (object_keys.local_paths) before anything is written:
        a key that would leave ``target`` or clash with another fails the job, naming it,
        with no file written."""
        folder = prefix if prefix.endswith("/") else posixpath.dirname(prefix)
        base = f"{folder}/" if folder and not folder.endswith("/") else folder
        paths = local_paths(target, keys, base)

        def fetch(key: str) -> None:
            path = paths[key]
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.download_object is not None:
                self.download_object(bucket, key, path)
                return
            response = self.s3.get_object(Bucket=bucket, Key=key)
            if response["ContentLength"] > SMALL_OBJECT_BYTES:
                self.s3.download_file(bucket, key, str(path))
            else:
                path.write_bytes(response["Body"].read())

        list(self.pool.map(fetch, keys))
        return len(keys)

    def upload(self, path: Path, bucket: str, key: str) -> None:
        if path.stat().st_size > SMALL_OBJECT_BYTES:
            self.s3.upload_file(str(path), bucket, key)
        elif self.put_object is not None:
            self.put_object(bucket, key, path.read_bytes())
        else:
            self.s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())

    def upload_tree(self, source: Path, bucket: str, prefix: str) -> int:
        files = [p for p in sorted(source.rglob("*")) if p.is_file()]
        base = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        list(
            self.pool.map(
                lambda p: self.upload(p, bucket, base + p.relative_to(source).as_posix()), files
            )
        )
        return len(files)
