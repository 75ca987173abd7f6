"""Intervals calibrated on the customer's own backtest: what its served model's errors
were, not what its family assumes they are.

Every family's simulation (a Gaussian around the point path, or Prophet's) says how wide
its errors should be; on real meter data those widths were wrong both ways (make
accuracy: the served 80% interval held 58-86% of the held-back days, and narrower than
the errors late in the horizon where the combination's deviation is one number for every
step). So the training job measures the chosen model's errors on the backtest's windows
(each fitted only on the periods before its origin, as the served model is on its whole
history) and writes into the model what they say:

- **errors in proportion to the forecast**: a meter's errors grow with its consumption (a
  winter month's errors are larger than an autumn month's), so each error is taken
  relative to the forecast it missed (at least ``floor``, a tenth of the backtest's mean
  forecast, so a day forecast near zero does not make a huge relative error);
- **growing with the horizon**: ``|relative error| ~ a + b * step`` by least squares
  over every window's steps, ``b`` at least 0 (errors do not shrink with the horizon),
  ``a`` at least a quarter of the mean (no step is certain);
- **as wide as the errors' own quantile, not their root mean square**: each relative
  error divided by its step's profile ``a + b * step`` is a standardised error; the
  served interval's half-width (80%: ``width``) is that profile times the standardised
  errors' absolute ``width`` quantile (split conformal's rank, ``ceil((n + 1) * width)``
  of ``n``), drawn as the Gaussian that has that quantile. Meter errors are heavy-tailed
  (a household's hour is mostly a small miss and sometimes a kettle): a Gaussian of
  their root mean square is wider than their 80% where the tails are heavy and narrower
  where they are light; the quantile is what the interval is asked to cover;
- **as wide at each hour of the day as that hour's errors** (a model of more than one
  period a day): with one width for all 24 hours, make accuracy's households' night hours
  were covered 83-91% and their daytime 75-80%, the buildings' 80-82% and 73-76%. Each
  backtest point's period of the day (its phase) is counted from the served path's first
  period (the windows end where the history does); a phase's factor is the Gaussian's
  width covering ``width`` over the one covering the share of its standardised errors
  (with its neighbours' either side, :data:`PHASE_NEIGHBOURS`) inside the pooled quantile,
  that share drawn halfway toward ``width`` (:data:`PHASE_SHARE_WEIGHT`); the quantile is
  then taken again of the errors standardised by profile and factor, so the backtest is
  covered as before, overall. A share, not the phase's own quantile: a building shut
  before its first backtest window (that window's days forecast at its night level, 0.6
  kWh against 10) had daytime quantiles 15 times the pooled one. make accuracy's six
  hourly figures (coverage, mean wQL; before / after): London day-ahead 82.6% 0.3527 /
  82.9% 0.3523, 30 days 82.9% 0.3861 / 82.7% 0.3847; NSW 79.8% 0.4821 / 80.1% 0.4795,
  81.4% 0.5152 / 81.4% 0.5142; Cambridge 86.7% 0.0707 / 86.2% 0.0698, 77.8% 0.1791 / 77.2%
  0.1788 (every wQL lower, by 0.1-1.3%: near the right width a quantile loss changes
  little). Cambridge's day-ahead stays wide: its buildings' first day, not their hours;
- **and on working days and weekends apart** (:data:`WEEKEND_DAYS`): a building's
  Saturday is not its Tuesday (shut, a steady base load), and a household's weekend
  hours are its own too, so an hourly model's phases are the periods of the day of each
  kind of day, 48 factors laid out as ``by_phase``'s week of periods from the served
  path's first (Monday 00:00 UTC its period 0 of the week: the timestamps' own clock,
  as the holidays' days are). make accuracy's hourly figures (coverage, mean wQL;
  hours of the day alone / with the kind of day): London day-ahead 82.9% 0.3523 / 82.6%
  0.3518, 30 days 82.7% 0.3847 / 82.6% 0.3847; NSW 80.1% 0.4795 / 79.9% 0.4795, 81.4%
  0.5142 / 81.5% 0.5138; Cambridge 86.2% 0.0697 / 84.7% 0.0697 (its day-ahead is a
  Saturday), 77.2% 0.1788 / 77.1% 0.1789. Each period of the week its own (168 phases,
  its neighbours the hours either side): the same day-ahead, Cambridge's 30 days 76.7%;
- **times the backtest's own held-out shortfall** (:data:`HELD_OUT_FACTOR`): a
  calibration read off the errors it is then judged on covers less of the errors it has
  not seen (the backtest's windows are few, the profile and the quantile are fitted to
  them, and the future is not quite the windows' past). Measured across the fleet of
  make accuracy's three sets and both windows (the 424 backtests of 220 customers with
  enough points): calibrated on each backtest's earlier windows, the interval covered
  77.4% of its last window's 12,611 errors; 80% needed it 1.085 times as wide (the
  ratios' 80% quantile), so 1.08 (served, it is calibrated on one window more, which
  leaves it a little less short). The factor is the fleet's, a constant: one
  customer's three windows are too few to learn their own (left-one-window-out per
  customer made the mean wQL 31% worse).

Served: the point path is the family's, and the deviation of step ``h`` is
``(a + b * h) * by_phase[h % len(by_phase)] * max(|yhat_h|, floor)`` (no factor for a
daily model), drawn in the seeded simulation of :mod:`fleetcast_forecasters.gaussian` (so
the interval and the quantiles asked for come from the same draws, and the same request
gets the same answer). Past the backtest's
horizon the profile grows as the square root of the steps, as a random walk's spread
would. On a holiday whose effect the point path carries, the deviation is widened by
that effect (:func:`fleetcast_forecasters.gaussian.calibrated`).

What was measured and not kept (docs/model-families.md): absolute errors' root mean
square (the old combination's deviation) covered 58-84% on make accuracy's six windows;
the errors' own 10% and 90% quantiles (split conformal, each side's own and without the
profile) 42-75%, narrower than the future's errors; each side's own deviation, worse
than one for both; the relative errors' root mean square with the profile (kept until
2026-12-06) 67-84% daily and 91-92% of a household's hours (too wide: heavy tails); the
members' errors pooled (for a winner's curse: the served model is mostly the
combination, chosen whatever its error, so there is little of one) narrower still; a
concave profile (``sqrt`` or ``log1p`` of the step, or ``sqrt`` of the horizon's day),
which narrowed every set's first day where only the buildings' was too wide (Cambridge's
hourly day-ahead 87% to 80-84%, NSW's 80% to 77-79%, its wQL up to 2.3% higher); each
phase's own conformal quantile, drawn halfway toward the pooled one (Cambridge's 30-day
wQL 0.1791 to 0.1908, one building's week off); each side of the point its own width with the
profile and the held-out factor (the standardised errors' own 90% quantile below and
above, served as a two-piece Gaussian; 2026-12-07): NSW's hours 3% better, every daily
and every building's wQL worse, up to 18% (their backtests' skew does not carry over to
the window after them).

``model.json``: ``"calibration": {"steps": H, "profile": [a, b], "floor": f}`` beside
the family's own fields, and for a model of more than one period a day ``"by_phase"``,
the factor of each period of the week from the served path's first (a model trained
before 2026-12-07 has one of each period of the day; before 2026-12-06, none: one width
for every hour); a model without a calibration is served as its family simulates it.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
FIELD = "calibration"
# A day forecast near zero is not a huge relative error: at least this share of the
# backtest's mean forecast is the level an error is relative to.
FLOOR_SHARE = 0.1
# No step is certain: the profile's intercept is at least this share of the mean error.
MIN_INTERCEPT_SHARE = 0.25
# Fewer errors than this on the backtest say too little: the family's own interval.
MIN_POINTS = 14
# The served interval's width when the model does not say: Prophet's default, which every
# family keeps (gaussian and training's grid read it from here, the lowest module that
# serving and training share; gaussian imports this one).
INTERVAL_WIDTH = 0.8
# How much wider than the backtest's own quantile the interval is served: what the
# fleet's backtests needed to cover 80% of a window they were not calibrated on (module
# docstring).
HELD_OUT_FACTOR = 1.08
# A phase's share covered is counted with the phases this many either side of it: one
# hour's 90 backtest points (3 windows of 30 days) say little, and an hour's errors are
# like its neighbours'.
PHASE_NEIGHBOURS = 1
# How much of a phase's own share covered (the rest: ``width``) its width follows: its
# counted points weigh as much as a prior at the pooled width, so one window's misses of
# another kind (a building reopening, forecast at its shut level) do not set an hour's
# width alone.
PHASE_SHARE_WEIGHT = 0.5
# The days of the week (Monday 0) whose periods have their own phases: the weekend.
WEEKEND_DAYS = (5, 6)


def fit(
    actual: FloatArray,
    forecast: FloatArray,
    width: float = INTERVAL_WIDTH,
    periods_per_day: int = 1,
    first_of_week: int | None = None,
) -> dict[str, Any] | None:
    """The calibration of a model whose backtest forecast ``forecast`` (windows by steps,
    NaN where it forecast nothing) met ``actual`` (the same shape, NaN where there was no
    usable value), for a served interval of ``width``; None when too few points were
    scored or nothing was missed. The windows are the backtest's, back to back and ending
    at the history's last period (:class:`fleetcast_forecasters.candidates.BacktestPlan`),
    which places each step in the day of a model of ``periods_per_day`` periods, and in
    the week when ``first_of_week`` says which period of the week (Monday 00:00 its 0)
    the served path's first is (without it, the phases are the periods of the day)."""
    errors = actual - forecast
    scored = np.isfinite(errors)
    if int(scored.sum()) < MIN_POINTS:
        return None
    floor = FLOOR_SHARE * float(np.abs(forecast[scored]).mean())
    if not floor > 0:
        return None
    relative = errors[scored] / np.maximum(np.abs(forecast[scored]), floor)
    steps = np.broadcast_to(np.arange(errors.shape[1], dtype=np.float64), errors.shape)[scored]
    size = np.abs(relative)
    mean_size = float(size.mean())
    if not mean_size > 0:
        return None
    slope = 0.0
    if np.ptp(steps) > 0:
        slope = max(0.0, float(np.polyfit(steps, size, 1)[0]))
    intercept = max(float(mean_size - slope * steps.mean()), MIN_INTERCEPT_SHARE * mean_size)
    standardised = np.abs(relative) / (intercept + slope * steps)
    covered = _conformal(standardised, width)
    if not covered > 0:
        return None
    by_phase = None
    if periods_per_day > 1:
        kinds = _kinds_of_day(periods_per_day, first_of_week)
        phases = _phases(errors.shape, len(kinds))[scored]
        by_phase = _phase_factors(standardised <= covered, phases, kinds, periods_per_day, width)
        covered = _conformal(standardised / by_phase[phases], width)
    scale = HELD_OUT_FACTOR * covered / NormalDist().inv_cdf((1 + width) / 2)
    calibration: dict[str, Any] = {
        "steps": int(errors.shape[1]),
        "profile": [round(intercept * scale, 8), round(slope * scale, 8)],
        "floor": round(floor, 8),
    }
    if by_phase is not None:
        calibration["by_phase"] = [round(float(factor), 8) for factor in by_phase]
    return calibration


