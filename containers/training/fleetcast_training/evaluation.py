"""Holdout error measures and the seasonal-naive baseline they are compared with."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetcast_training.history import History

Values = npt.NDArray[np.float64]


def smape(actual: Values, forecast: Values) -> float:
    """Symmetric MAPE in 0..2: mean of ``2|F - A| / (|A| + |F|)``; a point where both
    are zero counts as a perfect forecast rather than 0/0."""
    denominator = np.abs(actual) + np.abs(forecast)
    ratio = np.divide(
        2 * np.abs(forecast - actual),
        denominator,
        out=np.zeros_like(denominator),
        where=denominator > 0,
    )
    return float(ratio.mean())


def mae(actual: Values, forecast: Values) -> float:
    return float(np.abs(forecast - actual).mean())


def rmse(actual: Values, forecast: Values) -> float:
    return float(np.sqrt(np.square(forecast - actual).mean()))


def wape(actual: Values, forecast: Values) -> float | None:
    """Weighted absolute percentage error, ``sum|F - A| / sum|A|`` (Amazon Forecast's WAPE);
    None when every actual value is zero: there is no volume to weigh the errors by."""
    volume = float(np.abs(actual).sum())
    if volume == 0:
        return None
    return float(np.abs(forecast - actual).sum()) / volume


def mase(actual: Values, forecast: Values, scale: float | None) -> float | None:
    """Mean absolute scaled error: the forecast's MAE over ``scale``, the in-sample MAE of
    the seasonal-naive forecast (:func:`in_sample_naive_mae`). None when ``scale`` is zero
    (a history that repeats itself exactly every season, a flat one say) or None: no error
    can be scaled by it, and an infinite or zero ratio would say something false."""
    if scale is None or scale == 0:
        return None
    return mae(actual, forecast) / scale


def in_sample_naive_mae(history: History, season: timedelta) -> float | None:
    """MASE's scale: the MAE of forecasting each row of ``history`` at least a season
    after its first with :func:`seasonal_naive`'s rule (the value one season earlier, the
    latest before it across a gap); None when ``history`` spans less than a season."""
    times = history.times.astype("datetime64[ns]")
    values = history.values
    period = np.timedelta64(pd.Timedelta(season).value, "ns")
    scored = times >= times[0] + period
    if not scored.any():
        return None
    latest = np.searchsorted(times, times[scored] - period, side="right") - 1
    return float(np.abs(values[scored] - values[latest]).mean())


def seasonal_naive(
    history: History, targets: npt.NDArray[np.datetime64], season: timedelta
) -> Values:
    """Forecast each target time with the value one season earlier, repeating the last
    season of ``history`` for targets more than a season past its end.

    ``history``'s times are sorted. Where the time one season earlier is missing
    (a gap in the data), the latest value before it stands in; before the first row,
    the first value does.
    """
    times = history.times.astype("datetime64[ns]")
    values = history.values
    wanted = np.asarray(targets).astype("datetime64[ns]")
    period = np.timedelta64(pd.Timedelta(season).value, "ns")
    seasons_back = np.maximum(np.ceil((wanted - times[-1]) / period), 1).astype(np.int64)
    sources = wanted - seasons_back * period
    # The latest row at or before each source time (-1: before the first row).
    latest = np.searchsorted(times, sources, side="right") - 1
    return np.where(latest >= 0, values[np.maximum(latest, 0)], values[0])
