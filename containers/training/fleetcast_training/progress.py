"""A training instance's progress: a log line at every ~5% of its shard, and the progress
file in the checkpoint directory (synced to S3) that ``fleetcast status`` and the
registration read while the job runs."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

from fleetcast_contracts.files import write_whole
from fleetcast_contracts.training import progress_name
from fleetcast_contracts.training_manifest import TrainingProgress

logger = logging.getLogger(__name__)

PROGRESS_STEP = 0.05
# The progress file is rewritten at most this often (and at every logged step).
PROGRESS_FILE_SECONDS = 2.0


class Progress:
    """Logs a line each time another ~5% of the shard is done, and keeps the instance's
    progress file in ``directory`` (the checkpoint dir, synced to S3) up to date."""

    def __init__(self, host: str, total: int, directory: Path | None = None) -> None:
        self._host = host
        self._total = total
        self._step = max(1, math.ceil(total * PROGRESS_STEP))
        self._done = 0
        self._next = self._step
        self._started = time.perf_counter()
        self._file = None if directory is None else directory / progress_name(host)
        self._written = -math.inf
        self._write()

    def _write(self) -> None:
        if self._file is not None:
            state = TrainingProgress(host=self._host, done=self._done, total=self._total)
            write_whole(self._file, state.model_dump_json())
            self._written = time.perf_counter()

    def advance(self, count: int) -> None:
        if count == 0:
            return
        self._done += count
        if self._done < self._next and self._done < self._total:
            if time.perf_counter() - self._written >= PROGRESS_FILE_SECONDS:
                self._write()
            return
        self._write()
        while self._next <= self._done:
            self._next += self._step
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        logger.info(
            "%s: %d/%d customers done (%.0f%%), %.2f customers/s",
            self._host,
            self._done,
            self._total,
            100 * self._done / max(self._total, 1),
            self._done / elapsed,
        )
