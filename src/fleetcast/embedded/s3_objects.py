"""The local stack's S3 objects in files, not in the stack's memory.

moto keeps each object's bytes in a ``SpooledTemporaryFile`` that stays in memory below
5 MB: every model archive, history shard and training shard of a run lived in the stack's
process (10 GiB at 100,000 customers). On AWS that is storage, not a process. Here each
object's bytes go to a file of its own under the user's cache folder, opened only while
it is read or written (an open file per object would run into the limit on open files),
and removed when moto lets the object go (overwritten, deleted, or at exit).
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import threading
import types
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
    (seek, read, write, truncate, close), each opening the file for just that call."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._position = 0
        path.touch()

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
        self._path.unlink(missing_ok=True)


class ObjectFiles:
    """Makes :class:`ObjectFile` s in ``folder``, named by a counter."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._names = itertools.count()
        self._owner = os.getpid()

    def new(self, max_size: int = 0, *_: object, **__: object) -> ObjectFile:
        """Called where moto calls ``tempfile.SpooledTemporaryFile(max_size)``."""
        return ObjectFile(self.folder / format(next(self._names), "x"))

    def remove(self) -> None:
        """Remove the folder, from the process that made it only: a forked child that
        exits through atexit must not take its parent's objects with it."""
        if os.getpid() == self._owner:
            shutil.rmtree(self.folder, ignore_errors=True)


def keep_objects_in_files(root: Path | None = None) -> ObjectFiles:
    """Make moto keep each new S3 object's bytes in a file under ``root`` (by default
    s3-objects in the user's cache folder), in a folder of this process's, removed at
    exit. Idempotent: the first call's folder stays, and objects moto already holds stay
    where they are."""
    global _installed
    with _lock:
        if _installed is None:
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