def _conformal(standardised: FloatArray, width: float) -> float:
    """Split conformal's ``width`` quantile: the ceil((n + 1) * width)-th smallest of n."""
    rank = min(standardised.shape[0], math.ceil((standardised.shape[0] + 1) * width)) - 1
    return float(np.partition(standardised, rank)[rank])


def _phases(shape: tuple[int, ...], periods_per_day: int) -> npt.NDArray[np.intp]:
    """Each backtest point's period of the day, counted from the served path's first
    period: window ``w`` of ``W`` starts ``(W - w) * steps`` periods before it."""
    windows, steps = shape
    before = (windows - np.arange(windows))[:, None] * steps
    return np.asarray((np.arange(steps)[None, :] - before) % periods_per_day, dtype=np.intp)


def _kinds_of_day(periods_per_day: int, first_of_week: int | None) -> npt.NDArray[np.intp]:
    """Of each phase (a period from the served path's first, over a week, or a day without
    ``first_of_week``), its kind of day: 1 on the weekend (:data:`WEEKEND_DAYS`), else 0."""
    if first_of_week is None:
        return np.zeros(periods_per_day, dtype=np.intp)
    week = 7 * periods_per_day
    day = (first_of_week + np.arange(week)) % week // periods_per_day
    return np.isin(day, WEEKEND_DAYS).astype(np.intp)


