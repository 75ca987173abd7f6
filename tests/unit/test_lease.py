"""A stack's lease on its folder (fleetcast.embedded.lease): a live stack's is respected,
a dead one's is said, and only processes that carry the dead stack's mark are stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from fleetcast.embedded import lease

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture(autouse=True)
def own_mark_restored() -> Iterator[None]:
    before = os.environ.get(lease.STACK_PROCESS_ENV)
    yield
    if before is None:
        os.environ.pop(lease.STACK_PROCESS_ENV, None)
    else:
        os.environ[lease.STACK_PROCESS_ENV] = before


def test_a_live_stacks_lease_refuses_a_second_stack(tmp_path: Path) -> None:
    # Given a lease held by a live process (this test's parent stands in for a stack)
    parent = psutil.Process(os.getppid())
    held = lease.Lease(parent.pid, parent.create_time(), "2026-12-03T10:00:00+00:00")
    (tmp_path / lease.LEASE_FILE).write_text(json.dumps(held.__dict__))
    # When a stack takes the folder; then it is refused, naming the pid
    with pytest.raises(lease.StackRunningError, match=f"pid {parent.pid}"):
        lease.take(tmp_path)


def test_a_dead_stack_is_said_and_only_its_marked_processes_are_stopped(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]]
) -> None:
    # Given a dead stack's lease (a pid that has exited), a process carrying its mark,
    # and one carrying another stack's mark
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = lease.Lease(gone.pid, psutil.boot_time(), "2026-12-03T10:00:00+00:00")
    (tmp_path / lease.LEASE_FILE).write_text(json.dumps(dead.__dict__))
    ours = subprocess.Popen(SLEEPER, env={**os.environ, lease.STACK_PROCESS_ENV: dead.mark})
    stranger = subprocess.Popen(SLEEPER, env={**os.environ, lease.STACK_PROCESS_ENV: "1:2.000"})
    sleepers += [ours, stranger]
    # When a stack takes the folder
    found = lease.take(tmp_path)
    # Then the dead stack is said, its process stopped, the other left alone
    assert found is not None and found.lease == dead
    assert [p.pid for p in found.stopped] == [ours.pid]
    assert not psutil.pid_exists(ours.pid)  # stopped, and reaped by the wait
    assert stranger.poll() is None
    assert "did not stop cleanly" in found.describe()
    # and the folder is this process's now, marked so for what it starts
    held = json.loads((tmp_path / lease.LEASE_FILE).read_text())
    assert held["pid"] == os.getpid()
    assert os.environ[lease.STACK_PROCESS_ENV] == lease.own_lease().mark
    lease.release(tmp_path)
    assert not (tmp_path / lease.LEASE_FILE).exists()
