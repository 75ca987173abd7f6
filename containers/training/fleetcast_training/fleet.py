"""The fleet family: gradient-boosted trees (LightGBM) learnt across every customer of the
instance's shard at once, each customer's series scaled by its own level.

A shard's customers are one utility's meters, on one calendar, in one climate: what the
trees learn from thousands of them (how a week's shape follows its level, how a customer's
use moves with the season, what a holiday does) a per-series model cannot learn from one.
This is what the published frontier on load data does (LightGBM across series in fev-bench
and GIFT-Eval; AutoGluon's DirectTabular), written for the budget of a few milliseconds a
customer.

**Direct multi-step**: one model for every step ahead of an origin, the step a feature, so
a forecast is one prediction per step with no recursion. Each sample is a customer, an
origin and a step; its target is the period's value over the customer's level (the mean of
its four weeks before the origin), and its features (:data:`FEATURES`) are what a
forecaster of meter data would look at: the same weekday of each of the four weeks before,
the last day and week, the four weeks' spread, the year before (the target's week over the
origin's four weeks, a year earlier: how the season moved then), the calendar (weekday, day
of the year), the customer's public holidays (the calendar every family uses), the step,
and the customer's size.

**Honest backtest**: the trees are fitted once an instance, on samples whose targets are
all before the first backtest window's origin, for every customer of the shard; they
forecast every window from its own origin, and the served forecast from the history's end
(its features are the latest periods'): the backtest that weighs and calibrates the family
is the served trees' own. Only a fleet too young for samples before the first window gets
trees of its whole history instead, and no backtest of the family. A window's origin is
the same period for every customer whose history ends with the fleet's last period; a
customer whose history ends earlier is not scored on the windows (the trees would have
seen other customers' periods after its origin).

**Served like every family**: what the trees say for a customer (the path of the fitted
horizon and its errors' deviation by step) goes into its archive
(:mod:`fleetcast_forecasters.fleet`); the trees stay in the job.

**Daily and hourly** (:class:`Unit`): a season is a week in either (7 days, 168 hours), the
level four weeks, a year 52 weeks; an hourly model's "weekday" is the hour of the week, and
it has the hour of the day and its last day's mean besides. Its served path is at least a
week of hours, whatever the export's horizon.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import HolidayCalendar, holiday_dates
from fleetcast_contracts.training import FLEET_TEACHERS
from fleetcast_forecasters.fleet import KIND
from fleetcast_forecasters.gaussian import common_fields
from fleetcast_training.grid import INTERVAL_WIDTH
from fleetcast_training.history import History

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

LEVEL_WEEKS = 4  # a customer's level: the mean of its four weeks before the origin
SAME_WEEKDAYS = 4  # lags: the target's weekday in each of the four weeks before the origin
YEAR_WEEKS = 52  # the same weekday (and hour) a year earlier
# The grid's length: two years of history, the backtest windows and the lags' reach.
GRID_DAYS = 2 * 365 + 120
# Customers the trees learn from, at most (a stable sample of the shard's and the stored
# teachers'): enough for the shapes a fleet has, few enough that a fit takes seconds
# however large the shard; processing adds stored customers up to it (contracts.training).
SAMPLE_CUSTOMERS = FLEET_TEACHERS
# Customer-origins per fit, spread over a year's origins (a daily model's 52 weekly ones, an
# hourly model's 364 daily ones: Unit.origin_spacing). An hourly customer-origin's features
# cost more (48 steps and more features) and it gives more samples: half as many.
ORIGIN_BUDGET = 8_000
HOURLY_ORIGIN_BUDGET = 4_000
# Of a customer-origin's steps, about this many are samples (daily: five of a 30-day
# horizon; hourly: sixteen of 720 hours, drawn from 48 the origin's customers share, so the
# trees' samples stay a few tens of thousands and their features are built for 48 steps,
# not 720: a fit is then a second or two for a shard).
SAMPLES_PER_CUSTOMER = 5
HOURLY_SAMPLES_PER_CUSTOMER = 16
HOURLY_STEPS_PER_ORIGIN = 48
MIN_SAMPLES = 100
# Customers with a level and a horizon of history a fleet needs before the trees learn from
# it: fewer teach them one customer's quirks, not a fleet's (the family then stays out).
MIN_TEACHERS = 10
TREES = 40
LEARNING_RATE = 0.2
LEAVES = 31
# ``log_level`` is a customer's log level over its fleet's typical one plus this: positive
# for any customer above e^-20 of the fleet's typical level (:func:`_log_reference`).
LOG_LEVEL_FROM = 20.0
# Normal errors: the standard deviation is the mean absolute error times sqrt(pi / 2).
SIGMA_PER_MAE = float(np.sqrt(np.pi / 2))
# A customer's mean absolute error relative to its level where no customer has a backtest.
TYPICAL_ERROR = 0.3

FEATURES = (
    *(f"same_weekday_{k}" for k in range(1, SAME_WEEKDAYS + 1)),
    "last_period",
    "last_week",
    "spread",
    "year_before",
    "weekday",
    "day_of_year",
    "holiday",
    "step",
    "log_level",
)
# An hourly model's: the same, "weekday" being the hour of the week (0: Monday 00:00 UTC),
# with the hour of the day, the last day's mean (over the level), the target's hour of the
# last day, its hour's mean and median over the four weeks and its median over the last
# week (a household's hour is skewed: the trees fit the median, and a mean carries its
# spikes), the last six hours' mean and each of the last three hours (the hour just before
# the origin is ``last_period``): what the first hours ahead rest on most.
HOURLY_FEATURES = (
    *FEATURES,
    "hour",
    "last_day",
    "same_hour_last_day",
    "hour_profile",
    "hour_median",
    "hour_median_week",
    "last_hours",
    "hour_before_last",
    "two_hours_before_last",
)
LAST_HOURS = 6  # the hours before the origin whose mean is `last_hours`


@dataclass(frozen=True)
class Unit:
    """The fleet's trees in a frequency's periods: a season is a week (7 days or 168
    hours), a customer's level its four weeks before the origin, a year 52 weeks."""

    frequency: Frequency
    features: tuple[str, ...]
    samples_per_customer: int
    # The steps of an origin whose features are built (all of a daily horizon's).
    steps_per_origin: int
    # Periods between two of a fit's origins: a week in a daily model; a day in an hourly
    # one, whose origins then start on every weekday (a week apart, every origin of a year
    # started at the same hour of the week, and the trees' step and hour of the week told
    # one thing: they learnt from 52 origins' four weeks, not 364).
    origin_spacing: int
    origin_budget: int  # customer-origins per fit

    @property
    def season(self) -> int:
        return self.frequency.season_periods

    @property
    def level_periods(self) -> int:
        return LEVEL_WEEKS * self.season

    @property
    def year(self) -> int:
        return YEAR_WEEKS * self.season

    @property
    def grid_periods(self) -> int:
        return GRID_DAYS * self.frequency.periods_per_day

    @property
    def period_us(self) -> int:
        return self.frequency.period_seconds * 1_000_000

    @property
    def origins(self) -> int:
        """A fit's origins: a year's."""
        return self.year // self.origin_spacing

    @property
    def hourly(self) -> bool:
        return self.frequency.periods_per_day > 1


