"""The numpy families' fits of a batch with each customer's holidays
(:mod:`fleetcast_forecasters.holiday_effects`): holiday periods left out of the
fits, each backtest window's forecast given the effects learnt before its origin, each
whole-history model the effects of the whole history (its ``holidays`` field, which
serving adds to the forecast's dates)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from fleetcast_contracts.holiday_calendar import HolidayCalendar
from fleetcast_forecasters.candidates import (
    BacktestPlan,
    CandidateFamily,
    CandidateFits,
    Histories,
)
from fleetcast_forecasters.holiday_effects import GridHolidays


def fit_families(
    families: Mapping[str, CandidateFamily],
    grids: Histories,
    plan: BacktestPlan,
    calendars: Sequence[HolidayCalendar | None],
    step: np.timedelta64,
) -> tuple[dict[str, CandidateFits], Histories]:
    """Each family's fits of ``grids`` (``calendars[c]`` is customer ``c``'s calendar,
    ``step`` the grid's period), and the histories they were fitted on: ``grids`` with
    every holiday period a gap."""
    holidays = [
        None
        if calendar is None
        else GridHolidays.on_grid(calendar, grids.last_history[column], grids.periods, step)
        for column, calendar in enumerate(calendars)
    ]
    if not any(found is not None and found.rows.size for found in holidays):
        return {kind: family.fit(grids, plan) for kind, family in families.items()}, grids
    values = grids.values.copy()
    for column, found in enumerate(holidays):
        if found is not None:
            values[found.rows, column] = np.nan
    fitted = _with_values(grids, values)
    # A customer whose holidays would leave it too little history for a window it has
    # enough for keeps them in its fits (their effects are still added).
    short = np.zeros(grids.customers, dtype=bool)
    for origin in plan.origins:
        short |= grids.fits_before(origin) & ~fitted.fits_before(origin)
    if short.any():
        values[:, short] = grids.values[:, short]
        fitted = _with_values(grids, values)
    fits = {kind: family.fit(fitted, plan) for kind, family in families.items()}
    for column, found in enumerate(holidays):
        if found is None or not found.rows.size:
            continue
        history = grids.values[:, column]
        for window, origin in enumerate(plan.origins):
            offsets = found.offsets(found.effects(history, origin), origin, plan.horizon)
            for fit in fits.values():
                fit.backtest[column, window] += offsets
        field = found.model_field(found.effects(history, grids.periods))
        for fit in fits.values():
            model = fit.models[column]
            if model is not None:
                model["holidays"] = field
    return fits, fitted


def _with_values(grids: Histories, values: np.ndarray) -> Histories:
    usable = np.isfinite(values)
    first = np.where(usable.any(axis=0), np.argmax(usable, axis=0), grids.first)
    return dataclasses.replace(grids, values=values, first=np.asarray(first, dtype=np.intp))
