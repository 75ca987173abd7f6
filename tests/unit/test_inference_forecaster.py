"""The container's forecaster gives Prophet's own numbers without Prophet."""

from __future__ import annotations

import functools
import json
import logging
import math

import numpy as np
import pandas as pd
import pytest
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_json

from fleetcast_forecasters.forecast import simulated_periods
from fleetcast_forecasters.prophet_compile import compile_model
from fleetcast_forecasters.prophet_forecaster import (
    ProphetForecaster,
    UnsupportedModelError,
    forecast_seed,
    row_quantiles,
    standard_draws,
    unit_trend_changes,
)

HISTORY_DAYS = 120

# Prophet 1.5 still calls pandas APIs that pandas 3 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*")


def consumption(days: int, seed: int = 0) -> pd.DataFrame:
    """A daily series with a trend, a weekly wave and noise, like a customer's readings."""
    day = np.arange(days)
    rng = np.random.default_rng(seed)
    y = 700 + 0.8 * day + 90 * np.sin(2 * np.pi * day / 7) + rng.normal(0, 12, days)
    return pd.DataFrame({"ds": pd.date_range("2022-03-01", periods=days, freq="D"), "y": y})


def fit(history: pd.DataFrame, **options: object) -> Prophet:
    logging.getLogger("cmdstanpy").disabled = True
    return Prophet(**options).fit(history)  # type: ignore[arg-type]


MODEL_OPTIONS = {
    "multiplicative-weekly": {
        "seasonality_mode": "multiplicative",
        "yearly_seasonality": False,
        "daily_seasonality": False,
    },
    "defaults": {},
    "flat-growth": {"growth": "flat"},
    "minmax-no-seasonality": {
        "scaling": "minmax",
        "weekly_seasonality": False,
        "yearly_seasonality": False,
        "daily_seasonality": False,
    },
    "mixed-modes": {"weekly_seasonality": False, "interval_width": 0.95},
}


@pytest.fixture(scope="module")
def model_jsons() -> dict[str, str]:
    history = consumption(HISTORY_DAYS)
    jsons = {}
    for variant, options in MODEL_OPTIONS.items():
        model = Prophet(**options)  # type: ignore[arg-type]
        if variant == "mixed-modes":
            model.add_seasonality("weekly", period=7, fourier_order=3, mode="multiplicative")
            model.add_seasonality("monthly", period=30.5, fourier_order=4, mode="additive")
        logging.getLogger("cmdstanpy").disabled = True
        jsons[variant] = model_to_json(model.fit(history))
    return jsons


def prophet_forecast(model_json: str, period: int, seed: int, freq: str = "D") -> pd.DataFrame:
    """What the public sample's container answers: Prophet.predict on the future dates;
    fleetcast's are the first ``period`` of a forecast of simulated_periods(period), so
    that a day's interval is the same whatever the period (issue 40)."""
    return _prophet_predict(model_json, simulated_periods(period), seed, freq).iloc[:period]


@functools.lru_cache(maxsize=8)
def _prophet_predict(model_json: str, periods: int, seed: int, freq: str) -> pd.DataFrame:
    model = model_from_json(model_json)
    future = model.make_future_dataframe(periods=periods, freq=freq, include_history=False)
    np.random.seed(seed)
    return model.predict(future)


