"""How every fleetcast process writes a file another reads: whole or not at all.

The file is written under a ``*.partial`` name beside it and renamed over it once complete
(a rename within a folder is atomic on POSIX), so a reader, and the checkpoint sync that
copies a training job's files to S3 while it runs (which skips ``*.partial``), finds the
old file, the new one, or none, never half of one. A write that fails leaves no partial
file behind.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

PARTIAL_SUFFIX = ".partial"


def is_partial(name: str) -> bool:
    """A file still being written (the checkpoint sync leaves it for a later round)."""
    return name.endswith(PARTIAL_SUFFIX)


@contextlib.contextmanager
def written_whole(path: Path, *, shared: bool = False) -> Iterator[Path]:
    """The name to write ``path`` under inside the block: renamed to ``path`` when the block
    ends, removed if it raises. ``shared``: other processes or threads may write ``path``
    at the same moment, so each writes its own partial file (the last rename wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = f".{os.getpid()}-{threading.get_ident()}" if shared else ""
    partial = path.with_name(f"{path.name}{writer}{PARTIAL_SUFFIX}")
    try:
        yield partial
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)


def write_whole(path: Path, data: str | bytes, *, shared: bool = False) -> None:
    """``path`` holds ``data``, written as :func:`written_whole` says."""
    with written_whole(path, shared=shared) as partial:
        if isinstance(data, bytes):
            partial.write_bytes(data)
        else:
            partial.write_text(data)
