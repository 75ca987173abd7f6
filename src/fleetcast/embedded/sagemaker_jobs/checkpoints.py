"""Checkpoints synced to S3 while a training job runs, as SageMaker does."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, split_s3_uri, under_root
from fleetcast_common.contracts import training as training_contract
from fleetcast_common.contracts.layout import MODEL_ARCHIVE_SUFFIX

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
        self._seen: dict[str, tuple[float, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, daemon=True, name=f"checkpoint-sync {local}"
        )

    def start(self) -> None:
        self._thread.start()

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
        for entry in self._files(self._local):
            if entry.name.endswith(MODEL_ARCHIVE_SUFFIX) and entry.path in self._seen:
                # Archives are written once, under their final name (renamed from
                # .partial): one already copied is not looked at again, so a round costs
                # a directory listing, not a stat per model.
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            signature = (stat.st_mtime, stat.st_size)
            if self._seen.get(entry.path) != signature:
                changed.append((entry.path, signature))
        list(
            self._transfer.pool.map(
                lambda item: self._transfer.upload(
                    Path(item[0]),
                    self._bucket,
                    self._prefix + Path(item[0]).relative_to(self._local).as_posix(),
                ),
                changed,
            )
        )
        self._seen.update(changed)
        return len(changed)

    @classmethod
    def _files(cls, directory: str | Path) -> Iterator[os.DirEntry[str]]:
        """Every finished file under ``directory`` (not ``*.partial``)."""
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    yield from cls._files(entry.path)
                elif entry.is_file(follow_symlinks=False) and not entry.name.endswith(".partial"):
                    yield entry


def checkpoint_dir(root: Path, checkpoint: dict[str, Any]) -> Path:
    return under_root(root, checkpoint.get("LocalPath", training_contract.CHECKPOINT_LOCAL_PATH))