@pytest.mark.parametrize("variant", MODEL_OPTIONS)
@pytest.mark.parametrize("period", [1, 2, 7, 60])
def test_forecast_equals_prophet_predict(
    model_jsons: dict[str, str], variant: str, period: int
) -> None:
    # Given a fitted model and Prophet's own forecast with the global random state seeded
    model_json = model_jsons[variant]
    expected = prophet_forecast(model_json, period, seed=20240607)

    # When the container's forecaster forecasts with the same seed
    forecast = compile_model(model_json, "D").forecast(period, seed=20240607)

    # Then dates, yhat and the intervals are Prophet's
    assert forecast.yhat_lower is not None and forecast.yhat_upper is not None
    np.testing.assert_array_equal(forecast.dates, expected["ds"].to_numpy(dtype="datetime64[ns]"))
    np.testing.assert_allclose(forecast.yhat, expected["yhat"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(forecast.yhat_lower, expected["yhat_lower"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(forecast.yhat_upper, expected["yhat_upper"], rtol=0, atol=1e-6)


def test_yhat_equals_the_fitted_model_before_serialisation() -> None:
    # Given a model still in memory after fitting
    model = fit(consumption(HISTORY_DAYS, seed=3), yearly_seasonality=False)
    future = model.make_future_dataframe(periods=14, include_history=False)

    # When it is forecast directly by Prophet and by the container from its JSON
    expected = model.predict(future)
    forecast = compile_model(model_to_json(model), "D").forecast(14, seed=1)

    # Then yhat agrees
    np.testing.assert_allclose(forecast.yhat, expected["yhat"], rtol=0, atol=1e-6)


def test_several_parameter_draws_are_sampled_like_prophet(model_jsons: dict[str, str]) -> None:
    # Given a model carrying three parameter sets, as an MCMC fit does
    document = json.loads(model_jsons["defaults"])
    params = document["params"]
    for name in ("k", "m", "sigma_obs"):
        params[name] = [[params[name][0][0] * scale] for scale in (0.9, 1.0, 1.1)]
    for name in ("delta", "beta"):
        params[name] = [[value * scale for value in params[name][0]] for scale in (0.9, 1.0, 1.1)]
    params["lp__"] = [[0.0]] * 3
    document["mcmc_samples"] = 3
    model_json = json.dumps(document)

    # When both forecast it
    expected = prophet_forecast(model_json, 10, seed=7)
    forecast = compile_model(model_json, "D").forecast(10, seed=7)

    # Then the point forecast is the mean over draws and the intervals pool them all
    assert forecast.yhat_lower is not None and forecast.yhat_upper is not None
    np.testing.assert_allclose(forecast.yhat, expected["yhat"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(forecast.yhat_lower, expected["yhat_lower"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(forecast.yhat_upper, expected["yhat_upper"], rtol=0, atol=1e-6)


def test_same_request_same_answer_and_seeds_differ_by_request(model_jsons: dict[str, str]) -> None:
    # Given a compiled model and the seeds of two requests
    forecaster = compile_model(model_jsons["defaults"], "D")
    seed = forecast_seed("q0000000900-20240101t000000")

    # When the same request is answered twice
    first, second = forecaster.forecast(7, seed), forecaster.forecast(7, seed)

    # Then the answers are identical, and another model version gets another seed
    assert first.yhat_lower is not None and second.yhat_lower is not None
    np.testing.assert_array_equal(first.yhat_lower, second.yhat_lower)
    assert seed == forecast_seed("q0000000900-20240101t000000")
    assert seed != forecast_seed("q0000000901-20240102t000000")


def test_models_forecast_with_one_seed_share_its_draws_but_not_their_intervals(
    model_jsons: dict[str, str],
) -> None:
    # Given two customers' models of one run, forecast with the run's seed
    seed = forecast_seed("q0000000900-20240101t000000")
    first = compile_model(model_jsons["defaults"], "D").forecast(14, seed)
    other = compile_model(model_jsons["mixed-modes"], "D").forecast(14, seed)
    # Then each is Prophet's own interval for that seed (the other tests), and the two
    # differ: the draws are scaled by each model's own noise and trend changes
    assert first.yhat_lower is not None and other.yhat_lower is not None
    assert not np.allclose(first.yhat_lower - first.yhat, other.yhat_lower - other.yhat)


def test_no_uncertainty_samples_gives_no_intervals(model_jsons: dict[str, str]) -> None:
    # Given a model fitted with uncertainty_samples=0
    document = json.loads(model_jsons["defaults"])
    document["uncertainty_samples"] = 0

    # When it is forecast
    forecast = compile_model(json.dumps(document), "D").forecast(3, seed=1)

    # Then there are no intervals, as from Prophet
    assert forecast.yhat_lower is None and forecast.yhat_upper is None
    assert forecast.yhat.shape == (3,)


def test_hourly_model_steps_by_the_metadata_frequency() -> None:
    # Given a model fitted on hourly readings
    hours = pd.date_range("2024-01-01", periods=24 * 10, freq="h")
    day = np.arange(len(hours)) / 24
    history = pd.DataFrame({"ds": hours, "y": 50 + 10 * np.sin(2 * np.pi * day)})
    model_json = model_to_json(fit(history, weekly_seasonality=False, yearly_seasonality=False))

    # When it is forecast 5 periods with frequency "h"
    forecast = compile_model(model_json, "h").forecast(5, seed=1)
    expected = prophet_forecast(model_json, 5, seed=1, freq="h")

    # Then the dates are the next 5 hours and yhat is Prophet's
    assert str(forecast.dates[0]) == "2024-01-11T00:00:00.000000000"
    np.testing.assert_allclose(forecast.yhat, expected["yhat"], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"growth": "logistic"}, "logistic growth"),
        ({"extra_regressors": [["temperature"], {"temperature": {}}]}, "extra regressors"),
    ],
)
def test_models_a_period_cannot_feed_are_refused(
    model_jsons: dict[str, str], change: dict[str, object], reason: str
) -> None:
    # Given a model that needs more than a period to forecast
    document = json.loads(model_jsons["defaults"]) | change

    # When it is compiled, then it is refused with the reason
    with pytest.raises(UnsupportedModelError, match=reason):
        compile_model(json.dumps(document), "D")


def test_conditional_seasonality_is_refused(model_jsons: dict[str, str]) -> None:
    # Given a model whose weekly seasonality applies only where a column is true
    document = json.loads(model_jsons["multiplicative-weekly"])
    document["seasonalities"][1]["weekly"]["condition_name"] = "is_summer"

    # When it is compiled, then it is refused naming the column
    with pytest.raises(UnsupportedModelError, match="is_summer"):
        compile_model(json.dumps(document), "D")


@pytest.mark.parametrize(
    ("model_json", "frequency", "message"),
    [
        ("not json", "D", "not JSON"),
        ("[1, 2]", "D", "not an object"),
        ('{"growth": "linear"}', "D", "not a fitted Prophet model"),
    ],
)
def test_malformed_models_raise_value_error(model_json: str, frequency: str, message: str) -> None:
    # When something that is not a fitted model is compiled, then it says so
    with pytest.raises(ValueError, match=message):
        compile_model(model_json, frequency)


@pytest.mark.parametrize("frequency", ["MS", "W-SUN", "2D"])
def test_other_frequencies_step_like_make_future_dataframe(
    model_jsons: dict[str, str], frequency: str
) -> None:
    # Given Prophet's future dates for a calendar frequency
    expected = prophet_forecast(model_jsons["defaults"], 6, seed=1, freq=frequency)

    # When the container forecasts with that frequency, then it has the same dates and yhat
    forecast = compile_model(model_jsons["defaults"], frequency).forecast(6, seed=1)
    np.testing.assert_array_equal(forecast.dates, expected["ds"].to_numpy(dtype="datetime64[ns]"))
    np.testing.assert_allclose(forecast.yhat, expected["yhat"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("frequency", ["fortnightly", "0D"])
def test_unusable_frequency_raises_value_error(model_jsons: dict[str, str], frequency: str) -> None:
    with pytest.raises(ValueError, match=f"frequency '{frequency}'"):
        compile_model(model_jsons["defaults"], frequency)


def test_period_outside_the_horizon_is_refused(model_jsons: dict[str, str]) -> None:
    forecaster = compile_model(model_jsons["defaults"], "D", horizon=30)
    with pytest.raises(ValueError, match="1 to 30"):
        forecaster.forecast(31, seed=1)


def prophet_samples(model_json: str, period: int, seed: int) -> np.ndarray:
    """Prophet's own posterior predictive samples of yhat, one row per future date: the
    first ``period`` of simulated_periods(period)."""
    model = model_from_json(model_json)
    future = model.make_future_dataframe(periods=simulated_periods(period), include_history=False)
    np.random.seed(seed)
    samples: np.ndarray = model.predictive_samples(future)["yhat"]
    return samples[:period]


QUANTILES = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)


@pytest.mark.parametrize("variant", MODEL_OPTIONS)
@pytest.mark.parametrize("period", [1, 7, 60])
def test_quantiles_are_those_of_prophets_predictive_samples(
    model_jsons: dict[str, str], variant: str, period: int
) -> None:
    # Given Prophet's own predictive samples under a seed
    model_json = model_jsons[variant]
    samples = prophet_samples(model_json, period, seed=20240607)

    # When the container's forecaster is asked for quantiles with the same seed
    forecast = compile_model(model_json, "D").forecast(period, 20240607, QUANTILES)

    # Then each row is numpy's quantile of Prophet's samples
    assert forecast.quantiles == QUANTILES and forecast.quantile_values is not None
    assert forecast.quantile_values.shape == (len(QUANTILES), period)
    expected = np.quantile(samples, QUANTILES, axis=1)
    np.testing.assert_allclose(forecast.quantile_values, expected, rtol=0, atol=1e-6)


def test_quantiles_rise_with_q_and_leave_the_interval_as_it_was(
    model_jsons: dict[str, str],
) -> None:
    # Given a fine grid of quantiles
    forecaster = compile_model(model_jsons["mixed-modes"], "D")
    grid = tuple(round(q, 3) for q in np.arange(0.001, 1, 0.001))

    # When a forecast is asked for with and without them
    with_quantiles = forecaster.forecast(30, 11, grid)
    without = forecaster.forecast(30, 11)

    # Then every period's quantiles never fall as q rises, and the interval is the same
    assert with_quantiles.quantile_values is not None
    assert (np.diff(with_quantiles.quantile_values, axis=0) >= 0).all()
    assert without.quantile_values is None and without.quantiles == ()
    assert with_quantiles.yhat_lower is not None and without.yhat_lower is not None
    np.testing.assert_array_equal(with_quantiles.yhat_lower, without.yhat_lower)
    np.testing.assert_array_equal(with_quantiles.yhat_upper, without.yhat_upper)  # type: ignore[arg-type]


def test_no_uncertainty_samples_gives_no_quantile_values(model_jsons: dict[str, str]) -> None:
    document = json.loads(model_jsons["defaults"])
    document["uncertainty_samples"] = 0
    forecast = compile_model(json.dumps(document), "D").forecast(3, 1, (0.1, 0.9))
    assert forecast.quantiles == (0.1, 0.9) and forecast.quantile_values is None


@pytest.mark.parametrize("quantiles", [(0.0, 0.5), (0.5, 1.0), (0.9, 0.1), (0.5, 0.5)])
def test_quantiles_outside_zero_one_or_out_of_order_are_refused(
    model_jsons: dict[str, str], quantiles: tuple[float, ...]
) -> None:
    with pytest.raises(ValueError, match="quantiles must ascend"):
        compile_model(model_jsons["defaults"], "D").forecast(3, 1, quantiles)


def falling_consumption(days: int) -> pd.DataFrame:
    """A customer whose use falls steadily towards zero: its trend carries on below it."""
    day = np.arange(days)
    y = 400 - 3.2 * day + 20 * np.sin(2 * np.pi * day / 7)
    return pd.DataFrame({"ds": pd.date_range("2024-01-01", periods=days, freq="D"), "y": y})


def test_clipping_at_zero_raises_every_negative_value_and_counts_them() -> None:
    # Given a model whose trend goes below zero within the forecast
    model = fit(falling_consumption(120), yearly_seasonality=False, daily_seasonality=False)
    forecaster = compile_model(model_to_json(model), "D")
    forecast = forecaster.forecast(60, 5, (0.1, 0.5, 0.9))
    assert forecast.yhat_lower is not None and forecast.quantile_values is not None
    negative = sum(
        int((array < 0).sum())
        for array in (
            forecast.yhat,
            forecast.yhat_lower,
            forecast.yhat_upper,
            forecast.quantile_values,
        )
        if array is not None
    )
    assert forecast.yhat.min() < 0 and negative > 0

    # When it is clipped at zero
    clipped, count = forecast.clipped_at(0.0)

    # Then nothing is negative, the count is the negatives', the positive values stay, and
    # the bounds and quantiles keep their order
    assert count == negative
    assert clipped.yhat_lower is not None and clipped.yhat_upper is not None
    assert clipped.quantile_values is not None
    for before, after in (
        (forecast.yhat, clipped.yhat),
        (forecast.yhat_lower, clipped.yhat_lower),
        (forecast.yhat_upper, clipped.yhat_upper),
        (forecast.quantile_values, clipped.quantile_values),
    ):
        assert (after >= 0).all()
        np.testing.assert_array_equal(after[before >= 0], before[before >= 0])
    assert (clipped.yhat_lower <= clipped.yhat_upper).all()
    assert (np.diff(clipped.quantile_values, axis=0) >= 0).all()


def test_clipping_a_positive_forecast_changes_nothing(model_jsons: dict[str, str]) -> None:
    forecast = compile_model(model_jsons["defaults"], "D").forecast(7, 1, (0.5,))
    clipped, count = forecast.clipped_at(0.0)
    assert clipped is forecast and count == 0


def test_a_parsed_model_without_one_period_forecasts_the_same_and_refuses_one_period(
    model_jsons: dict[str, str],
) -> None:
    # Given the training export's way: the parsed model, its history left unparsed
    served = compile_model(model_jsons["defaults"], "D")
    exported = compile_model(json.loads(model_jsons["defaults"]), "D", 30, one_period=False)
    seed = forecast_seed("q0000000900-20240101t000000")
    # Then its 30-period forecast is the endpoint's, bounds included, and so are its first
    # days' (the step is its future's, whatever the period)
    for period in (30, 7, 1):
        ours, theirs = exported.forecast(period, seed), served.forecast(period, seed)
        for name in ("yhat", "yhat_lower", "yhat_upper"):
            np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=1e-12)
    # And a one-period future, which needs the history's step, is refused with the reason
    alone = compile_model(json.loads(model_jsons["defaults"]), "D", 1, one_period=False)
    with pytest.raises(ValueError, match="without one_period"):
        alone.forecast(1, seed)


@pytest.mark.parametrize("samples", [1, 2, 7, 1000])
@pytest.mark.parametrize(
    "shares",
    [
        [0.1, 0.9],  # the interval alone: selected
        [0.0, 0.025, 0.1, 0.5, 0.9, 0.975, 1.0],  # more order statistics: sorted
        [0.1, 0.9, 0.1001, 0.5],  # shares sharing order statistics
        [0.0, 1.0],
        [0.5],
    ],
)
def test_quantiles_of_the_samples_are_numpys(samples: int, shares: list[float]):
    rows = np.random.default_rng(samples).normal(size=(30, samples))
    # (ties too: the same value several times in a row)
    rows[:, ::3] = rows[:, :1]
    expected = np.quantile(rows, shares, axis=1)
    np.testing.assert_array_equal(row_quantiles(rows.copy(), shares), expected)


def per_sample_simulation(forecaster: ProphetForecaster, period: int, seed: int) -> np.ndarray:
    """The forecaster's simulation written sample by sample, one row per sample as
    Prophet lays its draws out (the forecaster's own arithmetic, term for term)."""
    iterations = forecaster.sigma_obs.shape[0]
    per_iteration = math.ceil(forecaster.uncertainty_samples / iterations)
    step = float(np.diff(forecaster.t).mean())
    linear = forecaster.linear_growth
    simulated = simulated_periods(period)
    draws = standard_draws(seed, iterations, per_iteration, simulated, linear)
    changes = [
        offsets[:, :period]
        for offsets in unit_trend_changes(
            seed, iterations, per_iteration, simulated, forecaster.changepoint_count * step, step
        )
    ]
    rows = []
    for i, (_, _, all_normal) in enumerate(draws):
        normal = all_normal[:, :period]
        expected = forecaster.trend_expected[i, :period] * forecaster.y_scale + forecaster.floor
        noise_scale = forecaster.sigma_obs[i] * forecaster.y_scale
        change_scale = forecaster.mean_abs_delta[i] * forecaster.y_scale
        additive = forecaster.additive[i, :period]
        if forecaster.additive_only:
            sample = normal * noise_scale
            if linear:
                sample += changes[i] * change_scale
            rows.append(sample + (expected + additive))
            continue
        trends = np.broadcast_to(expected, normal.shape)
        if linear:
            trends = trends + changes[i] * change_scale
        multiplied = trends * (1 + forecaster.multiplicative[i, :period])
        rows.append(multiplied + additive + normal * noise_scale)
    return np.vstack(rows)


@pytest.mark.parametrize("variant", MODEL_OPTIONS)
def test_samples_built_per_period_are_the_per_sample_simulation_exactly(
    model_jsons: dict[str, str], variant: str
) -> None:
    # Given a model, whose samples are built period by period from shared draws
    forecaster = compile_model(model_jsons[variant], "D")
    for period in (2, 7, 60):
        # Then they are the same numbers as the sample-by-sample simulation, transposed
        by_period = forecaster._samples(period, 20240607)
        assert by_period.flags.c_contiguous and by_period.shape == (period, 1000)
        expected = per_sample_simulation(forecaster, period, 20240607)
        np.testing.assert_array_equal(by_period, expected.T)


def test_an_hourly_models_hour_has_one_interval_whatever_the_period() -> None:
    # Given an hourly Prophet model (a daily cycle, sixty days)
    logging.getLogger("cmdstanpy").disabled = True
    ds = pd.date_range("2023-01-01", periods=24 * 60, freq="h")
    y = 5 + np.cos(2 * np.pi * ds.hour / 24) + np.random.default_rng(0).normal(0, 0.1, ds.size)
    model_json = model_to_json(
        Prophet(yearly_seasonality=False).fit(pd.DataFrame({"ds": ds, "y": y}))
    )
    # When compiled for the endpoint (hourly: 720 hours) and asked for a day, 300 hours
    # and all 30 days of hours
    forecaster = compile_model(model_json, "H")
    assert forecaster.horizon == 720
    day, longer, longest = (forecaster.forecast(n, seed=7) for n in (24, 300, 720))
    # Then each hour's interval is the same in all three (one simulation of 720 hours)
    for other in (longer, longest):
        assert other.yhat_lower is not None and other.yhat_upper is not None
        np.testing.assert_array_equal(day.yhat_lower, other.yhat_lower[:24])
        np.testing.assert_array_equal(day.yhat_upper, other.yhat_upper[:24])
