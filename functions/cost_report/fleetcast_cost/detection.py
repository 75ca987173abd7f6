"""Which days of SageMaker spend were anomalous, per usage type.

For each day, the expected cost is a robust level times a weekday factor:

* weekday factors: the median, per weekday, of each day's cost over its centred
  seven-day mean (the last eight weeks), so a Monday is compared with Mondays;
* level: the median of the weekday-adjusted cost over the previous 14 days of the
  current *segment* (a segment restarts at a level shift, so the baseline adapts at once
  instead of flagging the new level for weeks);
* noise band: four robust standard deviations (1.4826 x MAD) of those 14 days.

A day is flagged when it exceeds the expected cost by the relative threshold AND the
absolute threshold AND the noise band: the thresholds say what is worth an e-mail, the
band says what is more than this usage type's usual wobble.

* a usage type with no cost for at least a week of the lookback is flagged on its
  first day (``new_usage_type``);
* a flagged day followed by another flagged day is a ``level_shift``: reported once, on
  the day it happened, and the baseline restarts there; a flagged day followed by a
  normal one is a ``spike``; the last day, with no tomorrow yet, is a ``jump``;
* a level shift that comes back to the old level within :data:`EXCURSION_MAX_DAYS` was
  an ``excursion``: every day of it is reported with its own excess over the old
  baseline (not only the first), and the baseline goes back to where it was;
* slow creep, too gradual for any single day to stand out, is flagged on the day the
  weekly level (median of the last seven adjusted days) has drifted past both
  thresholds from where it last stood; it then stands there.

Only increases are flagged; a sustained drop restarts the baseline so it is not left
too high. Pure functions of the series: no clock, no I/O.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetcast_cost.models import Anomaly, AnomalyKind, UsageHistory

WARMUP_DAYS = 14
NEW_USAGE_TYPE_MIN_HISTORY_DAYS = 7
LEVEL_WINDOW_DAYS = 14
SEASON_WINDOW_WEEKS = 8
MIN_SAMPLES_PER_WEEKDAY = 3
CREEP_WINDOW_DAYS = 7
CREEP_ANCHOR_DAYS = 14
DROP_DAYS_TO_RESTART = 2
RESIDUAL_WINDOW_DAYS = 56
MIN_RESIDUALS = 14
NOISE_BAND_SIGMAS = 5.0
MAD_TO_SIGMA = 1.4826
WEEKLY_PATTERN_SIGNIFICANCE = 5.0
# How long a new level may last and still turn out an excursion when it comes back.
EXCURSION_MAX_DAYS = LEVEL_WINDOW_DAYS


_NO_FACTORS = [1.0] * 7


@dataclass(frozen=True)
class Thresholds:
    relative: float
    absolute_usd: float

    def exceeded(self, actual: float, expected: float) -> bool:
        excess = actual - expected
        return excess > self.absolute_usd and excess > self.relative * expected


def detect_anomalies(history: UsageHistory, thresholds: Thresholds) -> list[Anomaly]:
    """Anomalies over the whole history, oldest first."""
    days = history.days
    estimated = history.estimated_days()
    anomalies: list[Anomaly] = []
    for usage_type, costs in history.costs_by_usage_type().items():
        for flag in _SeriesDetector(costs, days, thresholds).run():
            day = days[flag.index]
            actual, expected = round(costs[flag.index], 2), round(flag.expected, 2)
            anomalies.append(
                Anomaly(
                    usage_type=usage_type,
                    date=day,
                    actual=actual,
                    expected=expected,
                    impact=round(actual - expected, 2),
                    kind=flag.kind,
                    estimated=day in estimated,
                )
            )
    return sorted(anomalies, key=lambda a: (a.date, -a.impact, a.usage_type))


@dataclass
class _Flag:
    index: int
    kind: AnomalyKind
    expected: float


@dataclass(frozen=True)
class _Shift:
    """A level shift that may yet come back: what to restore if it does."""

    start: int
    previous_segment_start: int
    previous_creep_anchor: float | None


@dataclass(frozen=True)
class _Baseline:
    expected: float
    # Day-to-day wobble as a standard deviation of log(cost): costs are skewed (a day can
    # double but never go below zero), so the noise band is a factor above expected.
    log_sigma: float

    @property
    def band(self) -> float:
        return self.expected * math.expm1(NOISE_BAND_SIGMAS * self.log_sigma)


@dataclass
class _SeriesDetector:
    costs: Sequence[float]
    days: Sequence[dt.date]
    thresholds: Thresholds
    flags: dict[int, _Flag] = field(default_factory=dict)
    # Days left out of every baseline: spikes, so one bad day does not raise tomorrow's bar.
    outliers: set[int] = field(default_factory=set)
    segment_start: int = 0
    creep_anchor: float | None = None
    # log(actual/expected) on days judged normal: the usage type's usual wobble, which
    # outlives segment restarts (a new level is still as noisy as the old one).
    residuals: list[float] = field(default_factory=list)
    shift: _Shift | None = None

    def run(self) -> list[_Flag]:
        first_seen = next((i for i, cost in enumerate(self.costs) if cost > 0), None)
        if first_seen is None:
            return []
        self.segment_start = first_seen
        if first_seen >= NEW_USAGE_TYPE_MIN_HISTORY_DAYS and self.thresholds.exceeded(
            self.costs[first_seen], 0.0
        ):
            self.flags[first_seen] = _Flag(first_seen, "new_usage_type", 0.0)
        drops_in_a_row = 0
        for d in range(max(first_seen + 1, WARMUP_DAYS), len(self.costs)):
            drops_in_a_row = self._step(d, first_seen, drops_in_a_row)
        last = len(self.costs) - 1
        if last in self.flags and self.flags[last].kind == "spike":
            self.flags[last].kind = "jump"
        return sorted(self.flags.values(), key=lambda f: f.index)

    def _step(self, d: int, first_seen: int, drops_in_a_row: int) -> int:
        """Judge day ``d`` against what came before; returns the run of big drops so far."""
        factors = self._weekday_factors(d, first_seen)
        self._end_excursion_if_back(d, factors)
        baseline = self._baseline(d, factors)
        if baseline is None:
            return 0
        expected = baseline.expected
        actual = self.costs[d]
        if self.thresholds.exceeded(actual, expected) and actual - expected > baseline.band:
            yesterday = self.flags.get(d - 1)
            if yesterday is not None and yesterday.kind == "spike":
                # Two days up in a row: a new level, reported once, on its first day.
                yesterday.kind = "level_shift"
                self.outliers.discard(d - 1)
                self.shift = _Shift(d - 1, self.segment_start, self.creep_anchor)
                self._restart_segment(d - 1)
            else:
                self.flags[d] = _Flag(d, "spike", expected)
                self.outliers.add(d)
            return 0
        if expected > 0 and actual > 0:
            self.residuals.append(math.log(actual / expected))
        # Until the weekday factors are learnt a quiet weekend looks like a drop.
        big_drop = (
            factors is not _NO_FACTORS
            and self.thresholds.exceeded(expected, actual)
            and expected - actual > baseline.band
        )
        drops_in_a_row = drops_in_a_row + 1 if big_drop else 0
        if drops_in_a_row == DROP_DAYS_TO_RESTART:
            self.shift = None
            self._restart_segment(d - DROP_DAYS_TO_RESTART + 1)
        self._check_creep(d, factors, baseline.log_sigma)
        return drops_in_a_row

    def _end_excursion_if_back(self, d: int, factors: Sequence[float]) -> None:
        """When day ``d`` is back at the level from before the pending shift, the shift
        was an excursion: flag each of its days against the old baseline, leave them out
        of every baseline, and restore the old segment."""
        shift = self.shift
        if shift is None:
            return
        if d - shift.start > EXCURSION_MAX_DAYS:
            self.shift = None  # the new level has stood long enough: a shift after all
            return
        before = self._adjusted(
            range(max(shift.previous_segment_start, shift.start - LEVEL_WINDOW_DAYS), shift.start),
            factors,
        )
        if not before:
            return
        level = statistics.median(before)
        old = _Baseline(level * factors[self.days[d].weekday()], self._log_sigma(d, level, factors))
        actual = self.costs[d]
        if self.thresholds.exceeded(actual, old.expected) and actual - old.expected > old.band:
            return
        self.shift = None
        for t in range(shift.start, d):
            expected = (
                self.flags[t].expected
                if t == shift.start
                else level * factors[self.days[t].weekday()]
            )
            self.flags[t] = _Flag(t, "excursion", expected)
            self.outliers.add(t)
        self.segment_start = shift.previous_segment_start
        self.creep_anchor = shift.previous_creep_anchor

    def _restart_segment(self, start: int) -> None:
        self.segment_start = start
        self.creep_anchor = None

    def _weekday_factors(self, d: int, first_seen: int) -> list[float]:
        """Per weekday, cost relative to its week, learnt from days before ``d``."""
        ratios: list[list[float]] = [[] for _ in range(7)]
        earliest = max(first_seen + 3, d - 7 * SEASON_WINDOW_WEEKS)
        for t in range(earliest, d - 3):
            if t in self.outliers:
                continue
            week_mean = statistics.fmean(self.costs[t - 3 : t + 4])
            if week_mean > 0:
                ratios[self.days[t].weekday()].append(self.costs[t] / week_mean)
        if any(len(r) < MIN_SAMPLES_PER_WEEKDAY for r in ratios):
            return _NO_FACTORS
        factors = [statistics.median(r) for r in ratios]
        # Noise alone gives every weekday a slightly different median; keep the factors
        # only when they differ by more than that noise could explain.
        sigma = MAD_TO_SIGMA * statistics.median(
            abs(ratio - factor) for r, factor in zip(ratios, factors, strict=True) for ratio in r
        )
        standard_error = 1.25 * sigma / math.sqrt(min(len(r) for r in ratios))
        if max(factors) - min(factors) <= WEEKLY_PATTERN_SIGNIFICANCE * standard_error:
            return _NO_FACTORS
        mean = statistics.fmean(factors)
        return [f / mean for f in factors] if mean > 0 else _NO_FACTORS

    def _adjusted(self, days: range, factors: Sequence[float]) -> list[float]:
        """Weekday-adjusted costs of ``days``, outliers and never-billed weekdays left out."""
        values = []
        for t in days:
            factor = factors[self.days[t].weekday()]
            if t not in self.outliers and factor > 0:
                values.append(self.costs[t] / factor)
        return values

    def _baseline(self, d: int, factors: Sequence[float]) -> _Baseline | None:
        window = self._adjusted(range(max(self.segment_start, d - LEVEL_WINDOW_DAYS), d), factors)
        if not window:
            return None
        level = statistics.median(window)
        expected = level * factors[self.days[d].weekday()]
        return _Baseline(expected, self._log_sigma(d, level, factors))

    def _log_sigma(self, d: int, level: float, factors: Sequence[float]) -> float:
        """The usage type's day-to-day wobble: from the residuals of judged days once
        there are enough, else (early on, or for a new usage type) from everything seen
        so far around the current level, which errs on the side of a wider band."""
        recent = self.residuals[-RESIDUAL_WINDOW_DAYS:]
        if len(recent) >= MIN_RESIDUALS:
            return MAD_TO_SIGMA * statistics.median(abs(r) for r in recent)
        seen = self._adjusted(range(self.segment_start, d), factors)
        logs = [math.log(x / level) for x in seen if x > 0 and level > 0]
        return MAD_TO_SIGMA * statistics.median(abs(r) for r in logs) if logs else 0.0

    def _check_creep(self, d: int, factors: Sequence[float], log_sigma: float) -> None:
        if d - self.segment_start < CREEP_ANCHOR_DAYS:
            return
        if self.creep_anchor is None:
            first_weeks = self._adjusted(
                range(self.segment_start, self.segment_start + CREEP_ANCHOR_DAYS), factors
            )
            self.creep_anchor = statistics.median(first_weeks) if first_weeks else None
            return
        recent = self._adjusted(range(d - CREEP_WINDOW_DAYS + 1, d + 1), factors)
        if not recent or self.creep_anchor <= 0:
            return
        week_level = _trimmed_mean(recent)
        # A week's mean wobbles less than a day, but it still wobbles.
        noise = NOISE_BAND_SIGMAS * log_sigma * math.sqrt(2 / len(recent))
        if (
            self.thresholds.exceeded(week_level, self.creep_anchor)
            and math.log(week_level / self.creep_anchor) > noise
        ):
            expected = self.creep_anchor * factors[self.days[d].weekday()]
            if self.costs[d] > expected:
                self.flags[d] = _Flag(d, "creep", expected)
            self.creep_anchor = week_level


def _trimmed_mean(values: Sequence[float]) -> float:
    """Mean without the highest and lowest value: steadier than a median, yet one odd
    day cannot move it much."""
    if len(values) < 3:
        return statistics.fmean(values)
    return statistics.fmean(sorted(values)[1:-1])
