"""What the local stack keeps across restarts: one snapshot file in its state folder.

moto 5.2.5 has no snapshot of its own. Its recorder logs every request for a replay, but a
replay would start every SageMaker job again and cannot restore what the job runner sets
on a job (status, metrics, model artifacts), so the stack pickles moto's models instead,
as moto's S3 objects are made to be (``FakeKey.__getstate__``): the S3 buckets with their
objects (every version of each), the DynamoDB tables with their items (the model
registry, the upload queue) and the SageMaker processing and training jobs.

A running stack writes the snapshot as its state changes (:mod:`.snapshots`: within
seconds of a change, and at every job's state change) and when it stops. The objects'
bytes are not in it: a kept stack holds them in files of its state folder
(:mod:`.moto_patches.s3`), and the snapshot names each object's file, so writing one costs
the objects' and items' metadata, not their gigabytes. A job that had finished keeps its
outcome and does not run again; a job still running is run again at the next start (a
training job from its checkpoints, as after a spot interruption). Not kept: events still
being delivered and SQS messages (what a run lacks of them is sent again at the next
start: :mod:`.recovery`), the API's key (a new one at every start), the
endpoint's loaded models (it loads them from S3 again) and the cost data (made anew at
every start).
"""

from __future__ import annotations

import copyreg
import os
import pickle
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.backends import get_backend
from moto.dynamodb.models.dynamo_type import LimitedSizeDict
from moto.s3.models import FakeKey
from moto.s3.utils import _VersionedKeyStore

from fleetcast.embedded.moto_patches.s3 import ObjectFile, ObjectFiles
from fleetcast_contracts.files import PARTIAL_SUFFIX, written_whole

SNAPSHOT_FILE = "aws-state.pickle"
# moto's S3 backend is one per partition, the others one per region.
S3_REGION = "aws"
# Job kind -> the SageMaker backend's collection of that kind.
JOB_COLLECTIONS = {"processing": "processing_jobs", "training": "training_jobs"}
RUNNING = "InProgress"


class SnapshotUnreadableError(Exception):
    """A snapshot this moto cannot read back (another moto version wrote it, or it was cut)."""


@dataclass(frozen=True)
class KeptState:
    """What a snapshot holds, as the stack reports it at start and stop."""

    buckets: int
    objects: int
    tables: int
    items: int
    jobs: int
    # (kind, name) of the jobs that had not finished.
    unfinished: tuple[tuple[str, str], ...] = ()
    # When it was taken (None in a snapshot written before snapshots said so).
    taken_at: datetime | None = None

    def describe(self, restored: bool = False) -> str:
        """What it holds, as a stop (``restored`` False) or a start says it: a stop's
        unfinished jobs run again at the next start, a start's run again now."""
        text = (
            f"{self.objects} objects in {self.buckets} buckets, {self.items} items in "
            f"{self.tables} tables, {self.jobs} SageMaker jobs"
        )
        if self.unfinished:
            when = "now" if restored else "at the next start"
            text += f" ({len(self.unfinished)} unfinished: run again {when})"
        return text


def _s3(account_id: str) -> Any:
    return get_backend("s3")[account_id][S3_REGION]


def _dynamodb(account_id: str, region: str) -> Any:
    return get_backend("dynamodb")[account_id][region]


def sagemaker_backend(account_id: str, region: str) -> Any:
    return get_backend("sagemaker")[account_id][region]


def _describe(
    s3: Any, dynamodb: Any, jobs: dict[str, dict[str, Any]], taken_at: datetime | None
) -> KeptState:
    return KeptState(
        buckets=len(s3.buckets),
        objects=sum(len(bucket.keys) for bucket in s3.buckets.values()),
        tables=len(dynamodb.tables),
        items=sum(len(table) for table in dynamodb.tables.values()),
        jobs=sum(len(collection) for collection in jobs.values()),
        unfinished=tuple(
            (kind, name)
            for kind, collection in sorted(jobs.items())
            for name, job in collection.items()
            if getattr(job, f"{kind}_job_status") == RUNNING
        ),
        taken_at=taken_at,
    )


def _key_by_file(objects: ObjectFiles) -> Any:
    """FakeKey's reduction naming its object file in ``objects`` (moto's own
    ``__getstate__`` copies the bytes in)."""

    def reduce(key: FakeKey) -> Any:
        buffer = key._value_buffer
        if not isinstance(buffer, ObjectFile) or buffer.path.parent != objects.folder:
            return key.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        state = {k: v for k, v in key.__dict__.items() if k not in ("_value_buffer", "lock")}
        return _key_from_file, (type(key), state, buffer.path.name)

    return reduce


def _item_attributes(attributes: LimitedSizeDict) -> Any:
    """An item's attributes as a plain dict, put back without moto's size check: its
    ``__setitem__`` sums the sizes of all the item's attributes for each one set, which
    made reading a snapshot of 10,000 customers take 31 s, 25 of them there (a stored
    item was within the limit when it was written)."""
    return _attributes_from, (type(attributes), dict(attributes))


