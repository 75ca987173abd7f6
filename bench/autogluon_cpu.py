"""Row 2d: training CPU per customer against AutoGluon-TimeSeries' medium_quality.

make bench does not run AutoGluon (its environment is torch and 5.8 GB, installed by make
accuracy only), and the comparison issue 39 asks for is on the same customers: make
accuracy measures both on each of its daily sets and windows (fleetcast's training jobs,
AutoGluon's whole fit of every base model and its predict, each divided by the
customers). This row reads those figures from make accuracy's results and reports the
set and window where fleetcast's lead is the smallest; the detail names them all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.accuracy.datasets import DAILY
from bench.accuracy.report import AUTOGLUON_CPU_RATIO_TARGET, AUTOGLUON_ENSEMBLE, FLEETCAST
from bench.measure import Row, ratio_at_least

NAME = "training: CPU per customer vs AutoGluon medium_quality (make accuracy)"


def _pairs(results: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(set and window, fleetcast's ms, AutoGluon's ms) for each daily set AutoGluon ran."""
    found = []
    for data_set in results.get("data_sets", []):
        methods = data_set.get("methods", {})
        if data_set.get("frequency") != DAILY.model_frequency or AUTOGLUON_ENSEMBLE not in methods:
            continue
        ours = float(methods[FLEETCAST]["cpu_ms_per_customer"])
        theirs = float(methods[AUTOGLUON_ENSEMBLE]["cpu_ms_per_customer"])
        if ours > 0 and theirs > 0:
            label = f"{data_set['key']} window {data_set.get('window', 0)}"
            found.append((label, ours, theirs))
    return found


def autogluon_cpu_rows(results_file: Path) -> list[Row]:
    """The row, or none when make accuracy's results hold no AutoGluon run."""
    if not results_file.is_file():
        return []
    results = json.loads(results_file.read_text())
    pairs = _pairs(results)
    if not pairs:
        return []
    label, ours, theirs = min(pairs, key=lambda pair: pair[2] / pair[1])
    ratio = theirs / ours
    target = ratio_at_least(AUTOGLUON_CPU_RATIO_TARGET)
    every = "; ".join(f"{name}: {a:.0f} vs {b:.0f} ms ({b / a:.1f}x)" for name, a, b in pairs)
    commit = results.get("versions", {}).get("fleetcast commit", "?")[:12]
    return [
        Row(
            name=NAME,
            unit="ms",
            fleetcast=ours,
            baseline=theirs,
            ratio=ratio,
            target=target.text,
            repetitions=1,
            spread=None,
            met=target.met(ours, ratio),
            detail=(
                f"from make accuracy's results ({results_file.name}, fleetcast at commit "
                f"{commit}), not measured by this run: fleetcast's training jobs against "
                "AutoGluon's fit (every base model) and predict, on the same customers, each "
                f"per customer; the row is the set with the smallest lead, {label}. All: "
                f"{every}."
            ),
            check="both forecast every scored customer of the set (make accuracy's check)",
            higher_is_better=False,
            target_kind=target.kind,
            target_value=target.value,
        )
    ]