def unit_of(frequency: Frequency) -> Unit:
    if frequency.periods_per_day == 1:
        return Unit(
            frequency,
            FEATURES,
            SAMPLES_PER_CUSTOMER,
            frequency.max_period,
            frequency.season_periods,
            ORIGIN_BUDGET,
        )
    return Unit(
        frequency,
        HOURLY_FEATURES,
        HOURLY_SAMPLES_PER_CUSTOMER,
        HOURLY_STEPS_PER_ORIGIN,
        frequency.periods_per_day,
        HOURLY_ORIGIN_BUDGET,
    )


@dataclass(frozen=True)
class FleetForecast:
    """What the fleet's trees say for one customer: its backtest (windows by steps, NaN
    where it is not scored), the served path from the period after its history and each
    step's deviation."""

    backtest: FloatArray
    path: FloatArray
    sigma: FloatArray
    last_history: np.datetime64
    season: int  # the frequency's week (Unit.season): what repeats past the path's end

    def model(self, uncertainty_samples: int, kind: str = KIND) -> dict[str, Any]:
        """The archive's ``model.json`` (:mod:`fleetcast_forecasters.fleet`), as a model
        of ``kind`` (the fleet family, or a cold start)."""
        return {
            "kind": kind,
            "path": np.round(self.path, 6).tolist(),
            "sigma": np.round(self.sigma, 6).tolist(),
            "season": self.season,
            **common_fields(self.last_history, uncertainty_samples, INTERVAL_WIDTH),
        }


