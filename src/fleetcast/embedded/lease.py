"""A stack's hold on its state folder: ``running.json``, written before anything starts and
removed by a clean stop. Finding one whose process is gone means that stack died
(``kill -9``, a crash, the machine stopping): the next start says so, and stops what the
dead stack left running before it starts its own.

Which processes are the dead stack's is proved, not guessed: every process a stack starts
(Lambda workers and their fork server, job containers and their workers, the inference
server, a snapshot being written) inherits ``FLEETCAST_STACK_PROCESS`` from it, set to the
stack process's pid and start time, which no other process on the machine has; and a
process of the dead stack's started after it did. A process found with that mark is
stopped (SIGTERM, then SIGKILL); one that cannot be stopped makes the start refuse,
naming it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from fleetcast_contracts.files import write_whole

log = logging.getLogger("fleetcast.embedded.lease")

LEASE_FILE = "running.json"
# What every process a stack starts inherits from it (see the module's docstring).
STACK_PROCESS_ENV = "FLEETCAST_STACK_PROCESS"
# How often a running stack marks its lease as still held: the last mark says when a
# dead stack was last seen alive.
HEARTBEAT_SECONDS = 2.0
STOP_GRACE_SECONDS = 5.0


class StackRunningError(RuntimeError):
    """Another stack, alive, holds the state folder."""


class LeftBehindError(RuntimeError):
    """Processes of a dead stack that could not be stopped."""


@dataclass(frozen=True)
class Lease:
    pid: int
    # psutil's create_time of the stack process: with the pid, no other process has it.
    process_started: float
    started_at: str  # ISO 8601, for people

    @property
    def mark(self) -> str:
        return f"{self.pid}:{self.process_started:.3f}"

    def is_alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            # A zombie has died: only its exit status is left for its parent to read.
            return (
                abs(process.create_time() - self.process_started) < 0.01
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return False
        except psutil.AccessDenied:
            return True


@dataclass(frozen=True)
class StoppedProcess:
    pid: int
    command: str  # what it runs, in a word or two

    def describe(self) -> str:
        return f"{self.pid} ({self.command})"


@dataclass(frozen=True)
class DeadStack:
    """A stack that held the folder and died without a clean stop."""

    lease: Lease
    last_seen: datetime  # its lease's last heartbeat
    stopped: tuple[StoppedProcess, ...]

    def describe(self) -> str:
        text = (
            f"the last stack from this folder (pid {self.lease.pid}, started "
            f"{_local(self.lease.started_at)}) did not stop cleanly: it was last seen "
            f"alive at {self.last_seen.astimezone():%Y-%m-%d %H:%M:%S} (killed, or it "
            "crashed)"
        )
        if self.stopped:
            kinds = Counter(process.command for process in self.stopped)
            shown = ", ".join(f"{count} {command}" for command, count in kinds.most_common())
            pids = " ".join(str(process.pid) for process in self.stopped)
            text += (
                f"; stopped the {len(self.stopped)} processes it left running: {shown} "
                f"(pids {pids})"
            )
        return text


def _local(iso: str) -> str:
    return f"{datetime.fromisoformat(iso).astimezone():%Y-%m-%d %H:%M:%S}"


def own_lease() -> Lease:
    me = psutil.Process()
    return Lease(me.pid, me.create_time(), datetime.now(UTC).isoformat(timespec="seconds"))


def refuse_if_held(state_dir: Path) -> None:
    """:class:`StackRunningError` when a live stack other than this process holds it."""
    found = _read(state_dir / LEASE_FILE)
    if found is not None and found.pid != os.getpid() and found.is_alive():
        raise StackRunningError(
            f"a local stack (pid {found.pid}) already runs from {state_dir}: "
            "stop it, or give this one a folder of its own (--state-dir)"
        )


def take(state_dir: Path) -> DeadStack | None:
    """Hold ``state_dir`` for this process; the dead stack found holding it, if any (its
    processes stopped). Raises :class:`StackRunningError` when a live stack holds it,
    :class:`LeftBehindError` when a dead one's processes cannot be stopped."""
    path = state_dir / LEASE_FILE
    mine = own_lease()
    dead: DeadStack | None = None
    refuse_if_held(state_dir)
    found = _read(path)
    if found is not None and found.pid != mine.pid:
        last_seen = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        dead = DeadStack(found, last_seen, stop_left_behind(found))
    # Every process this stack starts from now on carries its mark.
    os.environ[STACK_PROCESS_ENV] = mine.mark
    write_whole(path, json.dumps(asdict(mine), indent=2))
    return dead


def heartbeat(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.utime(state_dir / LEASE_FILE)


def release(state_dir: Path) -> None:
    """Remove the lease (a clean stop), if it is this process's."""
    path = state_dir / LEASE_FILE
    found = _read(path)
    if found is not None and found.pid == os.getpid():
        path.unlink(missing_ok=True)


def _read(path: Path) -> Lease | None:
    try:
        return Lease(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as error:
        # Cut short as it was written (it is written whole, then renamed: this is not
        # ours), or edited: it proves nothing, so nothing is stopped on its word.
        log.warning("ignoring %s, which is not a stack's lease: %s", path, error)
        return None


def left_behind(lease: Lease) -> list[psutil.Process]:
    """The live processes that carry ``lease``'s mark and started after its stack."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if (
                process.environ().get(STACK_PROCESS_ENV) == lease.mark
                and process.create_time() >= lease.process_started - 0.01
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone, or another user's: not provably the dead stack's
    return found


def stop_left_behind(lease: Lease) -> tuple[StoppedProcess, ...]:
    processes = left_behind(lease)
    stopped = []
    for process in processes:
        try:
            stopped.append(StoppedProcess(process.pid, _command(process)))
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(processes, timeout=STOP_GRACE_SECONDS)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(alive, timeout=STOP_GRACE_SECONDS)
    if alive:
        raise LeftBehindError(
            f"the dead stack (pid {lease.pid}) left processes this one cannot stop: "
            + ", ".join(StoppedProcess(p.pid, _command(p)).describe() for p in alive)
            + "; stop them, then start again"
        )
    log.info("stopped %d processes left by the dead stack %d", len(stopped), lease.pid)
    return tuple(stopped)


def _command(process: psutil.Process) -> str:
    """What a process runs, in a word or two: ``python -m fleetcast_inference serve``
    as "fleetcast_inference serve", a multiprocessing helper by its module."""
    try:
        words = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "?"
    if "-m" in words[:-1]:
        start = words.index("-m") + 1
        return " ".join(words[start : start + 2])
    if "-c" in words[:-1]:
        code = words[words.index("-c") + 1]
        found = re.search(r"from (\S+) import", code)
        if found:
            return found.group(1)
    return " ".join(Path(word).name if i == 0 else word for i, word in enumerate(words[:2])) or "?"
