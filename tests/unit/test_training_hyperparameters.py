"""SageMaker's string hyperparameters, parsed and checked before any training starts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleetcast_contracts.families import CANDIDATE_KINDS
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.training import HYPERPARAMETER_DEFAULTS
from fleetcast_training.hyperparameters import Hyperparameters, InvalidHyperparametersError

RUN_ID = "q0000000904-20260101t120000"


def test_defaults_fill_in_everything_but_the_run_id():
    # Given only a run id, when parsed
    parsed = Hyperparameters.parse({"run_id": RUN_ID})
    # Then every documented default applies
    assert parsed.model_dump() == {
        "run_id": RUN_ID,
        "holdout_days": 7,
        "min_rows": 28,
        "frequency": "D",
        "seasonality_mode": "additive",
        "yearly_seasonality": "auto",
        "weekly_seasonality": "auto",
        "daily_seasonality": "auto",
        "uncertainty_samples": 1000,
        "candidates": CANDIDATE_KINDS,
        "backtest_windows": 3,
        "workers": 0,
        "default_holiday_country": "",
        "forecast_export_days": 30,
    }
    assert set(HYPERPARAMETER_DEFAULTS) == set(parsed.model_dump()) - {"run_id"}
    assert (parsed.holdout_rows, parsed.season, parsed.season_rows) == (7, timedelta(days=7), 7)
    assert parsed.export_periods == 30


def test_strings_become_typed_values():
    # Given SageMaker's strings, when parsed
    parsed = Hyperparameters.parse(
        {
            "run_id": RUN_ID,
            "frequency": "H",
            "holdout_days": "2",
            "min_rows": "100",
            "yearly_seasonality": "false",
            "weekly_seasonality": "true",
            "daily_seasonality": "6",
            "candidates": "prophet, ets",
            "backtest_windows": "2",
            "workers": "3",
            "sagemaker_region": '"eu-west-1"',
        }
    )
    # Then hourly is the one frequency type (pandas 3's alias "h" on it), and the
    # seasonalities as Prophet takes them
    assert parsed.frequency is Frequency.HOURLY and parsed.frequency.pandas_alias == "h"
    assert (parsed.holdout_rows, parsed.season_rows) == (48, 168)
    assert (parsed.yearly_seasonality, parsed.weekly_seasonality) == (False, True)
    assert parsed.daily_seasonality == 6
    assert parsed.candidates == ("ets", "prophet")
    assert parsed.backtest_windows == 2
    assert parsed.worker_count(cpus=8) == 3
    assert Hyperparameters.parse({"run_id": RUN_ID}).worker_count(cpus=8) == 8


def test_every_problem_is_named_at_once():
    # Given several bad values, when parsed
    with pytest.raises(InvalidHyperparametersError) as raised:
        Hyperparameters.parse(
            {"run_id": RUN_ID, "holdout_days": "0", "uncertainty_samples": "-1", "workers": "x"}
        )
    # Then the message lists each of them
    message = str(raised.value)
    assert "holdout_days='0'" in message
    assert "uncertainty_samples='-1'" in message
    assert "workers='x'" in message


def test_rows_required_cover_the_holdout_and_a_season_before_it():
    # Given the default min_rows of 28
    daily = Hyperparameters.parse({"run_id": RUN_ID})
    hourly = Hyperparameters.parse({"run_id": RUN_ID, "frequency": "H"})
    stricter = Hyperparameters.parse({"run_id": RUN_ID, "frequency": "H", "min_rows": "500"})
    # Then daily data needs 28 rows, hourly a week held out plus a season (a week of
    # hours) before it: 168 + 168
    assert daily.required_rows == 28
    assert hourly.required_rows == 336
    assert stricter.required_rows == 500
