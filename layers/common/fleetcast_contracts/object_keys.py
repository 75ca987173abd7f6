"""S3 keys meeting local folders: the one place that decides where an object may be
written, and what name an upload is shown and staged under.

An S3 key is up to 1024 bytes of any UTF-8, and ``/`` is only a character in it: a key can
hold empty segments (``incoming//a.csv``), ``.`` and ``..`` segments, a leading ``/``,
segments longer than a file name, control characters, or be both a file and the folder of
another key (``incoming/pre`` and ``incoming/pre/inner.csv``). None of that may make code
write outside the folder it writes into: :func:`local_paths` maps keys to paths below a
folder or refuses them with a reason that names the key. The raw upload itself never
reaches a folder under its own key: every upload is staged under a short, safe name
(:func:`staged_upload_name`) and its real key travels beside it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from pathlib import Path

# Linux's limit on one path component (NAME_MAX), and S3's on a whole key.
NAME_MAX_BYTES = 255
KEY_MAX_BYTES = 1024
# How much of a key an error message shows: a FailureReason holds 1024 characters.
SHOWN_KEY_CHARS = 160
# A raw upload's file name that is staged as it is: plain, short, and no '.'/'..' (it
# starts with a letter or digit). Anything else is staged as "upload" plus its suffixes.
_PLAIN_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PLAIN_SUFFIXES = re.compile(r"(\.[A-Za-z][A-Za-z0-9]{0,7}){0,2}$")
STAGED_FILE_STEM = "upload"
# C0 controls (NUL among them) and DEL: no file name should hold them, and SageMaker's
# request fields do not take all of them either.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafeKeyError(ValueError):
    """An S3 key that cannot be written below a folder under its own name."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"S3 key {shown_key(key)} {problem}")


def shown_key(key: str, limit: int = SHOWN_KEY_CHARS) -> str:
    """The key as an error message shows it: quoted, control characters escaped, cut to
    ``limit`` characters with its length said."""
    shown = repr(key)
    if len(shown) <= limit:
        return shown
    return f"{shown[: limit - 3]}...' ({len(key.encode('utf-8', 'surrogatepass'))} bytes)"


def path_problem(relative: str) -> str | None:
    """What keeps ``relative`` (a key with its folder's prefix taken off) from being a
    path below that folder; None when nothing does."""
    if not relative:
        return "names no file: it is the folder itself"
    try:
        relative.encode()
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if _CONTROL.search(relative):
        return "holds a NUL or control character, which no file name may hold"
    if relative.startswith("/"):
        return "has an empty segment ('//') where its folder ends: it would be an absolute path"
    for segment in relative.split("/"):
        if segment == "":
            return "has an empty path segment ('//', or a trailing '/')"
        if segment in (".", ".."):
            return f"has a {segment!r} path segment, which would leave or alias its folder"
        size = len(segment.encode())
        if size > NAME_MAX_BYTES:
            return f"has a path segment of {size} bytes, and a file name holds at most {NAME_MAX_BYTES}"
    return None


def local_path(folder: Path, key: str, base: str) -> Path:
    """Where the object ``key`` (found under the key prefix ``base``) is written below
    ``folder``; raises :class:`UnsafeKeyError` for a key that would not stay inside it."""
    if not key.startswith(base):
        raise UnsafeKeyError(key, f"is not under {shown_key(base)}")
    problem = path_problem(key[len(base) :])
    if problem is not None:
        raise UnsafeKeyError(key, problem)
    return folder / key[len(base) :]


def local_paths(folder: Path, keys: Iterable[str], base: str) -> dict[str, Path]:
    """:func:`local_path` of every key, also refusing a key that is the folder of another
    (``pre`` and ``pre/inner.csv``: one path cannot be a file and a folder)."""
    paths = {key: local_path(folder, key, base) for key in keys}
    files = {path: key for key, path in paths.items()}
    for key, path in paths.items():
        # (The folder itself is no key's path: an empty relative path is refused.)
        for parent in path.relative_to(folder).parents:
            clash = files.get(folder / parent)
            if clash is not None:
                raise UnsafeKeyError(
                    clash,
                    f"is also the folder of S3 key {shown_key(key)}: one local path "
                    "cannot be both a file and a folder",
                )
    return paths


def safe_file_name(key: str, stem: str) -> str:
    """A file name for the object ``key`` that is safe in any folder: the key's own last
    segment when plain and short (``readings-2026-11-29.csv``), else ``stem`` with its
    plain suffixes (``my readings.csv.gz`` -> ``<stem>.csv.gz``)."""
    name = posixpath.basename(key)
    if _PLAIN_FILE_NAME.fullmatch(name):
        return name
    suffixes = _PLAIN_SUFFIXES.search(name)
    return stem + (suffixes.group(0) if suffixes else "")


def staged_upload_name(key: str) -> str:
    """The file name an upload is staged and read under (:func:`safe_file_name`)."""
    return safe_file_name(key, STAGED_FILE_STEM)


def upload_file_name(key: str) -> str:
    """The upload's own file name, as reports and ``fleetcast status`` show it: the key's
    last segment, or the whole key when that is empty (``incoming/``-like keys)."""
    return posixpath.basename(key) or key