def _phase_factors(
    inside: npt.NDArray[np.bool_],
    phases: npt.NDArray[np.intp],
    kinds: npt.NDArray[np.intp],
    periods_per_day: int,
    width: float,
) -> FloatArray:
    """How much wider than the pooled width each phase's errors ask (``kinds``: each
    phase's kind of day, :func:`_kinds_of_day`): the share of the points of its period of
    the day on its kind of day (and its neighbours', :data:`PHASE_NEIGHBOURS`) ``inside``
    the pooled interval, drawn toward ``width`` (:data:`PHASE_SHARE_WEIGHT`), as the ratio
    of the Gaussian widths covering ``width`` and that share (bounded, whatever the
    phase's largest errors: the module docstring)."""
    # A phase's period of the day; its group, that period on its kind of day.
    of_day = np.arange(len(kinds)) % periods_per_day
    group = kinds * periods_per_day + of_day
    groups = 2 * periods_per_day
    near = range(-PHASE_NEIGHBOURS, PHASE_NEIGHBOURS + 1)
    own_counted = np.bincount(group[phases], minlength=groups).astype(np.float64)
    own_hits = np.bincount(group[phases], weights=inside, minlength=groups)
    # (neighbours within the kind of day: its periods of the day are a cycle)
    by_kind = (2, periods_per_day)
    counted = np.sum([np.roll(own_counted.reshape(by_kind), s, axis=1) for s in near], axis=0)
    hits = np.sum([np.roll(own_hits.reshape(by_kind), s, axis=1) for s in near], axis=0)
    share = np.divide(hits, counted, out=np.full(by_kind, width), where=counted > 0).ravel()
    share = PHASE_SHARE_WEIGHT * share + (1 - PHASE_SHARE_WEIGHT) * width
    normal = NormalDist()
    wanted = normal.inv_cdf((1 + width) / 2)
    factors = np.array([wanted / normal.inv_cdf((1 + s) / 2) for s in share])
    return np.asarray(factors[group], dtype=np.float64)


