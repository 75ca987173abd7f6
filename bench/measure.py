"""Rows of the benchmark table, and the arithmetic every row shares.

A row compares fleetcast with a baseline measured in the same process on the same data,
taking turns repetition by repetition so that load from elsewhere on the machine falls
on both alike. ``ratio`` is how many times better fleetcast is (> 1 is better): the median
of the per-repetition ratios. ``spread`` is (max - min) / median of the per-repetition
headline figure (the ratio where there is a baseline, else fleetcast's own figure).
"""

from __future__ import annotations

import math
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

T = TypeVar("T")
TargetKind = Literal["ratio_at_least", "at_most", "at_least"]


@dataclass(frozen=True)
class Target:
    """What the issue asks of a row: a ratio against the baseline, or a bound on
    fleetcast's own figure."""

    kind: TargetKind
    value: float
    text: str

    def met(self, fleetcast: float | None, ratio: float | None) -> bool | None:
        if self.kind == "ratio_at_least":
            return None if ratio is None else ratio >= self.value
        if fleetcast is None:
            return None
        return fleetcast <= self.value if self.kind == "at_most" else fleetcast >= self.value


def ratio_at_least(value: float, text: str | None = None) -> Target:
    return Target("ratio_at_least", value, text or f"≥ {value:g}x")


def at_most(value: float, unit: str) -> Target:
    return Target("at_most", value, f"≤ {value:g} {unit}")


@dataclass(frozen=True)
class Row:
    """One line of the table and one object of ``bench/results.json``."""

    name: str
    unit: str
    fleetcast: float | None
    baseline: float | None
    ratio: float | None
    target: str | None
    repetitions: int
    spread: float | None
    met: bool | None = None
    # What the figures are exactly: the other percentiles, sizes, how the baseline works.
    detail: str = ""
    # The correctness check the row's outputs passed (identical forecasts, parameters...).
    check: str = ""
    higher_is_better: bool = True
    target_kind: TargetKind | None = None
    target_value: float | None = None
    figures: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {key: _rounded(value) for key, value in asdict(self).items()}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Row:
        return cls(**document)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def compare(
    name: str,
    unit: str,
    fleetcast: Sequence[float],
    baseline: Sequence[float],
    *,
    higher_is_better: bool,
    target: Target | None = None,
    detail: str = "",
    check: str = "",
    figures: dict[str, float] | None = None,
) -> Row:
    """A row from paired repetitions: ``fleetcast[i]`` and ``baseline[i]`` ran back to back."""
    if len(fleetcast) != len(baseline) or not fleetcast:
        raise ValueError(
            f"{name}: needs paired repetitions, got {len(fleetcast)} and {len(baseline)}"
        )
    ratios = [
        (f / b if higher_is_better else b / f) if f > 0 and b > 0 else math.nan
        for f, b in zip(fleetcast, baseline, strict=True)
    ]
    ratio = statistics.median(ratios)
    fleetcast_median = statistics.median(fleetcast)
    return Row(
        name=name,
        unit=unit,
        fleetcast=fleetcast_median,
        baseline=statistics.median(baseline),
        ratio=ratio,
        target=target.text if target else None,
        repetitions=len(fleetcast),
        spread=relative_spread(ratios),
        met=target.met(fleetcast_median, ratio) if target else None,
        detail=detail,
        check=check,
        higher_is_better=higher_is_better,
        target_kind=target.kind if target else None,
        target_value=target.value if target else None,
        figures=figures or {},
    )


def single(
    name: str,
    unit: str,
    values: Sequence[float],
    *,
    higher_is_better: bool,
    target: Target | None = None,
    detail: str = "",
    check: str = "",
    figures: dict[str, float] | None = None,
) -> Row:
    """A row with no baseline to compare with (the detail says why)."""
    if not values:
        raise ValueError(f"{name}: no repetitions")
    value = statistics.median(values)
    return Row(
        name=name,
        unit=unit,
        fleetcast=value,
        baseline=None,
        ratio=None,
        target=target.text if target else None,
        repetitions=len(values),
        spread=relative_spread(values),
        met=target.met(value, None) if target else None,
        detail=detail,
        check=check,
        higher_is_better=higher_is_better,
        target_kind=target.kind if target else None,
        target_value=target.value if target else None,
        figures=figures or {},
    )


def relative_spread(values: Sequence[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return None
    middle = statistics.median(finite)
    return (max(finite) - min(finite)) / middle if middle else None


def percentile(values: Sequence[float] | npt.NDArray[np.float64], share: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), 100 * share))


def percentiles_per_round(samples: Sequence[float], rounds: int, share: float) -> list[float]:
    """``share`` percentile of each of ``rounds`` consecutive slices of ``samples``."""
    slices = np.array_split(np.asarray(samples, dtype=np.float64), max(1, rounds))
    return [percentile(part, share) for part in slices if len(part)]


def taking_turns(
    repetitions: int, fleetcast: Callable[[int], T], baseline: Callable[[int], T]
) -> tuple[list[T], list[T]]:
    """Run both sides once per repetition, alternating which goes first."""
    ours: list[T] = []
    theirs: list[T] = []
    for repetition in range(repetitions):
        if repetition % 2:
            theirs.append(baseline(repetition))
            ours.append(fleetcast(repetition))
        else:
            ours.append(fleetcast(repetition))
            theirs.append(baseline(repetition))
    return ours, theirs


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def cpu_seconds() -> float:
    """CPU time of this process and of every descendant it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise KeyError(field_name)


def resident_bytes() -> int:
    return _status_kib("VmRSS") * 1024


def reset_peak_resident() -> None:
    """Make the peak resident set (VmHWM) the current one (Linux 4.0 and later)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_resident_bytes() -> int:
    return _status_kib("VmHWM") * 1024


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    memory_gib: float
    python: str
    system: str
    measured_at: str
    load_before: float

    @classmethod
    def describe(cls) -> Machine:
        cpu = platform.processor() or platform.machine()
        cpuinfo = Path("/proc/cpuinfo")
        if cpuinfo.exists():
            names = [
                line.split(":", 1)[1].strip()
                for line in cpuinfo.read_text().splitlines()
                if line.startswith("model name")
            ]
            cpu = names[0] if names else cpu
        memory_kib = 0
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
        return cls(
            cpu=cpu,
            cores=len(os.sched_getaffinity(0)),
            memory_gib=round(memory_kib / 2**20, 1),
            python=platform.python_version(),
            system=f"{platform.system()} {platform.release()}",
            measured_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            load_before=os.getloadavg()[0],
        )

    def summary(self) -> str:
        return (
            f"{self.cores} cores ({self.cpu}), {self.memory_gib:g} GiB, Python {self.python}, "
            f"{self.system}; {self.measured_at}; load average {self.load_before:.1f} at the start"
        )
