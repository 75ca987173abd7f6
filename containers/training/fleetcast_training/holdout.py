"""The holdout fit and its point forecast, built in numpy from the full-history fit's Stan data.

Scoring a customer means fitting Prophet on all but the last ``holdout_rows`` and
forecasting them. Only the refit on the whole history is served, so the scored model is
never kept: building it through Prophet's pandas preprocessing and ``predict`` would cost
several times the fit itself. The window's Stan data is what Prophet would build for it:

- ``t`` and the changepoint grid are Prophet's (``setup_dataframe``, ``set_changepoints``)
  for the window's own first and last time;
- ``y`` is scaled by the window's largest absolute value ('absmax', floor 0);
- the feature matrix is the first rows of the full history's: Prophet's Fourier terms
  depend on each row's absolute time only, and the seasonalities are the same.

The forecast is Prophet's additive ``yhat``: the piecewise-linear trend plus the additive
terms, times the scale. ``tests/unit/test_training_holdout.py`` checks both against
Prophet's own fit and ``predict``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_training.exact_map import solve, supported

Vector = npt.NDArray[np.float64]
# Prophet's defaults, which fleetcast keeps.
N_CHANGEPOINTS = 25
CHANGEPOINT_RANGE = 0.8


def holdout_forecast(
    full: dict[str, Any],
    times: npt.NDArray[np.datetime64],
    values: Vector,
    holdout_rows: int,
    noise: float | None = None,
) -> Vector:
    """Fit the window before the last ``holdout_rows`` exactly and forecast those rows.

    ``full`` is Prophet's Stan data for the whole history (``times``, ``values``, sorted
    rows with a value); ``noise``, the whole-history fit's sigma_obs in the values' own
    units, is where the window's search for its sigma_obs starts. Raises :class:`NotSolvedExactly` when the in-process solver does
    not solve this model (``fleetcast_training.exact_map.NotSolvedExactly``); the caller
    then scores with Prophet itself.
    """
    supported(full)
    rows = len(times) - holdout_rows
    nanoseconds = times.astype("datetime64[ns]").astype(np.int64)
    start = nanoseconds[0]
    # Prophet divides Timedeltas: the same float division of nanosecond counts.
    t = (nanoseconds - start) / (nanoseconds[rows - 1] - start)
    window = values[:rows]
    scale = float(np.abs(window).max()) or 1.0
    features = np.asarray(full["X"], dtype=np.float64)
    s_a = np.asarray(full["s_a"], dtype=np.float64)
    if window.min() == window.max():
        # Prophet skips the optimiser for a constant series: trend m = y_scaled[0], no
        # seasonality.
        return np.full(holdout_rows, window[0] / scale * scale)
    t_change = _changepoints(t[:rows])
    data = {
        "T": rows,
        "S": t_change.size,
        "K": features.shape[1],
        "tau": full["tau"],
        "trend_indicator": full["trend_indicator"],
        "y": window / scale,
        "t": t[:rows],
        "cap": np.zeros(rows),
        "t_change": t_change,
        "X": features[:rows],
        "sigmas": full["sigmas"],
        "s_a": s_a,
        "s_m": full["s_m"],
    }
    fit = solve(data, start_variance=(noise / scale) ** 2 if noise else 1.0, trend=False)
    ahead = t[rows:]
    reached = (t_change[None, :] <= ahead[:, None]) * fit.delta
    trend = (fit.k + reached.sum(axis=1)) * ahead + (fit.m + (reached * -t_change).sum(axis=1))
    seasonal = (features[rows:] * s_a) @ fit.beta
    return np.asarray(trend * scale + seasonal * scale, dtype=np.float64)


def _changepoints(t: Vector) -> Vector:
    """Prophet's changepoint grid: up to 25 rows evenly spread over the first 80% of the
    window (a dummy at 0 when the window is too short for any)."""
    rows = int(np.floor(t.size * CHANGEPOINT_RANGE))
    count = min(N_CHANGEPOINTS, rows - 1)
    if count <= 0:
        return np.array([0.0])
    indexes = np.linspace(0, rows - 1, count + 1).round().astype(int)[1:]
    return np.sort(t[indexes])
