"""make accuracy's replay (``python -m bench.accuracy.replay``): a rule replayed on the
recorded candidates gives what the jobs served, and another rule is scored on them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUSTOMERS = 3
DATA_SET = "london-lcl"
ALWAYS_NAIVE = '''
from fleetcast_training.selection import choose

def always_naive(*args, **kwargs):
    """Seasonal naive for every customer."""
    kwargs["servable"] = {"seasonal_naive"}
    return choose(*args, **kwargs)
'''


def replay(*arguments: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "COLUMNS": "160"}
    if pythonpath is not None:
        environment["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "bench.accuracy.replay", *arguments],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("replay")
    done = replay("record", str(folder), "--customers", str(CUSTOMERS), "--data-set", DATA_SET)
    assert done.returncode == 0, done.stderr
    assert f"{DATA_SET}: {CUSTOMERS} customers recorded" in done.stdout
    assert f"{DATA_SET}.w1: " in done.stdout
    return folder


def rows(output: str) -> tuple[str, str]:
    found = [
        line
        for line in output.splitlines()
        if "│" in line and ("replayed" in line or "as recorded" in line)
    ]
    return found[-2], found[-1]


def test_the_jobs_own_rule_replayed_gives_every_exported_forecast(recording):
    done = replay("check", str(recording))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gives every exported forecast exactly" in done.stdout
    replayed, recorded = rows(done.stdout)
    # The same figures: median WAPE, mean WAPE, customers beating naive.
    assert replayed.split("│")[-4:] == recorded.split("│")[-4:]


def test_a_forecast_the_replay_does_not_reproduce_fails_the_check(recording, tmp_path):
    for path in recording.iterdir():
        shutil.copy(path, tmp_path / path.name)
    meta_path = tmp_path / f"{DATA_SET}.json"
    meta = json.loads(meta_path.read_text())
    customer = sorted(meta["exported"])[0]
    meta["exported"][customer][0] += 1.0
    meta_path.write_text(json.dumps(meta))

    done = replay("check", str(tmp_path))
    assert done.returncode == 1
    assert f"differs from the export for 1 customers ({customer})" in done.stdout


def test_another_rule_is_scored_on_the_same_candidates(recording, tmp_path):
    (tmp_path / "naive_rule.py").write_text(ALWAYS_NAIVE)
    done = replay("check", str(recording), "--rule", "naive_rule:always_naive", pythonpath=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "naive_rule:always_naive" in done.stdout
    replayed, recorded = rows(done.stdout)
    # Seasonal naive never beats itself; the run's own choices beat it for these three.
    assert f"0/{CUSTOMERS}" in replayed
    assert f"0/{CUSTOMERS}" not in recorded


def test_a_folder_without_a_recording_says_so(tmp_path):
    done = replay("check", str(tmp_path))
    assert done.returncode == 1
    assert "holds no recording" in done.stdout


def test_both_daily_windows_are_recorded_and_replayed(recording):
    """The earlier window (the 30 days before the last 30) is recorded beside the last,
    its forecasts of its own horizon for customers of the last window's, and the check
    replays it exactly too."""
    last = json.loads((recording / f"{DATA_SET}.json").read_text())
    earlier = json.loads((recording / f"{DATA_SET}.w1.json").read_text())
    assert (last["window"], earlier["window"]) == (0, 1)
    assert set(earlier["exported"]) and set(earlier["exported"]) <= set(last["exported"])
    assert all(len(days) == earlier["horizon"] for days in earlier["exported"].values())
    done = replay("check", str(recording))
    assert done.returncode == 0, done.stdout + done.stderr
    names = [
        line.split("│")[1].strip()
        for line in done.stdout.splitlines()
        if "replayed" in line and "│" in line
    ]
    assert names == [DATA_SET, f"{DATA_SET}.w1"]


def test_one_window_can_be_recorded_alone(tmp_path):
    done = replay(
        "record", str(tmp_path), "--customers", "2", "--data-set", DATA_SET, "--window", "1"
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [f"{DATA_SET}.w1.json"]
