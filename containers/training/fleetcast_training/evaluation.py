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
    times = history["ds"].to_numpy(dtype="datetime64[ns]")
    values = history["y"].to_numpy(dtype=np.float64)
    wanted = pd.Series(targets).to_numpy(dtype="datetime64[ns]")
    period = np.timedelta64(pd.Timedelta(season).value, "ns")
    seasons_back = np.maximum(np.ceil((wanted - times[-1]) / period), 1).astype(np.int64)
    sources = wanted - seasons_back * period
    # The latest row at or before each source time (-1: before the first row).
    latest = np.searchsorted(times, sources, side="right") - 1
    return np.where(latest >= 0, values[np.maximum(latest, 0)], values[0])
