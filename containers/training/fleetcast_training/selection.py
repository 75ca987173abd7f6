"""Every candidate scored on one customer's rolling-origin backtest, and the model it gets.

The rule, decided on ``make accuracy``'s real meter data (docs/model-families.md): the
customer is served the **combination** (the weighted mean of ETS, Theta, Prophet, the
seasonal median and the fleet, where each fitted: each family's weight for the model's
frequency in :mod:`fleetcast_contracts.families`; an hourly model's fleet weighs four
times the four others together) unless its backtest error
is worse than seasonal naive's by more than the quality gate's tolerance
(:data:`~fleetcast_contracts.quality_gate.EQUAL_ERROR_SHARE` of the backtest's mean level,
the rule registration applies); then the candidate of least backtest error, which may be
seasonal naive itself or the **naive blend** (half seasonal naive, half the combination:
:mod:`fleetcast_forecasters.naive_blend`). Choosing the best single candidate (or the best
few) per customer every time did worse on the held-back days than always combining (a
backtest of a few windows is noisy), and no customer is ever served a model the gate
would refuse: naive is a candidate.

A level shift at the end of the history (:mod:`fleetcast_training.level_shift`), which the
backtest's windows cannot see, leaves the members that cannot follow it out of the
combination and of what may be served; the gate then applies as above.

Errors are compared on the points every candidate forecast (and the customer had a usable
value for), pooled over the windows: WAPE, ``sum|F - A| / sum|A|``; between candidates of
one customer it ranks as MAE does. Where the candidates share no such point (a meter off
for weeks before the last usable days: seasonal naive has no last week to repeat at the
points the others forecast), the candidate that forecast the fewest usable points is left
out, then the next, until the rest share some (:func:`_comparable`): the customer is
served from what could be compared, and the backtest's ``why`` names what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.families import COMBINATION_WEIGHTS
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import Backtest, CandidateScore, HoldoutMetrics
from fleetcast_contracts.quality_gate import EQUAL_ERROR_SHARE
from fleetcast_forecasters import calibration, combination, naive_blend, seasonal_naive
from fleetcast_training.level_shift import LevelShift

FloatArray = npt.NDArray[np.float64]
NAIVE = seasonal_naive.KIND
COMBINATION = combination.KIND
NAIVE_BLEND = naive_blend.KIND
# The members of the combination (where they are candidates and fitted), each with its
# weight in the combination's weighted mean, by frequency.
COMBINED = COMBINATION_WEIGHTS


@dataclass(frozen=True)
class Candidate:
    kind: str
    backtest: FloatArray  # windows by steps; NaN where not forecast
    model: dict[str, Any] | None  # fitted on the whole history; None: could not be


@dataclass(frozen=True)
class Choice:
    kind: str
    model: dict[str, Any]
    backtest: Backtest
    metrics: HoldoutMetrics


@dataclass(frozen=True)
class _ScoredPoints:
    """The backtest's actual values at its scored points, pooled window after window (as
    ``actual[scored]`` orders them), and what every candidate's measures divide by: the
    same for all candidates, so taken once, not once per candidate."""

    scored: npt.NDArray[np.bool_]
    actual: FloatArray
    absolute: FloatArray  # |actual|
    volume: float
    # Each window's points in the pooled arrays, and their volume (None: no points, or
    # their volume is 0: the window has no WAPE).
    windows: list[slice]
    window_volumes: list[float | None]

    @classmethod
    def of(cls, actual: FloatArray, scored: npt.NDArray[np.bool_]) -> _ScoredPoints:
        pooled = actual[scored]
        absolute = np.abs(pooled)
        ends = np.cumsum(scored.sum(axis=1)).tolist()
        windows = [slice(start, end) for start, end in zip([0, *ends[:-1]], ends, strict=True)]
        volumes: list[float | None] = []
        for window in windows:
            volume = float(absolute[window].sum())
            volumes.append(volume if window.stop > window.start and volume != 0 else None)
        return cls(scored, pooled, absolute, float(absolute.sum()), windows, volumes)

    def measures(self, backtest: FloatArray, scale: float | None) -> dict[str, Any]:
        """The pooled measures of a candidate's ``backtest`` (windows by steps) and its
        WAPE on each window."""
        forecast = backtest[self.scored]
        error = np.abs(forecast - self.actual)
        total = self.absolute + np.abs(forecast)
        ratio = np.divide(2 * error, total, out=np.zeros_like(total), where=total > 0)
        mae = float(error.mean())
        return {
            "wape": float(error.sum()) / self.volume if self.volume > 0 else None,
            "mae": mae,
            "smape": float(ratio.mean()),
            "rmse": float(np.sqrt((error**2).mean())),
            "mase": mae / scale if scale else None,
            "window_wapes": [
                None if volume is None else float(error[window].sum()) / volume
                for window, volume in zip(self.windows, self.window_volumes, strict=True)
            ],
        }


def _rank_error(score: CandidateScore) -> float:
    return score.wape if score.wape is not None else score.mae


def choose(
    candidates: list[Candidate],
    actual: FloatArray,
    origins: list[datetime],
    scale: float | None,
    common: dict[str, Any],
    periods_per_day: int,
    servable: set[str] | None = None,
    shift: LevelShift | None = None,
) -> Choice | None:
    """The customer's model: ``candidates`` (seasonal naive among them) with their
    backtests over ``actual`` (windows by steps, NaN where there is no usable value);
    ``scale`` MASE's (the in-sample seasonal-naive MAE before the first origin),
    ``common`` the fields every served model's JSON carries. None when no candidate has
    a model or no point of the backtest is scored. Only kinds in ``servable`` (all, if
    None) are served or combined; the others (seasonal naive, when it is left out of the
    candidates) are scored as the yardstick. With a level ``shift`` at the end of the
    history, the members that cannot follow it are neither combined nor served
    (:mod:`fleetcast_training.level_shift`), unless no member can."""
    fitted, unscored = _comparable(
        [c for c in candidates if c.model is not None], np.isfinite(actual)
    )
    allowed = servable if servable is not None else {c.kind for c in fitted} | {COMBINATION}
    weights = COMBINED[Frequency.of_periods_per_day(periods_per_day)]
    members, allowed, left_out, shift = _members(fitted, allowed, shift, weights)
    naive_fit = next((c for c in fitted if c.kind == NAIVE and c.kind in allowed), None)
    fitted += _combinations(members, naive_fit, weights)
    if not fitted:
        return None
    scored = np.isfinite(actual)
    for candidate in fitted:
        scored &= np.isfinite(candidate.backtest)
    windows = int(scored.any(axis=1).sum())
    if not windows:
        return None
    points = _ScoredPoints.of(actual, scored)
    scores = [
        CandidateScore(model_kind=c.kind, **points.measures(c.backtest, scale)) for c in fitted
    ]
    by_kind = {score.model_kind: score for score in scores}
    ranked = sorted(scores, key=_rank_error)
    decided = _decide(by_kind, ranked, allowed, float(points.absolute.mean()))
    if decided is None:
        return None
    chosen, why = decided
    if unscored:
        why += f"; {', '.join(unscored)} left out: no backtest point shared with the others"
    model = _model(chosen, fitted, by_kind, common, members, naive_fit, weights)
    served_backtest = next(c.backtest for c in fitted if c.kind == chosen)
    interval = calibration.fit(
        actual,
        np.where(scored, served_backtest, np.nan),
        float(common.get("interval_width", calibration.INTERVAL_WIDTH)),
        periods_per_day,
        _first_of_week(common, periods_per_day),
    )
    if interval is not None:
        model = {**model, calibration.FIELD: interval}
    if shift is not None:
        why += f"; {shift.describe()}" + (
            f", which {', '.join(left_out)} cannot follow: left out" if left_out else ""
        )
    backtest = Backtest(
        horizon=actual.shape[1],
        windows=windows,
        origins=origins,
        chosen=chosen,
        runner_up=next((s.model_kind for s in ranked if s.model_kind != chosen), None),
        why=why,
        level_shift_days=None if shift is None else shift.days,
        candidates=ranked,
    )
    metrics = _metrics(
        by_kind[chosen], by_kind.get(NAIVE), actual.shape[1], windows, periods_per_day
    )
    return Choice(chosen, model, backtest, metrics)


def _comparable(
    fitted: list[Candidate], usable: npt.NDArray[np.bool_]
) -> tuple[list[Candidate], list[str]]:
    """The ``fitted`` candidates that share at least one ``usable`` point of the backtest,
    and the kinds left out so that they do: while the candidates share none, the one that
    forecast the fewest usable points goes (the first of them, in ``fitted``'s order, on a
    tie). All of them, and nothing left out, when they share a point, or no point is usable."""
    kept = list(fitted)
    left_out: list[str] = []
    if not usable.any():
        return kept, left_out
    while kept:
        forecast = [np.isfinite(c.backtest) & usable for c in kept]
        if np.logical_and.reduce(forecast).any():
            break
        fewest = int(np.argmin([points.sum() for points in forecast]))
        left_out.append(kept.pop(fewest).kind)
    return kept, left_out


def _members(
    fitted: list[Candidate],
    allowed: set[str],
    shift: LevelShift | None,
    weights: dict[str, float],
) -> tuple[list[Candidate], set[str], list[str], LevelShift | None]:
    """The combination's members (the kinds ``weights`` weighs) among the ``fitted``
    candidates, the kinds still ``allowed``, those left out for the level ``shift`` (and
    the shift, None when no member can follow it: then it is ignored)."""
    left_out: list[str] = []
    if shift is not None:
        models = {c.kind: c.model for c in fitted if c.kind in weights and c.kind in allowed}
        follow = shift.followers(models)
        if follow:
            left_out = sorted(set(models) - follow)
            allowed = set(allowed) - set(left_out)
        else:
            shift = None
    members = [c for c in fitted if c.kind in weights and c.kind in allowed]
    return members, allowed, left_out, shift


def _combinations(
    members: list[Candidate], naive_fit: Candidate | None, weights: dict[str, float]
) -> list[Candidate]:
    """The combination of two ``members`` or more (their mean, weighted by ``weights``)
    and its blend with seasonal naive (``naive_fit``), as candidates with no model of
    their own."""
    if len(members) < 2:
        return []
    mean = np.average(
        [m.backtest for m in members], axis=0, weights=[weights[m.kind] for m in members]
    )
    made = [Candidate(COMBINATION, mean, None)]
    if naive_fit is not None:
        weight = naive_blend.NAIVE_WEIGHT
        made.append(Candidate(NAIVE_BLEND, weight * naive_fit.backtest + (1 - weight) * mean, None))
    return made


def _decide(
    by_kind: dict[str, CandidateScore],
    ranked: list[CandidateScore],
    allowed: set[str],
    level: float,
) -> tuple[str, str] | None:
    """The kind served and why: the combination unless seasonal naive beat it by more than
    the gate's tolerance of the backtest's mean ``level``; then the least error."""
    naive = by_kind.get(NAIVE)
    choosable = [s for s in ranked if s.model_kind in allowed | {COMBINATION, NAIVE_BLEND}]
    if not choosable:
        return None
    tolerance = EQUAL_ERROR_SHARE * level
    if COMBINATION in by_kind and (
        naive is None or by_kind[COMBINATION].mae - naive.mae <= tolerance
    ):
        return COMBINATION, "the combination, not worse than seasonal naive on the backtest"
    return choosable[0].model_kind, "the least backtest error" + (
        " (the combination was worse than seasonal naive)" if COMBINATION in by_kind else ""
    )


def _metrics(
    served: CandidateScore,
    naive: CandidateScore | None,
    horizon: int,
    windows: int,
    periods_per_day: int,
) -> HoldoutMetrics:
    """The served candidate's backtest measures beside seasonal naive's (its own, when
    naive was not scored)."""
    baseline = naive or served
    return HoldoutMetrics(
        holdout_days=max(1, horizon // periods_per_day),
        windows=windows,
        smape=served.smape,
        mae=served.mae,
        naive_smape=baseline.smape,
        naive_mae=baseline.mae,
        wape=served.wape,
        rmse=served.rmse,
        mase=served.mase,
        naive_wape=baseline.wape,
        naive_rmse=baseline.rmse,
        naive_mase=baseline.mase,
    )


def _model(
    chosen: str,
    fitted: list[Candidate],
    by_kind: dict[str, CandidateScore],
    common: dict[str, Any],
    members: list[Candidate],
    naive_fit: Candidate | None,
    member_weights: dict[str, float],
) -> dict[str, Any]:
    """The chosen candidate's model: a fitted family's own, or a combination (or naive
    blend) of ``members`` (and ``naive_fit``) as :func:`choose` scored it."""
    if chosen not in (COMBINATION, NAIVE_BLEND):
        model = next(c.model for c in fitted if c.kind == chosen)
        assert model is not None
        return model
    weights = [member_weights[c.kind] for c in members]
    written: list[dict[str, Any]] = [
        {"kind": c.kind, "model": c.model, **({"weight": w} if w != 1 else {})}
        for c, w in zip(members, weights, strict=True)
    ]
    if chosen == NAIVE_BLEND:
        assert naive_fit is not None
        share = (1 - naive_blend.NAIVE_WEIGHT) / sum(weights)
        written = [
            {"kind": NAIVE, "model": naive_fit.model, "weight": naive_blend.NAIVE_WEIGHT},
            *({**member, "weight": share * w} for member, w in zip(written, weights, strict=True)),
        ]
    sigma = by_kind[chosen].rmse
    return {
        "kind": chosen,
        "members": written,
        "sigma": sigma if np.isfinite(sigma) else 0.0,
        **common,
    }


def _first_of_week(common: dict[str, Any], periods_per_day: int) -> int | None:
    """Which period of the week (Monday 00:00 its 0) the served path's first is, the
    period after ``common``'s last history (None for a daily model: it has no phases)."""
    if periods_per_day <= 1 or "last_history" not in common:
        return None
    frequency = Frequency.of_periods_per_day(periods_per_day)
    last = np.datetime64(common["last_history"], "s").astype(np.int64)
    return frequency.period_of_week(int(last) // frequency.period_seconds + 1)