def deviations(calibration: dict[str, Any], yhat: FloatArray) -> FloatArray:
    """The errors' deviation at each step of the point path ``yhat``; ``ValueError`` for
    a calibration that is not one."""
    try:
        steps = int(calibration["steps"])
        intercept, slope = (float(v) for v in calibration["profile"])
        floor = float(calibration["floor"])
        by_phase = np.asarray(calibration.get("by_phase", []), dtype=np.float64)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the model's {FIELD} is not one: {error!r}") from None
    numbers = np.array([intercept, slope, floor])
    if (
        steps < 1
        or not np.isfinite(numbers).all()
        or (numbers < 0).any()
        or by_phase.ndim != 1
        or not (np.isfinite(by_phase) & (by_phase > 0)).all()
    ):
        raise ValueError(f"the model's {FIELD} is not one: {calibration!r}")
    ahead = np.arange(yhat.shape[0], dtype=np.float64)
    profile = intercept + slope * np.minimum(ahead, steps - 1)
    beyond = ahead >= steps
    profile[beyond] *= np.sqrt((ahead[beyond] + 1) / steps)
    if by_phase.size:
        profile *= by_phase[np.arange(yhat.shape[0]) % by_phase.size]
    deviation: FloatArray = profile * np.maximum(np.abs(yhat), floor)
    return deviation
