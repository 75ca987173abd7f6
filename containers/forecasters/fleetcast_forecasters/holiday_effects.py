"""Public holidays for the numpy families (seasonal naive, ETS, Theta): each customer with
a holiday calendar gets the dips of its own history on its holidays, whichever family
serves it.

Training: a customer's holiday periods are left out of the numpy families' fits (NaN on
the grid: a gap the recursions carry over, as for any missing period), so neither the
level, the trend nor the seasonal states learn a holiday as ordinary use. Each holiday's
**effect** is a regression on its indicator with the weekly pattern and the local level
removed: the mean, over its occurrences, of the period's value minus the mean of the same
period a week before and a week after (those that are not holidays themselves and have a
usable value). A backtest window's effects come from the occurrences wholly before its
origin only; the served model's from the whole history. A holiday the history never had
(an "observed" day, a holiday new this year) gets the mean of all the occurrences it had
(Prophet fits 0 for it: the combination averages both); none at all, no effect. Effects are additive, as Prophet's
holidays are by default, and one per day: every period of a holiday (24 for hourly
models) gets the day's effect; overlapping holidays add up.

Beside the public holidays, where 25 December is one, the days from 24 to 31 December
that are not are one more holiday, **Christmas week** (:func:`with_christmas_week`): offices,
universities and factories close between Christmas and New Year, which no public calendar
says. Its effect is learnt like any holiday's, from the customer's own previous Christmas
weeks; a customer whose history holds none gets none (a holiday the history never had is
not served: only the effects of names seen are). On make accuracy's buildings (two years)
it took the last 30 days' median WAPE from 0.144 to 0.134; the households (one year of
history, no Christmas before the one held back) are unchanged (docs/model-families.md).
Prophet's holidays and the fleet's holiday feature are the public calendar's only.

Serving: the model's ``model.json`` carries ``"holidays": {"country", "subdivision",
"effects": {name: effect}}`` and :func:`holiday_offsets` adds each forecast date's effects
to the point forecast (:func:`fleetcast_forecasters.gaussian.path_forecaster`), from
the same calendar (:func:`fleetcast_contracts.holiday_calendar.holiday_dates`). A combination
carries none of its own: its members' forecasts already include theirs.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_forecasters.candidates import FloatArray, IntArray

NS_PER_DAY = 24 * 60 * 60 * 1_000_000_000
DAYS_PER_WEEK = 7
_EPOCH = dt.date(1970, 1, 1)
# The working days between Christmas and New Year, where 25 December is a holiday: offices,
# universities and factories close for them, which no public-holiday calendar says.
CHRISTMAS_WEEK = "Christmas week"


def _day_numbers(times_ns: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    return np.asarray(np.floor_divide(times_ns, NS_PER_DAY), dtype=np.int64)


def _calendar_days(
    country: str, subdivision: str | None, first_day: int, last_day: int
) -> tuple[npt.NDArray[np.int64], tuple[str, ...]]:
    """The calendar's holidays from day number ``first_day`` to ``last_day``: each
    ``(date, name)`` pair's day number, and its name."""
    first = _EPOCH + dt.timedelta(days=first_day)
    last = _EPOCH + dt.timedelta(days=last_day)
    pairs = _calendar(country, subdivision, first.year, last.year)
    days = np.array([(day - _EPOCH).days for day, _ in pairs], dtype=np.int64)
    inside = (days >= first_day) & (days <= last_day)
    names = tuple(name for (_, name), keep in zip(pairs, inside, strict=True) if keep)
    return days[inside], names


@functools.lru_cache(maxsize=256)
def _calendar(
    country: str, subdivision: str | None, first_year: int, last_year: int
) -> tuple[tuple[dt.date, str], ...]:
    """The calendar's ``(date, name)`` pairs of these years, Christmas week included:
    cached like :func:`holiday_dates`, since every customer's fit and every compiled
    forecast asks for the few calendars of a fleet again."""
    return with_christmas_week(
        holiday_dates(country, subdivision, range(first_year, last_year + 1))
    )


def with_christmas_week(
    pairs: tuple[tuple[dt.date, str], ...],
) -> tuple[tuple[dt.date, str], ...]:
    """``pairs`` and, in a year whose 25 December is a holiday, the days from 24 to 31
    December that are not, as :data:`CHRISTMAS_WEEK`."""
    taken = {day for day, _ in pairs}
    added = [
        (dt.date(day.year, 12, date), CHRISTMAS_WEEK)
        for day, _ in pairs
        if (day.month, day.day) == (12, 25)
        for date in range(24, 32)
        if dt.date(day.year, 12, date) not in taken
    ]
    return tuple(sorted(set(pairs) | set(added)))