def _attributes_from(cls: type[LimitedSizeDict], attributes: dict[str, Any]) -> Any:
    restored = cls.__new__(cls)
    dict.update(restored, attributes)  # dict's own update: no per-key size check
    return restored


def _bucket_keys(keys: _VersionedKeyStore) -> Any:
    """A bucket's keys with every version of each (noncurrent ones too, and delete
    markers). moto's store is a dict subclass whose ``items()`` gives each key's latest
    version only, and pickle reduces a dict subclass through ``items()``: a snapshot kept
    the latest version alone, and a restart lost the others (an upload waiting in the
    queue for a version written over then failed as gone)."""
    return _bucket_keys_from, (type(keys), dict(keys.lists()))


def _bucket_keys_from(cls: type[_VersionedKeyStore], versions: dict[str, list[Any]]) -> Any:
    restored = cls.__new__(cls)
    dict.update(restored, versions)  # key -> its versions, oldest first, as moto holds them
    return restored


# While a snapshot is read: the object files its keys name, and the folder they are in.
_reading = threading.local()


def _key_from_file(cls: type[FakeKey], state: dict[str, Any], name: str) -> Any:
    key: Any = object.__new__(cls)
    key.__dict__.update(state)
    key._value_buffer = _reading.objects.existing(name)
    key.lock = threading.Lock()
    _reading.names.add(name)
    return key


def save(path: Path, account_id: str, region: str, objects: ObjectFiles | None = None) -> KeptState:
    """Write the snapshot (whole or not at all: a new file, flushed to disk, renamed over
    the old one). With ``objects`` (a kept folder), S3 objects are named by their file
    there instead of copied in."""
    s3, dynamodb = _s3(account_id), _dynamodb(account_id, region)
    sagemaker = sagemaker_backend(account_id, region)
    jobs = {kind: dict(getattr(sagemaker, attr)) for kind, attr in JOB_COLLECTIONS.items()}
    taken_at = datetime.now(UTC)
    # Shared: a snapshot's child and a clean stop never write the same partial file.
    with written_whole(path, shared=True) as partial, partial.open("wb", buffering=1 << 20) as file:
        pickler = pickle.Pickler(file, pickle.HIGHEST_PROTOCOL)
        table: dict[type, Any] = {
            **copyreg.dispatch_table,
            LimitedSizeDict: _item_attributes,
            _VersionedKeyStore: _bucket_keys,
        }
        if objects is not None and objects.kept:
            table[FakeKey] = _key_by_file(objects)
        pickler.dispatch_table = table
        pickler.dump({"s3": s3, "dynamodb": dynamodb, "jobs": jobs, "taken_at": taken_at})
        file.flush()
        os.fsync(file.fileno())
    return _describe(s3, dynamodb, jobs, taken_at)


def restore(
    path: Path, account_id: str, region: str, objects: ObjectFiles | None = None
) -> KeptState | None:
    """Put a snapshot's buckets, tables and jobs into moto; None when there is none.

    With ``objects`` (the kept folder its keys name), the folder's files no object of
    the snapshot names (written after it by a stack that then died, or released before
    it) are removed. The file is the stack's own, written by :func:`save` under the
    user's state folder."""
    for stale in path.parent.glob(f"{path.name}*{PARTIAL_SUFFIX}"):
        # Half written by a stack (or its snapshot's child) that died writing it.
        stale.unlink(missing_ok=True)
    if not path.is_file():
        return None
    _reading.objects, _reading.names = objects, set()
    try:
        with path.open("rb") as file:
            snapshot = pickle.load(file)  # noqa: S301 - our own file, see the docstring
        kept = _describe(
            snapshot["s3"], snapshot["dynamodb"], snapshot["jobs"], snapshot.get("taken_at")
        )
    except Exception as error:
        raise SnapshotUnreadableError(
            f"cannot read the local stack's state {path}: {error!r}"
        ) from error
    finally:
        names, _reading.names, _reading.objects = _reading.names, set(), None
    get_backend("s3")[account_id][S3_REGION] = snapshot["s3"]
    get_backend("dynamodb")[account_id][region] = snapshot["dynamodb"]
    sagemaker = sagemaker_backend(account_id, region)
    for kind, attr in JOB_COLLECTIONS.items():
        getattr(sagemaker, attr).update(snapshot["jobs"][kind])
    if objects is not None and objects.kept:
        for unnamed in objects.folder.iterdir():
            # (A snapshot written before objects were named copies their bytes into
            # new files of this process's own, which stay.)
            if unnamed.name not in names and not objects.made_here(unnamed.name):
                unnamed.unlink(missing_ok=True)
    return kept


def set_aside(path: Path, objects_folder: Path | None = None) -> Path | None:
    """Move a snapshot out of the way (``fleetcast up --fresh``) without deleting it, and
    with it ``objects_folder``, the object files it names (the next start would remove
    them as named by no snapshot of its own)."""
    if not path.is_file():
        return None
    stamp = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    kept = path.with_name(f"{path.name}.{stamp}")
    path.replace(kept)
    if objects_folder is not None and objects_folder.is_dir():
        objects_folder.replace(objects_folder.with_name(f"{objects_folder.name}.{stamp}"))
    return kept
