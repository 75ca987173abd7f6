"""Customers' histories on their regular grids, as the numpy families take a batch of them
(:class:`fleetcast_forecasters.candidates.Histories`).

Each customer's rows are placed at their period's row of a grid from its first period to
its last, one row per period of the model's frequency: a period with no row (a gap) is
NaN, a value to be carried over by the recursions, never a low one. The grids are
right-aligned, so every customer's last period is the last row.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency
from fleetcast_forecasters.calibration import INTERVAL_WIDTH
from fleetcast_forecasters.candidates import Histories
from fleetcast_training.history import History
from fleetcast_training.hyperparameters import Hyperparameters


def period(frequency: Frequency) -> np.timedelta64:
    """One period of the model's frequency."""
    return np.timedelta64(frequency.period_seconds, "s")


def positions(history: History, frequency: Frequency) -> npt.NDArray[np.intp]:
    """Each row's period number from the history's first period."""
    step = period(frequency).astype("timedelta64[us]").astype(np.int64)
    times = history.times.astype("datetime64[us]").astype(np.int64)
    return np.asarray(np.rint((times - times[0]) / step), dtype=np.intp)


def on_grids(histories: list[History], settings: Hyperparameters) -> Histories:
    placed = [positions(history, settings.frequency) for history in histories]
    periods = max(int(p[-1]) + 1 for p in placed)
    values = np.full((periods, len(histories)), np.nan)
    first = np.empty(len(histories), dtype=np.intp)
    for column, (history, rows) in enumerate(zip(histories, placed, strict=True)):
        offset = periods - (int(rows[-1]) + 1)
        values[offset + rows, column] = history.values
        first[column] = offset
    return Histories(
        values=values,
        first=first,
        last_history=np.array([history.times[-1] for history in histories]),
        season=settings.season_rows,
        uncertainty_samples=settings.uncertainty_samples,
        interval_width=INTERVAL_WIDTH,
    )
