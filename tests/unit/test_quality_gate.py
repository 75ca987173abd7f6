"""The quality gate: when a new model counts as clearly worse than seasonal naive.

Metrics are computed from holdout values with the training container's own measures, so
each case is one a training job could report."""

from __future__ import annotations

import numpy as np
import pytest

from fleetcast_contracts.model_archive import HoldoutMetrics
from fleetcast_contracts.quality_gate import (
    EQUAL_ERROR_SHARE,
    holdout_level,
    passes_quality_gate,
    rejection_reason,
)
from fleetcast_training.evaluation import mae, smape, wape

# A week of a customer at 25 on weekdays and 12.5 at weekends.
PERIODIC = np.array([25, 25, 25, 25, 25, 12.5, 12.5])


def holdout(actual: np.ndarray, model: np.ndarray, naive: np.ndarray) -> HoldoutMetrics:
    return HoldoutMetrics(
        holdout_days=len(actual),
        smape=smape(actual, model),
        mae=mae(actual, model),
        naive_smape=smape(actual, naive),
        naive_mae=mae(actual, naive),
        wape=wape(actual, model),
        naive_wape=wape(actual, naive),
        windows=1,
    )


def test_a_model_within_float_noise_of_an_exact_naive_forecast_passes() -> None:
    # Given an exactly periodic holdout, which seasonal naive repeats exactly, and a model
    # off by its fit's last digits (sMAPE about 1e-05, as training measured it)
    metrics = holdout(PERIODIC, PERIODIC * (1 + 1e-5), PERIODIC)
    assert metrics.naive_smape == 0 and 0 < metrics.smape < 1e-4
    # Then the errors count as equal: the model may go live
    assert passes_quality_gate(metrics)


def test_a_model_clearly_off_an_exact_naive_forecast_is_rejected() -> None:
    # Given the same holdout and a model 5% off
    metrics = holdout(PERIODIC, PERIODIC * 1.05, PERIODIC)
    # Then it is clearly worse, and the reason says by how much
    assert not passes_quality_gate(metrics)
    assert "0.5% of the backtest's mean level 21.43" in rejection_reason(metrics)


def test_the_tolerance_is_a_share_of_the_series_own_level() -> None:
    # Given an exact naive forecast and models just inside and just outside the share
    inside = holdout(PERIODIC, PERIODIC * (1 + 0.9 * EQUAL_ERROR_SHARE), PERIODIC)
    outside = holdout(PERIODIC, PERIODIC * (1 + 1.1 * EQUAL_ERROR_SHARE), PERIODIC)
    # Then the level is the holdout's mean reading, and the share decides
    assert holdout_level(inside) == pytest.approx(PERIODIC.mean())
    assert passes_quality_gate(inside)
    assert not passes_quality_gate(outside)
    # And the same shapes at a hundred times the level decide the same way
    assert passes_quality_gate(holdout(100 * PERIODIC, 100 * PERIODIC * 1.0045, 100 * PERIODIC))


def test_a_tiny_forecast_on_zero_readings_is_not_a_200_percent_error() -> None:
    # Given a customer that uses nothing at weekends, naive exact, and a model that
    # forecasts a few watt-hours there (sMAPE's maximum, 2, on each of those days)
    actual = np.array([30, 30, 30, 30, 30, 0, 0], dtype=float)
    model = actual + np.array([0, 0, 0, 0, 0, 0.01, 0.01])
    metrics = holdout(actual, model, actual)
    assert metrics.smape > 0.5
    # Then the gate compares what the errors are, not their share of nothing
    assert passes_quality_gate(metrics)


def test_a_model_worse_than_naive_by_more_than_the_share_is_rejected_on_noisy_errors() -> None:
    # Given a noisy holdout where naive is 5% off
    rng = np.random.default_rng(0)
    actual = 500 + rng.normal(0, 25, 7)
    naive = actual * (1 + 0.05 * rng.choice([-1, 1], 7))
    level = float(np.abs(actual).mean())
    close = holdout(actual, naive + 0.5 * EQUAL_ERROR_SHARE * level, naive)
    far = holdout(actual, actual * 1.2, naive)
    # Then a model within the share of naive's error passes and one four times worse not
    assert close.mae - close.naive_mae <= EQUAL_ERROR_SHARE * holdout_level(close)
    assert passes_quality_gate(close)
    assert not passes_quality_gate(far)


def test_without_a_level_to_measure_by_only_equal_errors_pass() -> None:
    # Given an all-zero backtest (WAPE undefined), with a perfect naive forecast
    metrics = HoldoutMetrics(
        holdout_days=7, smape=1e-5, mae=1e-4, naive_smape=0, naive_mae=0, windows=2
    )
    # Then there is no scale to call the errors equal by
    assert holdout_level(metrics) == 0
    assert not passes_quality_gate(metrics)
    assert passes_quality_gate(metrics.model_copy(update={"smape": 0.0, "mae": 0.0}))
