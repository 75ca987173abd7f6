"""The one shape every peer script writes, whatever its virtual environment: one row per
customer, model and horizon step (``step`` 0 is the day after the series).

``unique_id, model, step, yhat, q10, q50, q90, cpu_seconds``: ``yhat`` is the point forecast,
``q10``/``q90`` the 80% interval and ``q50`` the median (NaN where a model has none), and
``cpu_seconds`` the customer's CPU for that model. This module needs only pandas and numpy,
so the scripts import it in their own environments and fleetcast's tests import it too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

COLUMNS = ("unique_id", "model", "step", "yhat", "q10", "q50", "q90", "cpu_seconds")
QUANTILE_COLUMNS = {"q10": 0.1, "q50": 0.5, "q90": 0.9}


def rows(
    unique_id: str,
    model: str,
    yhat: np.ndarray,
    cpu_seconds: float,
    q10: np.ndarray | None = None,
    q50: np.ndarray | None = None,
    q90: np.ndarray | None = None,
) -> pd.DataFrame:
    steps = len(yhat)
    missing = np.full(steps, np.nan)

    def column(values: np.ndarray | None) -> np.ndarray:
        return missing if values is None else np.asarray(values, dtype=np.float64)

    return pd.DataFrame(
        {
            "unique_id": [unique_id] * steps,
            "model": [model] * steps,
            "step": np.arange(steps, dtype=np.int64),
            "yhat": np.asarray(yhat, dtype=np.float64),
            "q10": column(q10),
            "q50": column(q50),
            "q90": column(q90),
            "cpu_seconds": np.full(steps, float(cpu_seconds)),
        }
    )


def from_long(
    forecast: pd.DataFrame,
    model: str,
    cpu_seconds: dict[str, float],
    yhat: str,
    q10: str | None = None,
    q50: str | None = None,
    q90: str | None = None,
    id_column: str = "unique_id",
    time_column: str = "ds",
) -> pd.DataFrame:
    """A library's long forecast frame (one row per series and timestamp, a column per
    output) as :data:`COLUMNS` rows for ``model``."""
    ordered = forecast.sort_values([id_column, time_column], kind="stable")
    parts = []
    for unique_id, part in ordered.groupby(id_column, sort=True):
        parts.append(
            rows(
                str(unique_id),
                model,
                part[yhat].to_numpy(np.float64),
                cpu_seconds[str(unique_id)],
                *(part[c].to_numpy(np.float64) if c in part else None for c in (q10, q50, q90)),
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else empty()


def empty() -> pd.DataFrame:
    return pd.DataFrame({c: [] for c in COLUMNS})