@dataclass(frozen=True)
class GridHolidays:
    """One customer's holidays on its grid (rows of the batch's right-aligned grid): one
    entry per (holiday, period), several for a period on which holidays overlap."""

    calendar: HolidayCalendar
    names: tuple[str, ...]  # the holidays' names, each once
    rows: IntArray  # each entry's grid row
    name_index: IntArray  # each entry's name, into ``names``
    week: int  # periods per week: the distance to an occurrence's baseline

    @classmethod
    def on_grid(
        cls,
        calendar: HolidayCalendar,
        last_history: np.datetime64,
        periods: int,
        step: np.timedelta64,
    ) -> GridHolidays:
        """The holidays of ``calendar`` on a grid of ``periods`` rows of ``step`` whose
        last row is ``last_history``."""
        step_ns = int(step.astype("timedelta64[ns]").astype(np.int64))
        last_ns = int(np.asarray(last_history).astype("datetime64[ns]").astype(np.int64))
        row_days = _day_numbers(last_ns - step_ns * np.arange(periods - 1, -1, -1, dtype=np.int64))
        days, pair_names = _calendar_days(
            calendar.country, calendar.subdivision, int(row_days[0]), int(row_days[-1])
        )
        names = tuple(dict.fromkeys(pair_names))
        index = {name: number for number, name in enumerate(names)}
        # Each pair's rows: every period of its day (row_days ascends).
        starts = np.searchsorted(row_days, days, side="left")
        ends = np.searchsorted(row_days, days, side="right")
        counts = ends - starts
        rows = np.repeat(starts, counts) + _ranges(counts)
        name_index = np.repeat(np.array([index[n] for n in pair_names], dtype=np.intp), counts)
        periods_per_day = max(1, round(NS_PER_DAY / step_ns))
        return cls(
            calendar=calendar,
            names=names,
            rows=np.asarray(rows, dtype=np.intp),
            name_index=name_index,
            week=DAYS_PER_WEEK * periods_per_day,
        )

    def mask(self, periods: int) -> npt.NDArray[np.bool_]:
        """Which grid rows are holidays."""
        holiday = np.zeros(periods, dtype=bool)
        holiday[self.rows] = True
        return holiday

    def effects(self, values: FloatArray, origin: int) -> FloatArray:
        """Each name's effect (:data:`names` order; one never seen the pooled one) from the
        occurrences in rows before ``origin`` of ``values`` (the customer's grid column),
        their baselines before it too."""
        holiday = self.mask(values.shape[0])
        before, after = self.rows - self.week, self.rows + self.week
        baselines = np.stack(
            [_usable(values, holiday, before, origin), _usable(values, holiday, after, origin)]
        )
        counted = np.isfinite(baselines)
        baseline = np.where(counted, baselines, 0.0).sum(axis=0) / np.maximum(
            counted.sum(axis=0), 1
        )
        own = _usable(values, np.zeros_like(holiday), self.rows, origin)
        usable = np.isfinite(own) & counted.any(axis=0)
        deviation = np.where(usable, own - baseline, 0.0)
        total = np.bincount(self.name_index, deviation, minlength=len(self.names))
        seen = np.bincount(self.name_index, usable.astype(np.float64), minlength=len(self.names))
        # A holiday not seen yet gets the mean of every occurrence seen: a day off like
        # the others (an "observed" Friday, a holiday new this year) is not ordinary use.
        pooled = float(total.sum() / seen.sum()) if seen.sum() else 0.0
        return np.asarray(
            np.where(seen > 0, total / np.maximum(seen, 1.0), pooled), dtype=np.float64
        )

    def offsets(self, effects: FloatArray, origin: int, steps: int) -> FloatArray:
        """The effects on the ``steps`` rows from ``origin`` on (within the grid)."""
        ahead = self.rows - origin
        inside = (ahead >= 0) & (ahead < steps)
        found = np.bincount(ahead[inside], effects[self.name_index[inside]], minlength=steps)
        return np.asarray(found[:steps], dtype=np.float64)

    def model_field(self, effects: FloatArray) -> dict[str, Any]:
        """``model.json``'s ``holidays``: the calendar and every effect seen (not 0)."""
        return {
            "country": self.calendar.country,
            "subdivision": self.calendar.subdivision,
            "effects": {
                name: float(effect)
                for name, effect in zip(self.names, effects, strict=True)
                if effect != 0.0
            },
        }


def _ranges(counts: IntArray) -> IntArray:
    """0..count-1 for each count, concatenated."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, dtype=np.intp)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.asarray(np.arange(total) - starts, dtype=np.intp)


def _usable(
    values: FloatArray, holiday: npt.NDArray[np.bool_], rows: IntArray, origin: int
) -> FloatArray:
    """``values[rows]``; NaN for a row outside ``[0, origin)`` or that is a holiday."""
    inside = (rows >= 0) & (rows < origin)
    safe = np.where(inside, rows, 0)
    found = np.where(inside & ~holiday[safe], values[safe], np.nan)
    return np.asarray(found, dtype=np.float64)


def holiday_offsets(model: dict[str, Any], dates_ns: npt.NDArray[np.int64]) -> FloatArray | None:
    """The holiday effects a model's ``holidays`` field adds to each of ``dates_ns``;
    None for a model without holidays. ``ValueError`` for a field that is not one."""
    field = model.get("holidays")
    if field is None:
        return None
    try:
        country, subdivision = str(field["country"]), field["subdivision"]
        effects = {str(name): float(value) for name, value in field["effects"].items()}
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise ValueError(f"the model's holidays are not readable: {error!r}") from None
    date_days = _day_numbers(np.asarray(dates_ns, dtype=np.int64))
    if not effects or not date_days.size:
        return np.zeros(date_days.shape[0])
    days, names = _calendar_days(country, subdivision, int(date_days.min()), int(date_days.max()))
    by_day: dict[int, float] = {}
    for day, name in zip(days.tolist(), names, strict=True):
        by_day[day] = by_day.get(day, 0.0) + effects.get(name, 0.0)
    return np.array([by_day.get(day, 0.0) for day in date_days.tolist()], dtype=np.float64)
