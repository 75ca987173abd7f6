"""Checkpoints synced to S3 while a training job runs, as SageMaker does."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, split_s3_uri, under_root
from fleetcast_common.contracts import training as training_contract

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
        for path in self._local.rglob("*"):
            if not path.is_file() or path.name.endswith(".partial"):
                continue
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
        self._seen.update(changed)
        return len(changed)


def checkpoint_dir(root: Path, checkpoint: dict[str, Any]) -> Path:
    return under_root(root, checkpoint.get("LocalPath", training_contract.CHECKPOINT_LOCAL_PATH))
