"""What keeping a running stack's state costs: a fleet run through a stack that keeps its
state, then snapshots taken as the running stack takes them, and a restore.

``python -m bench.snapshot --customers 10000`` prints, and writes to
``bench/snapshot-results.json`` (by fleet size): the kept state's size (objects, items, jobs), each
snapshot's pause of the stack (the fork) and its whole time (fork to written file), the
snapshot file's size, the run-number scan a start makes, and the restore's time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from moto.backends import get_backend

from bench.scale import Results, run_once
from fleetcast import datagen
from fleetcast.embedded import persistence, run_counter
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.embedded.template import ACCOUNT_ID, REGION
from fleetcast.terminal import console


@dataclass
class SnapshotFigures:
    customers: int
    days: int
    kept: str = ""
    snapshot_mb: float = 0.0
    pauses_ms: list[float] = field(default_factory=list)
    writes_s: list[float] = field(default_factory=list)
    run_number_scan_s: float = 0.0
    restore_s: float = 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.snapshot", description=__doc__)
    parser.add_argument("--customers", type=int, default=1000)
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--snapshots", type=int, default=5)
    parser.add_argument("--results", type=Path, default=Path("bench/snapshot-results.json"))
    args = parser.parse_args(argv)
    figures = SnapshotFigures(args.customers, args.days)
    state_dir = Path(tempfile.mkdtemp(prefix="fleetcast-snapshot-"))
    stack = EmbeddedStack(state_dir=state_dir, port=0, keep_state=True)
    with console.status("starting a stack that keeps its state"):
        stack.start()
    try:
        data = state_dir / "bench" / "readings.csv.gz"
        datagen.write_readings(data, customers=args.customers, days=args.days)
        run_once(
            stack,
            data,
            "incoming/bench.csv.gz",
            args.customers,
            Results(args.customers, args.days, 2),
            "full",
        )
        snapshots = stack.keeping.snapshots
        assert snapshots is not None
        for _ in range(args.snapshots):
            time.sleep(1.0)  # as the running stack does, between its own
            figures.writes_s.append(snapshots.take())
            figures.pauses_ms.append(snapshots.times.pauses[-1] * 1000)
        figures.snapshot_mb = stack.snapshot_path.stat().st_size / 1e6
        started = time.perf_counter()
        texts = run_counter.kept_texts(
            get_backend("s3")[ACCOUNT_ID]["aws"],
            get_backend("dynamodb")[ACCOUNT_ID][REGION],
            [],
            state_dir / "jobs",
        )
        run_counter.highest_in(texts)  # what a start after a crash scans
        figures.run_number_scan_s = time.perf_counter() - started
    finally:
        stack.stop()
    kept = stack.keeping.objects
    started = time.perf_counter()
    restored = persistence.restore(stack.snapshot_path, ACCOUNT_ID, REGION, kept)
    figures.restore_s = time.perf_counter() - started
    figures.kept = restored.describe() if restored else "nothing"
    console.print(
        f"{args.customers:,} customers x {args.days} days: {figures.kept}; snapshot "
        f"{figures.snapshot_mb:.1f} MB; stack paused {statistics.median(figures.pauses_ms):.1f} ms "
        f"(median; longest {max(figures.pauses_ms):.1f}); written in "
        f"{statistics.median(figures.writes_s):.2f} s (median; longest {max(figures.writes_s):.2f}); "
        f"run-number scan {figures.run_number_scan_s:.2f} s; restore {figures.restore_s:.2f} s"
    )
    # One entry per fleet size, so runs of several sizes sit side by side.
    results = json.loads(args.results.read_text()) if args.results.is_file() else {}
    results[str(args.customers)] = asdict(figures)
    args.results.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
