"""The instance's disk: unpacked model archives within a capacity, least recently used first out."""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetcast.embedded.endpoint.exceptions import ValidationError
from fleetcast_common import storage
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.inference import (
    MODELS_DIR,
)
from fleetcast_contracts.object_keys import safe_file_name

DOWNLOAD_CHUNK_BYTES = 1024 * 1024


@dataclass
class _CachedModel:
    size: int
    users: int = 0


class ModelDiskCache:
    """Unpacked model archives under the container's ``/opt/ml/models``, one folder per
    TargetModel, within ``capacity_bytes``: the least recently used folder not in use is
    deleted first, as SageMaker does when an instance's disk fills."""

    def __init__(self, root: Path, capacity_bytes: int, s3: Any, bucket: str, prefix: str) -> None:
        self.root = root
        self.capacity_bytes = capacity_bytes
        self.bucket = bucket
        self.prefix = prefix
        self._s3 = s3
        self._entries: OrderedDict[str, _CachedModel] = OrderedDict()
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.downloads = 0
        self.deletions = 0

    @staticmethod
    def folder_name(target_model: str) -> str:
        return hashlib.sha256(target_model.encode()).hexdigest()[:32]

    def container_url(self, target_model: str) -> str:
        """The load request's url: where the container finds the model."""
        return f"{MODELS_DIR}/{self.folder_name(target_model)}/model"

    def cached(self, target_model: str) -> bool:
        with self._lock:
            return target_model in self._entries

    @contextmanager
    def holding(self, target_model: str) -> Iterator[Path]:
        """The model's folder, downloaded first if needed and kept while the block runs.
        Callers serialise per TargetModel (one download each)."""
        with self._lock:
            entry = self._entries.get(target_model)
            if entry is not None:
                self._entries.move_to_end(target_model)
                entry.users += 1
        if entry is None:
            size = self._download(target_model)
            with self._lock:
                entry = _CachedModel(size=size, users=1)
                self._entries[target_model] = entry
                self.used_bytes += size
                self.downloads += 1
                doomed = self._over_capacity()
            self._delete(doomed)
        try:
            yield self.root / self.folder_name(target_model) / "model"
        finally:
            with self._lock:
                entry.users -= 1

    def _over_capacity(self) -> list[str]:
        doomed = []
        for target_model, entry in list(self._entries.items()):
            if self.used_bytes <= self.capacity_bytes:
                break
            if entry.users == 0:
                del self._entries[target_model]
                self.used_bytes -= entry.size
                doomed.append(target_model)
        return doomed

    def _delete(self, target_models: Iterable[str]) -> None:
        for target_model in target_models:
            shutil.rmtree(self.root / self.folder_name(target_model), ignore_errors=True)
            self.deletions += 1

    def _download(self, target_model: str) -> int:
        key = self.prefix + target_model
        folder = self.root / self.folder_name(target_model)
        staging = self.root / f".{folder.name}-{uuid.uuid4().hex[:8]}"
        archive = staging / "download"
        staging.mkdir(parents=True)
        try:
            try:
                # One GetObject, streamed: a model archive is tens of KB, and the managed
                # transfer (HeadObject, a thread pool per call) cost more than the object.
                body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"]
                with archive.open("wb") as file:
                    shutil.copyfileobj(body, file, DOWNLOAD_CHUNK_BYTES)
            except Exception as error:
                if _s3_missing(error):
                    raise ValidationError(
                        f"Failed to download model data(bucket: {self.bucket}, key: {key}). "
                        "Please ensure that there is an object located at the URL and that the "
                        "role passed to CreateModel has permissions to download the model."
                    ) from None
                raise
            model = staging / "model"
            model.mkdir()
            if tarfile.is_tarfile(archive):
                with tarfile.open(archive) as unpacking:
                    unpacking.extractall(model, filter="data")
                archive.unlink()
            else:
                # Not an archive: the container says what is wrong with it when it loads.
                # A TargetModel is the client's text: its last segment may be '..', empty
                # or too long for a file name.
                archive.rename(model / safe_file_name(key, "model"))
            size = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)
            return size
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _s3_missing(error: Exception) -> bool:
    return error_code(error) in (*storage.MISSING_WITHOUT_LIST, "NotFound")
