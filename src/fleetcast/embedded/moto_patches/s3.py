"""The local stack's S3 objects in files, not in the stack's memory.

moto keeps each object's bytes in a ``SpooledTemporaryFile`` that stays in memory below
5 MB: every model archive, history shard and training shard of a run lived in the stack's
process (10 GiB at 100,000 customers). On AWS that is storage, not a process. Here each
object's bytes go to a file of its own under the user's cache folder, opened only while
it is read or written (an open file per object would run into the limit on open files),
and removed when moto lets the object go (overwritten, deleted, or at exit).

A stack that keeps its state (``fleetcast up``) keeps its objects' files in its state
folder instead (:func:`keep_objects_in_files` with ``kept_in``): its snapshots name each
object's file rather than copy its bytes (:mod:`fleetcast.embedded.persistence`). There a
file moto lets go is only *released*: the last snapshot written may still name it, so it
is removed once a newer snapshot is (:meth:`ObjectFiles.take_released`).
"""

from __future__ import annotations

import atexit
import copy
import itertools
import os
import shutil
import threading
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from moto.s3 import models as moto_s3_models

from fleetcast.embedded.template import cache_folder

# One folder per process: a stack that was killed leaves its folder, removed by the next
# stack that finds its process gone.
_lock = threading.Lock()
_installed: ObjectFiles | None = None


class ObjectFile:
    """One object's bytes in ``path``: the parts of a file's interface moto's FakeKey uses
    (seek, read, write, truncate, close), each opening the file for just that call.

    Each thread has its own position: moto reads a key's value under the key's lock but
    computes its ETag (seek, read to the end) without it, so with one shared position a
    GET could read from where another request's ETag left off, and return no bytes."""

    def __init__(self, path: Path, on_close: Callable[[Path], None] | None = None) -> None:
        self._path = path
        self._positions = threading.local()
        self._on_close = on_close
        path.touch()

    @property
    def _position(self) -> int:
        position: int = getattr(self._positions, "at", 0)
        return position

    @_position.setter
    def _position(self, at: int) -> None:
        self._positions.at = at

    @property
    def path(self) -> Path:
        return self._path

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._position = offset
        elif whence == os.SEEK_CUR:
            self._position += offset
        else:
            self._position = self._path.stat().st_size + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        with self._path.open("rb") as file:
            file.seek(self._position)
            data = file.read(size)
        self._position += len(data)
        return data

    def write(self, data: bytes) -> int:
        with self._path.open("r+b") as file:
            file.seek(self._position)
            written = file.write(data)
        self._position += written
        return written

    def truncate(self, size: int | None = None) -> int:
        size = self._position if size is None else size
        os.truncate(self._path, size)
        return size

    def close(self) -> None:
        if self._on_close is None:
            self._path.unlink(missing_ok=True)
        else:
            self._on_close(self._path)


class ObjectFiles:
    """Makes :class:`ObjectFile` s in ``folder``, named by a counter. ``kept``: the folder
    outlives the process, each start's names are its own (a prefix), and a closed file is
    released (:meth:`take_released`) rather than removed."""

    def __init__(self, folder: Path, kept: bool = False) -> None:
        self.folder = folder
        self.kept = kept
        self._names = itertools.count()
        self._prefix = f"{uuid.uuid4().hex[:8]}-" if kept else ""
        self._owner = os.getpid()
        self._released: list[Path] = []
        self._lock = threading.Lock()

    def new(self, max_size: int = 0, *_: object, **__: object) -> ObjectFile:
        """Called where moto calls ``tempfile.SpooledTemporaryFile(max_size)``."""
        return self.existing(f"{self._prefix}{next(self._names):x}")

    def existing(self, name: str) -> ObjectFile:
        """The object file ``name`` of this folder (a snapshot's, when restored)."""
        return ObjectFile(self.folder / name, self._release if self.kept else None)

    def made_here(self, name: str) -> bool:
        """Whether the file ``name`` was made by this process (not restored)."""
        return self.kept and name.startswith(self._prefix)

    def _release(self, path: Path) -> None:
        with self._lock:
            self._released.append(path)

    def take_released(self) -> list[Path]:
        """The files released since the last call: no object of moto's holds them any
        more, so once a snapshot taken after this call is written, none names them."""
        with self._lock:
            released, self._released = self._released, []
        return released

    def give_back(self, released: list[Path]) -> None:
        """Released files a snapshot failed to supersede: kept until the next one."""
        with self._lock:
            self._released[:0] = released

    def remove(self) -> None:
        """Remove the folder, from the process that made it only: a forked child that
        exits through atexit must not take its parent's objects with it. A kept folder
        stays (its snapshot names its files)."""
        if os.getpid() == self._owner and not self.kept:
            shutil.rmtree(self.folder, ignore_errors=True)


def keep_objects_in_files(root: Path | None = None, kept_in: Path | None = None) -> ObjectFiles:
    """Make moto keep each new S3 object's bytes in a file under ``root`` (by default
    s3-objects in the user's cache folder), in a folder of this process's, removed at
    exit; with ``kept_in``, in that folder, kept. Idempotent: the first call's folder
    stays, and objects moto already holds stay where they are; asking for a kept folder
    after another was chosen is an error (moto's state is one per process)."""
    global _installed
    with _lock:
        if _installed is not None and kept_in is not None and _installed.folder != kept_in:
            raise RuntimeError(
                f"this process already keeps its S3 objects in {_installed.folder}: a stack "
                f"that keeps its state in {kept_in.parent} needs a process of its own"
            )
        if _installed is None:
            if kept_in is not None:
                files = ObjectFiles(kept_in, kept=True)
            else:
                root = root or cache_folder() / "s3-objects"
                _remove_folders_of_ended_processes(root)
                files = ObjectFiles(root / str(os.getpid()))
            files.folder.mkdir(parents=True, exist_ok=True)
            moto_s3_models.tempfile = types.SimpleNamespace(  # type: ignore[assignment]
                SpooledTemporaryFile=files.new
            )
            atexit.register(files.remove)
            _installed = files
        return _installed


def _delete_marker_copy(marker: Any, memo: dict[int, Any]) -> Any:
    """A delete marker copied as ListObjectVersions lists it: its name, version and dates,
    not the version it hides (moto's marker links to it, and deep-copied it whole)."""
    copied = copy.copy(marker)
    memo[id(marker)] = copied
    return copied


def delete_markers_copied_alone() -> None:
    """moto's ListObjectVersions deep-copies every version, a delete marker with the object
    version it was put over. Once that version itself is deleted, moto disposes of it (its
    file goes) while the marker still links to it, and listing the key's versions then
    failed reading its bytes (a 500): a lifecycle rule that expires noncurrent versions
    does exactly that. A marker is copied alone (idempotent)."""
    moto_s3_models.FakeDeleteMarker.__deepcopy__ = _delete_marker_copy  # type: ignore[attr-defined]


def copy_value(key: Any, target: Path) -> None:
    """Write moto's object ``key`` (a FakeKey) to ``target``: a copy of its file, without
    its bytes passing through this process's memory, when it has one."""
    if isinstance(key._value_buffer, ObjectFile):
        shutil.copyfile(key._value_buffer.path, target)
    else:
        target.write_bytes(key.value)


def _remove_folders_of_ended_processes(root: Path) -> None:
    if not root.is_dir():
        return
    for folder in root.iterdir():
        if folder.is_dir() and not (folder.name.isdigit() and psutil.pid_exists(int(folder.name))):
            shutil.rmtree(folder, ignore_errors=True)
