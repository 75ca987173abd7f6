"""The quality gate: a new model worse than seasonal naive is recorded but not made live
(registration keeps the customer's live model instead, and a customer's first model
follows the same rule).

The rule, in one function (:func:`passes_quality_gate`). A model, scored on a
rolling-origin backtest, is *worse* when its backtest mean absolute error is more than
:data:`EQUAL_ERROR_SHARE` of the backtest's mean level above seasonal naive's on the same
points: no ratio, since seasonal naive is one of training's candidates and every customer
has a model at least that good.

Two errors closer than that are equal. A ratio of errors means nothing when naive's error is
0 (an exactly periodic series, which seasonal naive repeats exactly): any model's error,
1e-05 from a float's last digits, is then "infinitely worse" and the customer kept a stale
model for ever. sMAPE also jumps to its maximum on a zero reading whatever the forecast
(0.001 against 0 is 200%), while absolute errors are as small as the forecast's miss. So
the tolerance is on absolute errors, measured against the series' own scale.
"""

from __future__ import annotations

from fleetcast_contracts.model_archive import HoldoutMetrics

# Half a percent of the series' mean level: what the meters themselves cannot tell apart
# (an accuracy class 0.5 meter is within ±0.5%, a household class 1 meter within ±1%),
# and far above the fits' own noise (about 1e-4 of the level for an exactly periodic
# series), so no forecaster would prefer one model over another for it.
EQUAL_ERROR_SHARE = 0.005


def holdout_level(metrics: HoldoutMetrics) -> float:
    """The holdout's mean absolute reading: MAE over WAPE (sum|F - A| / n over
    sum|F - A| / sum|A|). 0 when it cannot be told: an all-zero holdout (WAPE undefined),
    a perfect forecast (both 0: nothing to compare)."""
    if metrics.wape is None or metrics.wape <= 0:
        return 0.0
    return metrics.mae / metrics.wape


def passes_quality_gate(metrics: HoldoutMetrics) -> bool:
    """False when the model is worse than seasonal naive (the rule is this module's
    docstring)."""
    tolerance = EQUAL_ERROR_SHARE * holdout_level(metrics)
    return metrics.mae - metrics.naive_mae <= tolerance


def rejection_reason(metrics: HoldoutMetrics) -> str:
    """Why :func:`passes_quality_gate` refused the model, in the registry's words."""
    return (
        f"backtest mean absolute error {metrics.mae:.4g} over {metrics.windows} windows is "
        f"over seasonal naive's {metrics.naive_mae:.4g} by more than "
        f"{EQUAL_ERROR_SHARE:.1%} of the backtest's mean level {holdout_level(metrics):.4g}"
    )
