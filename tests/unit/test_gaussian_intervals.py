"""The Gaussian families' intervals and quantiles (fleetcast_forecasters.gaussian) are
those of their seeded simulation, read from the normals' order statistics instead of
from each forecast's samples."""

import numpy as np
import pytest

from fleetcast_forecasters.forecast import row_quantiles
from fleetcast_forecasters.gaussian import PathForecaster, standard_normals


def simulated(forecaster: PathForecaster, period: int, seed: int, shares: list[float]):
    """The quantiles of the simulation itself: every sample drawn, then selected."""
    samples = standard_normals(seed, period, forecaster.uncertainty_samples)
    samples = samples * forecaster.sigma[:period, None]
    samples += forecaster.yhat[:period, None]
    return row_quantiles(samples, shares)


@pytest.mark.parametrize("samples", [1, 2, 7, 1000])
@pytest.mark.parametrize("period", [1, 30, 720])
@pytest.mark.parametrize("quantiles", [(), (0.5,), (0.05, 0.1, 0.5, 0.9, 0.95)])
def test_the_interval_and_quantiles_are_the_simulations_to_the_last_bit(
    samples: int, period: int, quantiles: tuple[float, ...]
) -> None:
    # Given a path of every scale, with deviations that are sometimes zero
    rng = np.random.default_rng(period * samples)
    yhat = rng.normal(size=period) * 10.0 ** rng.uniform(-3, 3, period)
    sigma = np.abs(rng.normal(size=period)) * 10.0 ** rng.uniform(-3, 3, period)
    sigma[::5] = 0.0
    dates = np.arange(period).astype("datetime64[h]")
    forecaster = PathForecaster(dates, yhat, sigma, samples, 0.8, daily_dates=False)
    # When it forecasts
    forecast = forecaster.forecast(period, seed=11, quantiles=quantiles)
    # Then every number is the simulation's exactly (the export and the endpoint agree)
    expected = simulated(forecaster, period, 11, [(1 - 0.8) / 2, (1 + 0.8) / 2, *quantiles])
    np.testing.assert_array_equal(forecast.yhat_lower, expected[0])
    np.testing.assert_array_equal(forecast.yhat_upper, expected[1])
    if quantiles:
        np.testing.assert_array_equal(forecast.quantile_values, expected[2:])
    else:
        assert forecast.quantile_values is None


def test_a_shorter_forecast_is_the_first_periods_of_a_longer_one() -> None:
    # Given a forecaster of two weeks of hours
    rng = np.random.default_rng(3)
    dates = np.arange(336).astype("datetime64[h]")
    forecaster = PathForecaster(
        dates, rng.normal(size=336), np.abs(rng.normal(size=336)), 1000, 0.8, False
    )
    # When a day and the two weeks are asked for, with the same seed
    day, weeks = forecaster.forecast(24, seed=5), forecaster.forecast(336, seed=5)
    # Then the day's interval is the two weeks' first day
    assert day.yhat_lower is not None and weeks.yhat_lower is not None
    np.testing.assert_array_equal(day.yhat_lower, weeks.yhat_lower[:24])
