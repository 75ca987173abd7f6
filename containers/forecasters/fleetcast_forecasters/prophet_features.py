"""The design matrix of a Prophet model's future: its seasonalities' Fourier columns, its
holidays' 0/1 columns (the model's own frame and its country's holidays, regenerated for
the forecast's years), and the piecewise-linear trend, each computed as ``Prophet.predict``
computes it, from the serialised model's fields alone. Compiling a model
(:mod:`fleetcast_forecasters.prophet_compile`) multiplies them by the fitted coefficients.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.holiday_calendar import holiday_dates
from fleetcast_forecasters.forecast import (
    MIDNIGHT_NS,
    NS_PER_SECOND,
    SECONDS_PER_DAY,
    FloatArray,
    FuturePeriods,
    UnsupportedModelError,
)


def seasonality_features(
    model: dict[str, Any], future: FuturePeriods
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Prophet's ``make_all_seasonality_features`` for unconditional seasonalities, and
    which columns are additive."""
    names, seasonalities = model["seasonalities"]
    if not names:
        return np.zeros((future.dates_ns.shape[0], 0)), np.zeros(0, dtype=bool)
    spec = []
    for name in names:
        seasonality = seasonalities[name]
        period = float(seasonality["period"])
        order = int(seasonality["fourier_order"])
        if order < 1 or period <= 0:
            raise ValueError(f"seasonality {name!r} has period {period} and order {order}")
        spec.append((period, order, seasonality["mode"] == "additive"))
    return _fourier_features(tuple(spec), future.key)


@functools.lru_cache(maxsize=16)
def _fourier_features(
    spec: tuple[tuple[float, int, bool], ...], dates_ns: bytes
) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """The Fourier columns of seasonalities ``spec`` (period, order, additive) at the
    dates, and which are additive. Models of one fleet share their seasonalities and,
    forecast from the same last day, their dates: a run's export and an endpoint loading
    many models build them once. Read-only, as they are shared."""
    days = np.frombuffer(dates_ns, dtype=np.int64) / NS_PER_SECOND / SECONDS_PER_DAY
    columns: list[FloatArray] = []
    additive = []
    for period, order, is_additive in spec:
        x = 2 * np.pi * days
        for harmonic in range(1, order + 1):
            angle = harmonic / period * x
            columns.extend((np.sin(angle), np.cos(angle)))
        additive.extend([is_additive] * (2 * order))
    features, modes = np.column_stack(columns), np.array(additive, dtype=bool)
    features.setflags(write=False)
    modes.setflags(write=False)
    return features, modes


def holiday_features(model: dict[str, Any], dates_ns: npt.NDArray[np.int64]) -> FloatArray:
    """Prophet's ``make_holiday_features`` of ``construct_holiday_dataframe`` for the
    future dates: one 0/1 column per holiday name and day offset in its window, named
    ``{name}_delim_{+|-}{offset}`` and in the order of those names, as Prophet orders them.
    """
    days = dates_ns // MIDNIGHT_NS
    columns: dict[str, FloatArray] = {}
    for day, name, lower, upper in _future_holidays(model, days):
        for offset in range(lower, upper + 1):
            key = f"{name}_delim_{'+' if offset >= 0 else '-'}{abs(offset)}"
            column = columns.setdefault(key, np.zeros(days.shape[0]))
            if day is not None:
                column[days == day + offset] = 1.0
    if not columns:
        return np.zeros((days.shape[0], 0))
    return np.column_stack([columns[key] for key in sorted(columns)])


# A holiday as Prophet's holidays frame has it: day (days since 1970-01-01, None for a
# fitted name the forecast's years lack), name, lower and upper window.
_Holiday = tuple[int | None, str, int, int]


def _future_holidays(model: dict[str, Any], days: npt.NDArray[np.int64]) -> list[_Holiday]:
    """Prophet's ``construct_holiday_dataframe``: the model's own frame, its country's
    holidays in the forecast's years, and only the names the fit saw (each of them)."""
    rows: list[_Holiday] = []
    if model.get("holidays") is not None:
        for record in json.loads(model["holidays"])["data"]:
            lower, upper = _window(record)
            rows.append((_day_number(record["ds"]), str(record["holiday"]), lower, upper))
    country = model.get("country_holidays")
    if country is not None:
        years = {
            int(year) + 1970
            for year in np.unique(
                days.astype("datetime64[D]").astype("datetime64[Y]").astype(np.int64)
            )
        }
        try:
            calendar = holiday_dates(str(country), None, years)
        except ValueError as error:
            raise UnsupportedModelError(f"the model's country holidays: {error}") from None
        rows.extend(
            (int(np.datetime64(day, "D").astype(np.int64)), name, 0, 0) for day, name in calendar
        )
    if model.get("train_holiday_names") is not None:
        fitted = [str(name) for name in json.loads(model["train_holiday_names"])["data"]]
        known = set(fitted)
        rows = [row for row in rows if row[1] in known]
        present = {row[1] for row in rows}
        rows.extend((None, name, 0, 0) for name in fitted if name not in present)
    return rows


def _window(record: dict[str, Any]) -> tuple[int, int]:
    """``lower_window`` and ``upper_window`` as Prophet reads them: 0 when absent, and
    both 0 when either is missing from a row (NaN, null in JSON)."""
    bounds = (record.get("lower_window", 0), record.get("upper_window", 0))
    try:
        lower, upper = (int(math.nan if bound is None else bound) for bound in bounds)
    except ValueError:
        return 0, 0
    return lower, upper


def _day_number(timestamp: str) -> int | None:
    """Days since 1970-01-01 of a holidays frame's ``ds`` (Prophet keeps only the date)."""
    if timestamp is None:
        return None
    instant = np.datetime64(timestamp.removesuffix("Z"), "ns")
    return int(instant.astype("datetime64[D]").astype(np.int64))


def holidays_mode(model: dict[str, Any]) -> str:
    # Models from Prophet before 1.1.5 have no holidays_mode: theirs is seasonality_mode.
    mode = model.get("holidays_mode") or model.get("seasonality_mode", "additive")
    if mode not in ("additive", "multiplicative"):
        raise ValueError(f"unknown holidays_mode {mode!r}")
    return str(mode)


def mean_step(t: FloatArray) -> float:
    """``np.diff(t).mean()``, Prophet's step of a future or history, without the
    overheads of the two calls (the same differences, sum and division)."""
    return float(np.add.reduce(t[1:] - t[:-1]) / (t.shape[0] - 1))


def piecewise_linear(
    t: FloatArray, deltas: FloatArray, k: float, m: float, changepoints_t: FloatArray
) -> FloatArray:
    """Prophet's ``piecewise_linear``, term for term."""
    deltas_t = (changepoints_t[None, :] <= t[..., None]) * deltas
    k_t = deltas_t.sum(axis=1) + k
    m_t = (deltas_t * -changepoints_t).sum(axis=1) + m
    result: FloatArray = k_t * t + m_t
    return result
