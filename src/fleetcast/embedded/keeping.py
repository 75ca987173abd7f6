"""What a local stack keeps across stops and crashes, and what it says about them at start.

- :mod:`.lease`: the stack's hold on its folder; a dead stack found holding it is said,
  and what it left running is stopped;
- :mod:`.persistence` and :mod:`.snapshots`: the buckets, tables and jobs, snapshotted
  as they change while the stack runs and at a clean stop, restored at start;
- :mod:`.run_counter`: run numbers never handed out twice.

Stacks that keep nothing (``fleetcast demo``, the tests, the benchmarks) take the lease
(and so stop what a dead one left in their folder) but snapshot nothing.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.backends import get_backend

from fleetcast.embedded import lease, persistence, run_counter
from fleetcast.embedded.gateway import Gateway
from fleetcast.embedded.moto_patches.s3 import ObjectFiles, keep_objects_in_files
from fleetcast.embedded.snapshots import Snapshots
from fleetcast_common.upload_queue import LostRun, UploadQueue

log = logging.getLogger("fleetcast.embedded.keeping")

OBJECTS_FOLDER = "s3-objects"
JOBS_FOLDER = "jobs"


def _at(moment: datetime) -> str:
    return f"{moment.astimezone():%Y-%m-%d %H:%M:%S}"


class StateKeeping:
    def __init__(
        self, state_dir: Path, keep: bool, account_id: str, region: str, queue_table: str
    ) -> None:
        self.state_dir = state_dir
        self.keep = keep
        self._account_id = account_id
        self._region = region
        self._queue_table = queue_table
        self.notices: list[str] = []
        self.dead: lease.DeadStack | None = None
        # Jobs a dead stack started after its last snapshot: gone with it.
        self.lost_jobs: list[str] = []
        self.kept: persistence.KeptState | None = None
        self.objects: ObjectFiles | None = None
        self.snapshots: Snapshots | None = None
        self._held = False
        self._stopped = threading.Event()
        # True once moto holds this stack's state (restored or new): only then is it saved.
        self._loaded = False

    @property
    def snapshot_path(self) -> Path:
        return self.state_dir / persistence.SNAPSHOT_FILE

    @property
    def counter_path(self) -> Path:
        return self.state_dir / run_counter.HANDED_OUT_FILE

    def hold(self) -> None:
        """First of all: the folder's lease, and a kept stack's object files' folder
        (before the gateway makes moto's first object)."""
        self.dead = lease.take(self.state_dir)
        self._held = True
        if self.dead is not None:
            self.notices.append(self.dead.describe())
        if self.keep:
            self.objects = keep_objects_in_files(kept_in=self.state_dir / OBJECTS_FOLDER)

    def restore(self) -> persistence.KeptState | None:
        """The snapshot into moto (moto's backends exist: the gateway has started)."""
        if not self.keep:
            self.notices.append(
                "nothing is kept: buckets, tables and jobs end when this stack stops"
            )
            return None
        try:
            self.kept = persistence.restore(
                self.snapshot_path, self._account_id, self._region, self.objects
            )
        except persistence.SnapshotUnreadableError as error:
            aside = persistence.set_aside(self.snapshot_path)
            self.notices.append(f"{error}; starting empty, the file is kept as {aside}")
            self.kept = None
        self._loaded = True
        if self.kept is None:
            self.notices.append(
                "nothing was kept: the stack died before its first snapshot"
                if self.dead
                else "a new stack"
            )
        elif self.dead is None:
            self.notices.append(
                f"restored from {self.snapshot_path}: {self.kept.describe(restored=True)}"
            )
        else:
            self.notices.append(self._after_a_crash(self.kept, self.dead))
        return self.kept

    def _after_a_crash(self, kept: persistence.KeptState, dead: lease.DeadStack) -> str:
        taken = f"taken at {_at(kept.taken_at)}" if kept.taken_at else "of its last clean stop"
        text = (
            f"restored its last snapshot, {taken}: {kept.describe(restored=True)}. LOST: whatever "
            f"changed after it until the stack died (last seen {_at(dead.last_seen)}): "
            "uploads, records and jobs made then, and events still being delivered (what "
            "a run lacks of them is sent again: see below)"
        )
        lost = self.lost_jobs = self._jobs_lost()
        if lost:
            text += f"; jobs started after the snapshot, gone (their logs stay in {JOBS_FOLDER}/): "
            text += ", ".join(lost)
        if kept.unfinished:
            text += "; running at the snapshot, and run again now: "
            text += ", ".join(f"{kind} job {name}" for kind, name in kept.unfinished)
        return text

    def _jobs_lost(self) -> list[str]:
        sagemaker = persistence.sagemaker_backend(self._account_id, self._region)
        known = {
            name
            for attr in persistence.JOB_COLLECTIONS.values()
            for name in getattr(sagemaker, attr)
        }
        folder = self.state_dir / JOBS_FOLDER
        if not folder.is_dir():
            return []
        return sorted(
            job.name
            for job in folder.iterdir()
            if job.is_dir() and ".earlier-" not in job.name and job.name not in known
        )

    def record_lost_runs(self, dynamodb: Any, run_id_of: Any) -> None:
        """Keep the runs whose jobs died with the last stack where ``fleetcast status``
        reads (the upload queue), not only in this start's notice. ``run_id_of``: a job
        name's run id (None for a job that is not the pipeline's)."""
        if not (self.lost_jobs and self._queue_table and self.dead and self.kept):
            return
        queue = UploadQueue(dynamodb.Table(self._queue_table))
        taken = f"{_at(self.kept.taken_at)}" if self.kept.taken_at else "its last clean stop"
        now = datetime.now(UTC)
        for job_name in sorted(self.lost_jobs, reverse=True):  # a run's processing job last
            run_id = run_id_of(job_name)
            if run_id is None:
                continue
            queue.record_lost(
                LostRun(
                    run_id=run_id,
                    job_name=job_name,
                    reason=(
                        f"lost: the local stack was killed (last seen {_at(self.dead.last_seen)}) "
                        f"after this job started and before a snapshot held it (the last was "
                        f"taken at {taken}); the upload itself was kept (acknowledged only "
                        "once a snapshot holds it) and is queued again as another run"
                    ),
                    recorded_at=now,
                )
            )

    def keep_run_numbers(self, dynamodb_client: Any) -> None:
        """The upload counter at least the highest run number handed out or held
        anywhere; from now on each number handed out is written down as it is."""
        if not self.keep or not self._queue_table:
            return
        floor = run_counter.handed_out(self.counter_path)
        if self.dead is not None:
            # After a crash, every run number anything holds too (a clean stop's snapshot
            # holds the counter as it was at the end: the file suffices then). Seconds
            # at 10,000 customers, so not at every start.
            sagemaker = persistence.sagemaker_backend(self._account_id, self._region)
            jobs = [
                name
                for attr in persistence.JOB_COLLECTIONS.values()
                for name in getattr(sagemaker, attr)
            ]
            texts = run_counter.kept_texts(
                get_backend("s3")[self._account_id][persistence.S3_REGION],
                get_backend("dynamodb")[self._account_id][self._region],
                jobs,
                self.state_dir / JOBS_FOLDER,
            )
            floor = max(floor, run_counter.highest_in(texts))
        before = run_counter.raise_counter(dynamodb_client, self._queue_table, floor)
        if before is not None:
            self.notices.append(
                f"the upload counter was back at {before} but run numbers up to {floor} "
                f"were handed out: it is set to {floor}, so no run id is given twice"
            )
        run_counter.record_handed_out(self._queue_table, self.counter_path)

    def run(self, gateway: Gateway, upload_buckets: frozenset[str] = frozenset()) -> None:
        """Snapshot as the state changes, while the stack runs (and mark the lease as
        held: the snapshots' thread does that for a stack that keeps its state); an
        object written to one of ``upload_buckets`` is acknowledged once it is kept."""
        if not self.keep or self.objects is None:
            threading.Thread(target=self._heartbeat, daemon=True, name="lease").start()
            return
        self.snapshots = Snapshots(
            self.snapshot_path,
            self.state_dir,
            self._account_id,
            self._region,
            self.objects,
            durable_buckets=upload_buckets,
        )
        gateway.wrap_aws_app(self.snapshots.watch)
        gateway.observe_s3_writes(self.snapshots.s3_written)
        self.snapshots.start()
        self.notices.append(
            f"its buckets, tables and jobs are kept in {self.snapshot_path} as they change"
        )

    def _heartbeat(self) -> None:
        while not self._stopped.wait(lease.HEARTBEAT_SECONDS):
            lease.heartbeat(self.state_dir)

    def save(self) -> None:
        """The last snapshot, at a clean stop (everything else has stopped)."""
        if not (self.keep and self._loaded):
            return
        if self.snapshots is not None:
            kept = self.snapshots.stop()
            self.snapshots = None
        else:
            kept = persistence.save(
                self.snapshot_path, self._account_id, self._region, self.objects
            )
        log.info("kept in %s: %s", self.snapshot_path, kept.describe())
        self.notices.append(f"kept in {self.snapshot_path}: {kept.describe()}")
        self._loaded = False

    def release(self) -> None:
        """The lease given up: the last thing of a clean stop."""
        self._stopped.set()
        run_counter.stop_recording(self._queue_table)
        if self._held:
            lease.release(self.state_dir)
            self._held = False
