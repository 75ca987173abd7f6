"""A day's interval and quantiles are the same whatever period was asked for (issue 40:
the same day was 605.18 at period=7 and 604.5 at period=14, the seed being the request's,
so two screens disagreed): every family draws per model version, a day's draws the first
days of one simulation, in the API and in the run's export alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_forecasters_holidays import RUN_ID, dipping, trained

from fleetcast_forecasters import calibration
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.forecast import forecast_seed

QUANTILES = (0.1, 0.5, 0.9)


@pytest.fixture(scope="module")
def history():  # type: ignore[no-untyped-def]
    return dipping("2022-01-01", "2023-12-31")


@pytest.mark.parametrize("candidates", ["prophet", "seasonal_naive", "ets", "ets,theta"])
def test_the_same_days_bounds_at_period_7_and_period_14(
    tmp_path: Path, history, candidates: str
) -> None:
    # Given a customer's model of one family, served as the endpoint compiles it, with the
    # interval its backtest calibrated (served in place of the family's own)
    model_json, kind = trained(tmp_path, candidates, None, history)
    assert calibration.FIELD in json.loads(model_json), model_json[:500]
    forecaster = compile_archive(model_json, kind, "D")
    seed = forecast_seed(RUN_ID)
    # When its forecast is asked for 7 days and for 14
    week = forecaster.forecast(7, seed, QUANTILES)
    fortnight = forecaster.forecast(14, seed, QUANTILES)
    # Then the first week's interval and quantiles are the same numbers in both
    assert week.yhat_lower is not None and fortnight.yhat_lower is not None
    assert week.yhat_upper is not None and fortnight.yhat_upper is not None
    np.testing.assert_array_equal(week.yhat_lower, fortnight.yhat_lower[:7])
    np.testing.assert_array_equal(week.yhat_upper, fortnight.yhat_upper[:7])
    assert week.quantile_values is not None and fortnight.quantile_values is not None
    np.testing.assert_array_equal(week.quantile_values, fortnight.quantile_values[:, :7])
    # And so are a single day's, and the export's (compiled for its own 30-day horizon)
    day = forecaster.forecast(1, seed, QUANTILES)
    assert day.yhat_lower is not None
    np.testing.assert_array_equal(day.yhat_lower, week.yhat_lower[:1])
    exported = compile_archive(model_json, kind, "D", 30, one_period=False).forecast(30, seed)
    assert exported.yhat_lower is not None and exported.yhat_upper is not None
    np.testing.assert_allclose(exported.yhat_lower[:14], fortnight.yhat_lower, rtol=1e-12)
    np.testing.assert_allclose(exported.yhat_upper[:14], fortnight.yhat_upper, rtol=1e-12)


def test_the_seed_is_the_model_versions_alone() -> None:
    assert forecast_seed(RUN_ID) == forecast_seed(RUN_ID)
    assert forecast_seed(RUN_ID) != forecast_seed("q0000000905-20260102t120000")