@dataclass(frozen=True)
class _Grid:
    """The shard's histories right-aligned: ``values[customer, column]``, the last column
    every customer's last fitted period (``end``, periods since 1970)."""

    values: npt.NDArray[np.float32]
    end: npt.NDArray[np.int64]
    holidays: npt.NDArray[np.bool_]  # [calendar group, day - first_day]
    group: npt.NDArray[np.intp]  # each customer's calendar group
    first_day: int
    unit: Unit
    # The fleet's typical log level, which ``log_level`` is measured from
    # (:func:`_log_reference`).
    log_reference: float = 0.0

    @property
    def columns(self) -> int:
        return int(self.values.shape[1])

    def period(
        self, rows: npt.NDArray[np.intp], columns: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Each of ``rows``' period (since 1970) at its own of ``columns``."""
        return self.end[rows] - (self.columns - 1 - columns)

    def window(self, start: int, stop: int, rows: npt.NDArray[np.intp]) -> FloatArray:
        """Columns ``start:stop`` (clipped to the grid; NaN outside it) of ``rows``."""
        width = stop - start
        out = np.full((len(rows), width), np.nan)
        lo, hi = max(start, 0), min(stop, self.columns)
        if lo < hi:
            out[:, lo - start : hi - start] = self.values[rows, lo:hi]
        return out

    def windows(
        self, starts: npt.NDArray[np.int64], width: int, rows: npt.NDArray[np.intp]
    ) -> FloatArray:
        """Each of ``rows``' ``width`` columns from its own of ``starts`` (NaN outside the
        grid): :meth:`window` of many origins at once, each a block copy of its row."""
        inside = np.clip(starts, 0, self.columns - width)
        blocks = np.lib.stride_tricks.sliding_window_view(self.values, width, axis=1)
        out = blocks[rows, inside].astype(np.float64)
        for index in np.flatnonzero(inside != starts):  # (the few that reach outside it)
            start = int(starts[index])
            out[index] = self.window(start, start + width, rows[index : index + 1])[0]
        return out


def _nanmean(values: FloatArray) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    finite = np.isfinite(values)
    count = finite.sum(axis=1)
    total = np.where(finite, values, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count, count


def _recent(
    grid: _Grid, rows: npt.NDArray[np.intp], origins: npt.NDArray[np.int64]
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.int64]]:
    """Each of ``rows``' four weeks before its origin over its level (customers x
    periods), its level and the number of usable values the level rests on."""
    recent = grid.windows(origins - grid.unit.level_periods, grid.unit.level_periods, rows)
    level, counted = _nanmean(recent)
    with np.errstate(invalid="ignore", divide="ignore"):
        return recent / level[:, None], level, counted


def _features(
    grid: _Grid,
    rows: npt.NDArray[np.intp],
    origin: int | npt.NDArray[np.int64],
    step: npt.NDArray[np.int64],
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """For customers ``rows`` at column ``origin`` (one for all, or each row's own): the
    features of each ``step`` (periods ahead, 0 the origin's; one list for all, or each
    row's own: rows x steps) as customers x steps x features, each customer's level and
    the number of usable values it rests on. Every row's features are its own: the same
    whether it is built alone or with others (a fit's samples are built many origins at
    a time, a few hundred numpy calls a fit instead of a few hundred per origin)."""
    origins = np.broadcast_to(np.asarray(origin, dtype=np.int64), rows.shape)
    steps = np.broadcast_to(step, (len(rows), step.shape[-1]))
    recent = _recent(grid, rows, origins)
    found = _chosen_features(grid, rows, origins, steps, np.ones(steps.shape, bool), recent)
    _, level, counted = recent
    return found.reshape(*steps.shape, -1), level, counted.astype(np.float64)


def _chosen_features(
    grid: _Grid,
    rows: npt.NDArray[np.intp],
    origins: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    chosen: npt.NDArray[np.bool_],
    recent: tuple[FloatArray, FloatArray, npt.NDArray[np.int64]],
) -> FloatArray:
    """The features (samples x features) of the ``chosen`` of ``rows`` x ``steps`` (each
    row at its own of ``origins``), in row-major order; ``recent``: :func:`_recent` of
    them. What a customer has once (its level, its hours' profile) is computed a row,
    what a step has only for the chosen: a fit keeps a few of each origin's steps."""
    unit = grid.unit
    season, level_periods, year = unit.season, unit.level_periods, unit.year
    per_day = unit.frequency.periods_per_day
    scaled, level, counted = recent
    at_row, at_step = np.nonzero(chosen)
    step = steps[at_row, at_step]
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = np.sqrt(_nanmean((scaled - 1.0) ** 2)[0])
        last_week = _nanmean(scaled[:, -season:])[0]
        year_level = _nanmean(grid.windows(origins - year - level_periods, level_periods, rows))[0]
    out = np.full((len(step), len(unit.features)), np.nan)
    for k in range(1, SAME_WEEKDAYS + 1):
        # The target's weekday k weeks before the origin's week (columns of ``recent``).
        out[:, k - 1] = scaled[at_row, level_periods - k * season + step % season]
    _newcomers_lags(out, scaled, at_row, step, unit, counted)
    out[:, SAME_WEEKDAYS] = scaled[at_row, -1]
    out[:, SAME_WEEKDAYS + 1] = last_week[at_row]
    out[:, SAME_WEEKDAYS + 2] = spread[at_row]
    # The target's week a year earlier, over the origin's four weeks a year earlier.
    reach = int(steps.max()) + 1
    year_week = grid.windows(origins - year - season // 2, reach + season, rows)
    finite = np.isfinite(year_week)
    sums = np.concatenate(
        [np.zeros((len(rows), 1)), np.cumsum(np.where(finite, year_week, 0), 1)], 1
    )
    counts = np.concatenate([np.zeros((len(rows), 1)), np.cumsum(finite, 1)], 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        week_mean = (sums[at_row, step + season] - sums[at_row, step]) / (
            counts[at_row, step + season] - counts[at_row, step]
        )
        out[:, SAME_WEEKDAYS + 3] = week_mean / year_level[at_row]
    periods = grid.period(rows, origins)[at_row] + step  # each step's, since 1970
    days = periods // per_day
    # The period of the week, Monday first: a daily model's weekday, an hourly one's hour.
    out[:, SAME_WEEKDAYS + 4] = unit.frequency.period_of_week(periods)
    dates = days.astype("datetime64[D]")
    out[:, SAME_WEEKDAYS + 5] = (dates - dates.astype("datetime64[Y]")).astype(np.int64)
    at = np.clip(days - grid.first_day, 0, grid.holidays.shape[1] - 1)
    out[:, SAME_WEEKDAYS + 6] = grid.holidays[grid.group[rows][at_row], at]
    out[:, SAME_WEEKDAYS + 7] = step
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:, SAME_WEEKDAYS + 8] = np.log(level)[at_row] - grid.log_reference + LOG_LEVEL_FROM
        if unit.hourly:
            out[:, SAME_WEEKDAYS + 9] = periods % per_day
            out[:, SAME_WEEKDAYS + 10] = _nanmean(scaled[:, -per_day:])[0][at_row]
            # The target's hour of the day on the latest day (``recent`` ends at the
            # origin and holds whole days, so its columns' hours repeat every day), and
            # that hour's mean over the four weeks.
            phase = step % per_day
            out[:, SAME_WEEKDAYS + 11] = scaled[at_row, level_periods - per_day + phase]
            by_hour = scaled.reshape(len(rows), level_periods // per_day, per_day)
            out[:, SAME_WEEKDAYS + 12] = _nanmean(by_hour)[0][at_row, phase]
            out[:, SAME_WEEKDAYS + 13] = _nanmedian_axis1(by_hour)[at_row, phase]
            week_days = season // per_day
            out[:, SAME_WEEKDAYS + 14] = _nanmedian_axis1(by_hour[:, -week_days:])[at_row, phase]
            out[:, SAME_WEEKDAYS + 15] = _nanmean(scaled[:, -LAST_HOURS:])[0][at_row]
            out[:, SAME_WEEKDAYS + 16] = scaled[at_row, -2]
            out[:, SAME_WEEKDAYS + 17] = scaled[at_row, -3]
    return out


def _nanmedian_axis1(values: FloatArray) -> FloatArray:
    """The median over axis 1 of the finite values (NaN where there are none): numpy's
    nanmedian is a masked array's, ten times slower on these small axes."""
    ordered = np.sort(values, axis=1)  # (NaN last)
    count = np.isfinite(ordered).sum(axis=1, keepdims=True)
    low = np.take_along_axis(ordered, np.maximum(count - 1, 0) // 2, axis=1)
    high = np.take_along_axis(ordered, count // 2 - (count == 0), axis=1)
    with np.errstate(invalid="ignore"):
        return np.where(count > 0, (low + high) / 2, np.nan)[:, 0]


def _newcomers_lags(
    out: FloatArray,
    scaled: FloatArray,
    at_row: npt.NDArray[np.intp],
    step: npt.NDArray[np.int64],
    unit: Unit,
    counted: npt.NDArray[np.int64],
) -> None:
    """A customer with less than a week of usable periods in its four weeks (a cold
    start; ``counted`` of them) has none or few of the weekly lags, which the trees never
    saw missing all at once (their samples have a week at least): where all are missing,
    what it has nearest them, the same period of its latest day that has one (a daily
    model's latest day). Every other customer's features are left as they are. ``out``:
    samples x features, each sample ``scaled``'s row ``at_row`` at ``step``."""
    newcomer = counted < unit.season
    if not newcomer.any():  # (every sample the trees learn from has a week)
        return
    missing = newcomer[at_row] & np.isnan(out[:, :SAME_WEEKDAYS]).all(axis=1)
    if not missing.any():
        return
    per_day, level_periods = unit.frequency.periods_per_day, unit.level_periods
    nearest = np.full(missing.shape, np.nan)
    for days_back in range(unit.season // per_day, 0, -1):  # the latest day wins
        value = scaled[at_row, level_periods - days_back * per_day + step % per_day]
        nearest = np.where(np.isfinite(value), value, nearest)
    for k in range(SAME_WEEKDAYS):
        out[:, k] = np.where(missing, nearest, out[:, k])


def _grid(
    histories: Iterable[History],
    calendars: Sequence[HolidayCalendar | None],
    horizon: int,
    unit: Unit,
) -> _Grid:
    """The grid of ``histories`` (one per calendar, read one at a time: a shard's whole
    histories are never held at once)."""
    ends = np.zeros(len(calendars), dtype=np.int64)
    columns_count = unit.grid_periods
    values = np.full((len(calendars), columns_count), np.nan, dtype=np.float32)
    for row, history in enumerate(histories):
        periods = history.times.astype("datetime64[us]").astype(np.int64) // unit.period_us
        ends[row] = periods[-1]
        columns = columns_count - 1 - (ends[row] - periods)
        inside = columns >= 0
        values[row, columns[inside]] = history.values[inside]
    per_day = unit.frequency.periods_per_day
    first_day = (int(ends.min()) - columns_count - unit.year - unit.season) // per_day
    last_day = (int(ends.max()) + horizon + unit.season) // per_day + 1
    keys: dict[tuple[str, str | None] | None, int] = {}
    group = np.empty(len(calendars), dtype=np.intp)
    for row, calendar in enumerate(calendars):
        key = None if calendar is None else (calendar.country, calendar.subdivision)
        group[row] = keys.setdefault(key, len(keys))
    table = np.zeros((len(keys), last_day - first_day + 1), dtype=np.bool_)
    first_year = np.datetime64(first_day, "D").astype("datetime64[Y]").astype(int) + 1970
    last_year = np.datetime64(last_day, "D").astype("datetime64[Y]").astype(int) + 1970
    for key, index in keys.items():
        if key is None:
            continue
        for day, _ in holiday_dates(key[0], key[1], range(first_year, last_year + 1)):
            at = int(np.datetime64(day, "D").astype(np.int64)) - first_day
            if 0 <= at < table.shape[1]:
                table[index, at] = True
    return _Grid(values, ends, table, group, first_day, unit)


# An origin of a fit's samples as drawn: its column, its customers (rows), its steps and
# which of each customer's steps are samples (rows x steps).
_Drawn = tuple[int, npt.NDArray[np.intp], npt.NDArray[np.int64], npt.NDArray[np.bool_]]
# The seed of the fleet's generators: its sample of customers, and each origin's draws.
SEED = 39


@dataclass(frozen=True)
class _Samples:
    """A fit's samples: features (samples x features), targets and each one's origin."""

    features: FloatArray
    targets: FloatArray
    origins: npt.NDArray[np.int64]

    @staticmethod
    def joined(parts: Sequence[_Samples], unit: Unit) -> _Samples:
        if not parts:
            return _Samples(np.zeros((0, len(unit.features))), np.zeros(0), np.zeros(0, np.int64))
        return _Samples(
            np.concatenate([part.features for part in parts]),
            np.concatenate([part.targets for part in parts]),
            np.concatenate([part.origins for part in parts]),
        )


def _origins(grid: _Grid, cutoff: int, horizon: int) -> npt.NDArray[np.int64]:
    """A fit's origins: the year's (:attr:`Unit.origins`) latest whose ``horizon`` ends by
    column ``cutoff``, on the grid's lattice (a :attr:`Unit.origin_spacing` apart, counted
    back from the grid's last ``horizon``)."""
    unit = grid.unit
    top = grid.columns - horizon
    skip = -(-(grid.columns - cutoff) // unit.origin_spacing)  # (whole spacings, rounded up)
    origins = top - (skip + np.arange(unit.origins, dtype=np.int64)) * unit.origin_spacing
    return origins[origins >= unit.season]


def _training_set(
    grid: _Grid,
    sample: npt.NDArray[np.intp],
    cutoff: int,
    horizon: int,
) -> _Samples:
    """Samples whose targets are all before column ``cutoff``: origins over the year
    before it (:func:`_origins`: so the trees see every season and holiday; weekly in a
    daily model, daily in an hourly one), each with its share of
    :attr:`Unit.origin_budget` customers of ``sample`` (all of a small fleet's).

    Each origin draws its customers, steps and samples from a generator of its own
    column, so an origin's samples are the same in every fit that has it. Drawn origin
    by origin, then built :data:`_BUILT_AT_ONCE` customer-steps at a time, many origins
    each."""
    unit = grid.unit
    per_origin = max(1, unit.origin_budget // unit.origins)
    origins = _origins(grid, cutoff, horizon)
    parts: list[_Samples] = []
    drawn: list[_Drawn] = []
    for origin in origins.tolist():
        rng = np.random.default_rng([SEED, origin])
        rows = (
            sample
            if len(sample) <= per_origin
            else np.sort(rng.choice(sample, per_origin, replace=False))
        )
        # A few steps of each customer-origin: the step is a feature, and neighbouring
        # steps of one origin teach the trees little more than one of them. An hourly
        # origin's customers draw theirs from the same few dozen of its 720 steps, the
        # only ones whose features are built.
        steps = np.arange(horizon)
        if unit.steps_per_origin < horizon:
            steps = _shared_steps(rng, horizon, unit)
        chosen = rng.random((len(rows), len(steps))) < unit.samples_per_customer / min(
            len(steps), unit.steps_per_origin
        )
        drawn.append((origin, rows, steps, chosen))
    if drawn:
        width = max(len(steps) for _, _, steps, _ in drawn)
        per_batch = max(1, _BUILT_AT_ONCE // (width * max(len(rows) for _, rows, _, _ in drawn)))
        for first in range(0, len(drawn), per_batch):
            parts.append(_samples(grid, drawn[first : first + per_batch], width))
    return _Samples.joined(parts, unit)


# Customer-steps whose features are built at once (a few tens of MB of features): enough
# origins together that numpy's per-call cost is small beside its work.
_BUILT_AT_ONCE = 100_000


def _samples(grid: _Grid, drawn: list[_Drawn], width: int) -> _Samples:
    """The chosen samples of ``drawn`` origins (each its origin, customers, steps and which
    of them are samples), in their order: every origin's steps padded to ``width`` with
    its last (never chosen)."""
    unit = grid.unit
    rows = np.concatenate([rows for _, rows, _, _ in drawn])
    origins = np.concatenate([np.full(len(rows), origin) for origin, rows, _, _ in drawn])
    steps = np.concatenate(
        [
            np.broadcast_to(np.pad(steps, (0, width - len(steps)), mode="edge"), (len(rows), width))
            for _, rows, steps, _ in drawn
        ]
    )
    chosen = np.concatenate(
        [np.pad(chosen, ((0, 0), (0, width - chosen.shape[1]))) for _, _, _, chosen in drawn]
    )
    recent = _recent(grid, rows, origins)
    _, level, counted = recent
    with np.errstate(invalid="ignore", divide="ignore"):
        reach = int(steps.max()) + 1
        actual = np.take_along_axis(grid.windows(origins, reach, rows), steps, 1) / level[:, None]
    # (a sample's level needs a week of usable values)
    usable = (counted >= unit.season) & (level > 0)
    keep = usable[:, None] & np.isfinite(actual) & chosen
    features = _chosen_features(grid, rows, origins, steps, keep, recent)
    return _Samples(features, actual[keep], np.broadcast_to(origins[:, None], keep.shape)[keep])


def _shared_steps(rng: np.random.Generator, horizon: int, unit: Unit) -> npt.NDArray[np.int64]:
    """An hourly origin's shared steps: :attr:`Unit.steps_per_origin` of its horizon, and
    half as many again in its first two days, where each hour's forecast rests most on the
    hours just before the origin."""
    spread = rng.choice(horizon, unit.steps_per_origin, replace=False)
    near = rng.choice(min(2 * unit.frequency.periods_per_day, horizon), unit.steps_per_origin // 2)
    return np.unique(np.concatenate([spread, near])).astype(np.int64)


# Samples a dataset's bin boundaries are found from (LightGBM's default, 200,000, is all
# of a fit's): 63 bins a feature are as well placed from 20,000, at half the dataset's CPU.
BIN_SAMPLES = 20_000


def _dataset(features: FloatArray, targets: FloatArray, unit: Unit) -> Any:
    """The samples as LightGBM's dataset."""
    import lightgbm

    return lightgbm.Dataset(
        features.astype(np.float32),
        targets.astype(np.float32),
        feature_name=list(unit.features),
        categorical_feature=["weekday"],
        free_raw_data=True,
        params={"verbose": -1, "bin_construct_sample_cnt": BIN_SAMPLES},
    )


def _fit(dataset: Any, threads: int) -> Any:
    import lightgbm

    params = {
        # WAPE is an absolute error: the median of the scaled target, not its mean.
        "objective": "l1",
        "learning_rate": LEARNING_RATE,
        "num_leaves": LEAVES,
        "min_data_in_leaf": 50,
        "feature_fraction": 0.9,
        "bagging_fraction": 0.8,
        "bagging_freq": 1,
        "num_threads": threads,
        "deterministic": True,
        "force_row_wise": True,
        "max_bin": 63,
        "seed": 39,
        "verbose": -1,
    }
    return lightgbm.train(params, dataset, num_boost_round=TREES)


def _predict(
    booster: Any, grid: _Grid, rows: npt.NDArray[np.intp], origin: int, horizon: int, threads: int
) -> tuple[FloatArray, FloatArray]:
    """Each of ``rows``' forecast from column ``origin`` (customers x steps; NaN where a
    customer has no usable level) and its level."""
    found, level, counted = _features(grid, rows, origin, np.arange(horizon))
    flat = found.reshape(-1, len(grid.unit.features)).astype(np.float32)
    scaled = booster.predict(flat, num_threads=threads).reshape(len(rows), horizon)
    usable = (counted >= 1) & (level > 0)
    forecast = np.where(usable[:, None], np.maximum(scaled, 0.0) * level[:, None], np.nan)
    return forecast, level


def learn(
    customer_ids: Sequence[str],
    histories: Iterable[History],
    calendars: Sequence[HolidayCalendar | None],
    horizon: int,
    windows: int,
    threads: int = 1,
    teachers: int = 0,
    frequency: Frequency = Frequency.DAILY,
) -> dict[str, FleetForecast]:
    """The fleet's forecast of every customer (``histories``: each one's periods to fit,
    of ``frequency``, at least one, in the order of ``customer_ids``), with backtests on ``windows``
    windows of ``horizon`` periods ending at its last period. Customers with no usable
    period in their last four weeks get none. ``histories`` and ``calendars`` may go on
    with ``teachers`` more customers' (stored customers the run does not train): the
    trees learn from them too, and they are not forecast."""
    if not customer_ids:
        return {}
    forecast_rows = len(customer_ids)
    started = time.process_time()
    unit = unit_of(frequency)
    grid = _grid(histories, calendars, horizon, unit)
    needed = unit.level_periods + horizon
    able = int((np.isfinite(grid.values).sum(axis=1) >= needed).sum())
    if able < MIN_TEACHERS:
        logger.info(
            "the fleet family is left out: %d customers with %d periods, it learns from %d",
            able,
            needed,
            MIN_TEACHERS,
        )
        return {}
    everyone = np.arange(forecast_rows, dtype=np.intp)
    rng = np.random.default_rng(SEED)
    learners = np.arange(forecast_rows + teachers, dtype=np.intp)
    sample = np.sort(rng.permutation(learners)[:SAMPLE_CUSTOMERS])
    grid = replace(grid, log_reference=_log_reference(grid, sample, windows * horizon))
    fleet_end = int(grid.end[:forecast_rows].max())
    current = grid.end[:forecast_rows] == fleet_end
    # The served path is at least a season long: past its end its last season repeats
    # (an export of two days still serves an hourly customer's week of hours).
    served = max(horizon, unit.season)
    backtest, booster, fitted_samples = _backtests(
        grid, sample, current, windows, horizon, served, threads
    )
    if booster is None:
        # Too few samples before the first window (a young fleet): trees of the whole
        # history serve, and no customer has a backtest of the family.
        samples = _training_set(grid, sample, grid.columns, served)
        if len(samples.targets) < MIN_SAMPLES:
            logger.info(
                "the fleet family has too little data to learn from (%d samples)",
                len(samples.targets),
            )
            return {}
        booster = _fit(_dataset(samples.features, samples.targets, unit), threads)
        fitted_samples = len(samples.targets)
    path, level = _predict(booster, grid, everyone, grid.columns, served, threads)
    sigma = _deviations(grid, backtest, level, horizon)
    sigma = np.concatenate([sigma, np.repeat(sigma[:, -1:], served - horizon, axis=1)], axis=1)
    last_history = (grid.end[:forecast_rows] * unit.period_us).astype("datetime64[us]")
    forecasts = {
        customer_id: FleetForecast(
            backtest[row], path[row], sigma[row], last_history[row], unit.season
        )
        for row, customer_id in enumerate(customer_ids)
        if np.isfinite(path[row]).all() and np.isfinite(sigma[row]).all()
    }
    logger.info(
        "the fleet family: %d customers' trees (%d of them stored customers the run does not "
        "train) fitted on %d samples, %d forecasts, %.1f s of CPU",
        len(sample),
        int((sample >= forecast_rows).sum()),
        fitted_samples,
        len(forecasts),
        time.process_time() - started,
    )
    return forecasts


def _log_reference(grid: _Grid, sample: npt.NDArray[np.intp], held: int) -> float:
    """The median over the ``sample``'s customers of the log of each one's mean before the
    first backtest window (the grid's last ``held`` columns): ``log_level`` is a customer's
    size relative to its fleet's, whatever unit the readings are in, and nothing after the
    first window's origin reaches a backtest through it. The plain log of the level made
    a fleet's trees in kWh and in Wh differ (make accuracy's NSW households: the family's
    backtest errors by up to a quarter for one customer): LightGBM bins a feature's
    negative and positive values apart (zero a bin of its own), and households' levels in
    kWh straddle 1. Measured from :data:`LOG_LEVEL_FROM` below the typical level, every
    customer's is positive, binned as a fleet's whose levels are all above 1 always was.
    0 where no customer has a positive mean there."""
    before = grid.values[sample, : max(grid.columns - held, 0)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        means: FloatArray = np.asarray(np.nanmean(before, axis=1, dtype=np.float64))
    positive = means[np.isfinite(means) & (means > 0)]
    return float(np.median(np.log(positive))) if len(positive) else 0.0


def _backtests(
    grid: _Grid,
    sample: npt.NDArray[np.intp],
    current: npt.NDArray[np.bool_],
    windows: int,
    horizon: int,
    served: int,
    threads: int,
) -> tuple[FloatArray, Any, int]:
    """Each customer's forecasts of the ``windows`` backtest windows (NaN where not
    ``current``: its history ends before the fleet's), the trees that made them (None
    when too few samples came before the first window) and how many samples they were
    fitted on.

    One model for every window, fitted before the first window's origin: each window's
    forecast then uses nothing at or after its own origin. The same trees make the served
    forecast, from the history's end (:func:`learn`), so the backtest that weighs and
    calibrates the family measures the trees that serve."""
    everyone = np.arange(len(current), dtype=np.intp)
    backtest = np.full((len(current), windows, horizon), np.nan)
    samples = _training_set(grid, sample, grid.columns - windows * horizon, served)
    fitted_samples = len(samples.targets)
    if fitted_samples < MIN_SAMPLES:
        return backtest, None, fitted_samples
    booster = _fit(_dataset(samples.features, samples.targets, grid.unit), threads)
    del samples
    for window in range(windows):
        origin = grid.columns - (windows - window) * horizon
        forecast, _ = _predict(booster, grid, everyone, origin, horizon, threads)
        backtest[:, window, :] = np.where(current[:, None], forecast, np.nan)
    return backtest, booster, fitted_samples


def _deviations(grid: _Grid, backtest: FloatArray, level: FloatArray, horizon: int) -> FloatArray:
    """Each customer's errors' deviation at each step: its own backtest's mean absolute
    error (the fleet's median, relative to the level, for a customer without one), shaped
    by how the fleet's errors grow with the step."""
    windows = backtest.shape[1]
    actual = np.full_like(backtest, np.nan)
    rows = np.arange(backtest.shape[0], dtype=np.intp)
    for window in range(windows):
        origin = grid.columns - (windows - window) * horizon
        actual[:, window, :] = grid.window(origin, origin + horizon, rows)
    error = np.abs(backtest - actual)
    # (all-NaN rows are customers without a backtest: their means are NaN, said below)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        relative = error / np.nanmean(np.abs(actual), axis=(1, 2))[:, None, None]
        by_step = np.nanmean(relative, axis=(0, 1)) if np.isfinite(relative).any() else None
        shape = np.ones(horizon) if by_step is None else by_step / np.nanmean(by_step)
        shape = np.where(np.isfinite(shape), shape, 1.0)
        own = np.nanmean(error, axis=(1, 2))
        typical = np.nanmedian(own / level) if np.isfinite(own / level).any() else TYPICAL_ERROR
    mae = np.where(
        np.isfinite(own), own, np.where(np.isfinite(typical * level), typical * level, 0.0)
    )
    return SIGMA_PER_MAE * mae[:, None] * shape[None, :]
