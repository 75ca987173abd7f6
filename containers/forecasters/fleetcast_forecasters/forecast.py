"""What every model family's forecast is, and the parts every family shares.

A family (``model_kind`` in an archive's metadata: :mod:`fleetcast_forecasters`)
compiles a fitted model into a :class:`Forecaster`, which answers ``forecast(period,
seed, quantiles)``: a point forecast, the interval and the quantiles asked for, the last
two read from one seeded simulation of the model's future, so the same request to the
same model gets the same answer on any host (:func:`forecast_seed`), and asking for
quantiles leaves the interval as it is. The endpoint then clips at the zero floor and
caches the answer, whatever the family.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency

FloatArray = npt.NDArray[np.float64]

NS_PER_SECOND = 1_000_000_000
SECONDS_PER_DAY = 24 * 60 * 60
MIDNIGHT_NS = SECONDS_PER_DAY * NS_PER_SECOND
# pandas aliases of fixed steps, optionally with a multiple ("15min"), to numpy units.
_FIXED_STEP = re.compile(r"([0-9]*)(D|h|min|s)")
_STEP_UNITS: dict[str, Literal["D", "h", "m", "s"]] = {"D": "D", "h": "h", "min": "m", "s": "s"}


class UnsupportedModelError(ValueError):
    """A well-formed model using a feature a period-only forecast cannot feed (Prophet's
    logistic growth needs a cap per date, extra regressors need their future values)."""


class Forecaster(Protocol):
    """A compiled model: what the endpoint holds per loaded model and the export asks."""

    @property
    def horizon(self) -> int:
        """How many periods it can forecast."""
        ...

    @property
    def yhat(self) -> FloatArray:
        """The point forecast of every period, without simulating anything."""
        ...

    @property
    def dates(self) -> npt.NDArray[np.datetime64]:
        """The date of every period."""
        ...

    @property
    def daily_dates(self) -> bool:
        """Every forecast date is at midnight: render them as plain dates."""
        ...

    def forecast(self, period: int, seed: int, quantiles: tuple[float, ...] = ()) -> Forecast:
        """The next ``period`` periods; ``quantiles`` ascend strictly within (0, 1)."""
        ...


def check_request(period: int, horizon: int, quantiles: tuple[float, ...]) -> None:
    """What every family's ``forecast`` refuses, in the same words. ``horizon`` is the
    compiled model's (its frequency's ``max_period`` when the endpoint compiles it, so the
    container and the forecast API refuse the same periods before this is reached)."""
    if not 1 <= period <= horizon:
        raise ValueError(f"period must be from 1 to {horizon} periods of the model, got {period}")
    if any(not 0 < q < 1 for q in quantiles) or list(quantiles) != sorted(set(quantiles)):
        raise ValueError(f"quantiles must ascend strictly within (0, 1), got {quantiles}")


@dataclass(frozen=True)
class Forecast:
    dates: npt.NDArray[np.datetime64]
    yhat: FloatArray
    # None when the model was fitted with uncertainty_samples=0, as Prophet gives none.
    yhat_lower: FloatArray | None
    yhat_upper: FloatArray | None
    # The quantiles asked for (ascending), and one row of values per quantile; the
    # values are None like the intervals when the model draws no samples.
    quantiles: tuple[float, ...] = ()
    quantile_values: FloatArray | None = None

    def clipped_at(self, floor: float) -> tuple[Forecast, int]:
        """This forecast with every value below ``floor`` raised to it, and how many were.

        Clipping keeps the order of the quantiles and of the interval's bounds.
        """
        arrays = (self.yhat, self.yhat_lower, self.yhat_upper, self.quantile_values)
        clipped = sum(int((array < floor).sum()) for array in arrays if array is not None)
        if not clipped:
            return self, 0
        lower, upper, values = (
            None if array is None else np.maximum(array, floor) for array in arrays[1:]
        )
        raised = Forecast(
            self.dates, np.maximum(self.yhat, floor), lower, upper, self.quantiles, values
        )
        return raised, clipped


# Beyond this many order statistics a row, one sort is cheaper than selecting each.
_SELECTED_AT_MOST = 8


def row_quantiles(rows: FloatArray, shares: list[float]) -> FloatArray:
    """``np.quantile(rows, shares, axis=1)`` (its default, linear rule; no NaN) with one
    row per share. ``rows`` (a new array) is the scratch space: reordered and overwritten.

    Each share needs the two order statistics around its position. A few are selected
    (``np.partition`` at the upper of two neighbours, the lower then the maximum of what
    lies below it), many by sorting: either way the same values, so the same quantiles.
    """
    below, above, weight = quantile_positions(rows.shape[1], shares)
    needed = sorted({*below.tolist(), *above.tolist()})
    if len(needed) > _SELECTED_AT_MOST:
        rows.sort(axis=1)
    else:
        start, i = 0, 0
        while i < len(needed):
            index = needed[i]
            pair = i + 1 < len(needed) and needed[i + 1] == index + 1
            top = index + 1 if pair else index
            # Everything before ``start`` is already at most what is left: select within
            # the rest, so the value at ``top`` is its order statistic...
            rows[:, start:].partition(top - start, axis=1)
            if pair:
                # ... and the one before it is the largest of those below it (written in
                # their place: they are not looked at again).
                rows[:, index] = rows[:, start:top].max(axis=1)
            start, i = top + 1, i + (2 if pair else 1)
    return interpolated(rows[:, below], rows[:, above], weight)


def quantile_positions(
    samples: int, shares: Sequence[float]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], FloatArray]:
    """For ``np.quantile``'s linear rule over ``samples`` sorted values: each share's
    order statistics below and above its position, and its weight between them."""
    last = samples - 1
    position = np.asarray(shares, dtype=np.float64) * last
    below = np.floor(position).astype(np.intp)
    above = np.minimum(below + 1, last)
    return below, above, position - below


def interpolated(low: FloatArray, high: FloatArray, weight: FloatArray) -> FloatArray:
    """The quantiles between each row's order statistics ``low`` and ``high`` (rows by
    shares) at the shares' ``weight``: numpy's interpolation, from the nearer end
    (monotonic in the share), one row per share."""
    found = np.where(weight >= 0.5, high - (high - low) * (1 - weight), low + (high - low) * weight)
    return np.ascontiguousarray(found.T)


def forecast_seed(model_version: str) -> int:
    """The seed of every forecast of one model version: the same request always gets the
    same intervals, on any host.

    The period asked for is not part of it, and each family draws a day's random numbers
    whatever the period (the first days of a longer simulation), so a day's interval and
    quantiles are the same at period=7 and period=14, in the API and in the run's export.
    The customer is not part of it either: the customers of one run share their random
    numbers (common random numbers), so the run's export draws them once, not once per
    customer. Each customer's interval is still Prophet's own with this seed.
    """
    digest = hashlib.sha256(model_version.encode()).digest()
    return int.from_bytes(digest[:4], "big")


# A forecast's simulation draws at least this many periods: a daily model's longest
# forecast (Frequency.DAILY.max_period).
SIMULATED_AT_LEAST = Frequency.DAILY.max_period


def pandas_alias(frequency: str) -> str:
    """A model frequency's pandas alias (``H`` is ``h``); any other pandas alias as it is."""
    try:
        return Frequency.parse(frequency).pandas_alias
    except ValueError:
        return frequency


