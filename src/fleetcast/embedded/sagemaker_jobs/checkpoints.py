"""Checkpoints synced to S3 while a training job runs, as SageMaker does."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, split_s3_uri, under_root
from fleetcast_contracts import training as training_contract
from fleetcast_contracts.files import is_partial
from fleetcast_contracts.layout import MODEL_ARCHIVE_SUFFIX

log = logging.getLogger("fleetcast.embedded.jobs")

CHECKPOINT_SYNC_SECONDS = 1.0


class CheckpointSync:
    """SageMaker copies new checkpoint files to S3 while the job runs; so does this, every
    second, skipping files still being written (``*.partial``)."""

    def __init__(self, transfer: S3Transfer, local: Path, s3_uri: str) -> None:
        self._transfer = transfer
        self._local = local
        self._bucket, self._prefix = split_s3_uri(s3_uri)
        if self._prefix and not self._prefix.endswith("/"):
            self._prefix += "/"
        self._seen: dict[Path, tuple[float, int]] = {}
        # Per folder, the archives already copied (never rewritten: not looked at again).
        self._archives_copied: dict[Path, set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"checkpoint-sync {local}"
        )

    @property
    def local(self) -> Path:
        return self._local

    def start(self) -> None:
        """Start syncing what the instance writes from now on. What the folder holds at
        the start was restored from the job's S3Uri (prepare_instance): after a spot
        interruption, every instance's and not only this one's, since SageMaker restores
        the whole checkpoint S3 URI "to checkpoint_local_path in each instance" (Resume
        training from a checkpoint). It is in S3 already: copying it back would put a
        new version of each of the run's archives, once per instance, at every restart."""
        self._remember(self._restored())
        self._thread.start()

    def _restored(self) -> list[tuple[Path, tuple[float, int]]]:
        found = []
        for path in self._candidates(self._local):
            stat = path.stat()
            found.append((path, (stat.st_mtime, stat.st_size)))
        return found

    def _remember(self, copied: list[tuple[Path, tuple[float, int]]]) -> None:
        self._seen.update(copied)
        for path, _ in copied:
            if path.name.endswith(MODEL_ARCHIVE_SUFFIX):
                self._archives_copied.setdefault(path.parent, set()).add(path.name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sync()

    def _loop(self) -> None:
        while not self._stop.wait(CHECKPOINT_SYNC_SECONDS):
            try:
                self.sync()
            except Exception:  # the next round, or the final sync, retries
                log.exception("checkpoint sync of %s failed", self._local)

    def sync(self) -> int:
        changed = []
        for path in self._candidates(self._local):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            signature = (stat.st_mtime, stat.st_size)
            if self._seen.get(path) != signature:
                changed.append((path, signature))
        list(
            self._transfer.pool.map(
                lambda item: self._transfer.upload(
                    item[0],
                    self._bucket,
                    self._prefix + item[0].relative_to(self._local).as_posix(),
                ),
                changed,
            )
        )
        self._remember(changed)
        return len(changed)

    def _candidates(self, directory: Path) -> Iterator[Path]:
        """The finished files under ``directory`` (not ``*.partial``) that may be new or
        changed. Archives are written once, under their final name (renamed from
        .partial): one already copied is left out by a set difference of names, so a round
        costs a directory listing, not a path and a stat for every model."""
        # Names, not Path objects: tens of thousands of archives per instance.
        listed = set(os.listdir(directory))  # noqa: PTH208
        for name in listed - self._archives_copied.get(directory, set()):
            if is_partial(name):
                continue
            path = directory / name
            if path.is_dir():
                yield from self._candidates(path)
            else:
                yield path


def checkpoint_dir(root: Path, checkpoint: dict[str, Any]) -> Path:
    return under_root(root, checkpoint.get("LocalPath", training_contract.CHECKPOINT_LOCAL_PATH))
