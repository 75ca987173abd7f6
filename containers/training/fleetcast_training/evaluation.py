"""Holdout error measures and the seasonal-naive baseline they are compared with."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import numpy.typing as npt
import pandas as pd

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


def seasonal_naive(history: pd.DataFrame, targets: pd.Series, season: timedelta) -> Values:
    """Forecast each target time with the value one season earlier, repeating the last
    season of ``history`` for targets more than a season past its end.

    ``history`` has sorted ``ds`` and ``y``. Where the time one season earlier is missing
    (a gap in the data), the latest value before it stands in; before the first row,
    the first value does.
    """
    values = history.set_index("ds")["y"]
    last = values.index[-1]
    period = pd.Timedelta(season)
    seasons_back = np.ceil((targets - last) / period).clip(lower=1)
    sources = pd.DatetimeIndex(targets - seasons_back.to_numpy() * period)
    forecast = values.reindex(sources, method="ffill").fillna(values.iloc[0])
    return forecast.to_numpy(dtype=np.float64)