def default_horizon(frequency: str) -> int:
    """How many periods a compiled model can forecast when its caller says no more: its
    model frequency's longest forecast (365 days, 720 hours), or 365 periods of any other
    pandas frequency a Prophet model may have been fitted at."""
    try:
        return Frequency.parse(frequency).max_period
    except ValueError:
        return SIMULATED_AT_LEAST


def simulated_periods(period: int, at_least: int = SIMULATED_AT_LEAST) -> int:
    """How many periods a forecast's simulation draws for, of which a request uses the
    first ``period``: the longest the model's frequency serves (``at_least``: 365 days,
    720 hours; :func:`default_horizon`), so that a period's draws never depend on the
    period asked for; a longer forecast (an export) draws its own length."""
    return max(period, at_least)


@dataclass(frozen=True, slots=True)
class FuturePeriods:
    """The dates a forecast from one last history time covers (read-only, shared)."""

    dates: npt.NDArray[np.datetime64]
    dates_ns: npt.NDArray[np.int64]
    key: bytes  # dates_ns's bytes: what features of these dates are cached by
    daily: bool  # every date at midnight


@functools.lru_cache(maxsize=16)
def future_periods(last_ns: int, frequency: str, horizon: int) -> FuturePeriods:
    """:func:`future_dates`, made once for the many models of a fleet that end on the
    same day (a run's export, an endpoint loading them)."""
    dates = future_dates(last_ns, frequency, horizon)
    dates_ns = dates.astype("datetime64[ns]").astype(np.int64)
    dates.setflags(write=False)
    dates_ns.setflags(write=False)
    daily = bool((dates_ns % MIDNIGHT_NS == 0).all())
    return FuturePeriods(dates, dates_ns, dates_ns.tobytes(), daily)


def future_dates(last_ns: int, frequency: str, horizon: int) -> npt.NDArray[np.datetime64]:
    """``Prophet.make_future_dataframe(horizon, freq, include_history=False)``.

    Fixed steps (what training writes: ``D``, ``h``) are added with numpy; other pandas
    frequencies go through ``pandas.date_range``, imported only then: pandas adds a
    second to start-up and tens of MB to the process.
    """
    frequency = pandas_alias(frequency)
    fixed = _FIXED_STEP.fullmatch(frequency)
    if fixed is not None:
        step = np.timedelta64(int(fixed[1] or 1), _STEP_UNITS[fixed[2]]).astype("timedelta64[ns]")
        if step <= np.timedelta64(0, "ns"):
            raise ValueError(f"frequency {frequency!r} does not step forward in time")
        return np.datetime64(last_ns, "ns") + step * np.arange(1, horizon + 1)
    import pandas as pd

    last = pd.Timestamp(last_ns, unit="ns")
    try:
        candidates = pd.date_range(start=last, periods=horizon + 1, freq=frequency)
    except ValueError as error:
        raise ValueError(f"frequency {frequency!r} is not a pandas frequency: {error}") from None
    future = candidates[candidates > last][:horizon]
    if len(future) != horizon:
        raise ValueError(f"frequency {frequency!r} does not step forward in time")
    return np.array(future.as_unit("ns").to_numpy(), dtype="datetime64[ns]")


def all_finite(values: FloatArray) -> bool:
    """No NaN or infinity in ``values``: one sum (they carry into it), and only a sum
    that overflows is checked value by value."""
    return math.isfinite(values.sum()) or bool(np.isfinite(values).all())
