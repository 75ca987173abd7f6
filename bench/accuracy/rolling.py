"""make accuracy's day-ahead from a rolling origin (issue 42): how a grid operator uses an
hourly forecast, every day the next 24 hours from the readings up to that day.

The hourly part's day-ahead figure (:mod:`bench.accuracy.hourly`) rests on one day, the
window's first. Here every method is fitted again at :func:`origins` over the same 30-day
window, :data:`~bench.accuracy.datasets.ROLLING_EVERY_DAYS` days apart (six origins, each
on another weekday), each time on every hour before its origin, and asked for the next 24
hours: fleetcast through its processing and training jobs as a daily upload would run them
(the export's first 24 hours read), every peer fitted anew on the hours before the origin
(AutoGluon too, with the hourly part's time limit and ``prediction_length`` 24). Each
customer's 24-hour forecasts are then put end to end and scored as one horizon: WAPE, MASE,
wQL and the 80% interval's coverage over all its origins' hours (:func:`pooled`). A
method's CPU per customer is one origin's: its mean over the origins.

An origin is a split of one held-back day (:func:`bench.accuracy.datasets.split`, horizon
one day, the window the day's distance from the last): nothing of that day or later is
shown to any method at that origin.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console

from bench.accuracy import fleetcast_run, hourly, peers
from bench.accuracy.datasets import (
    HOURLY,
    ROLLING_EVERY_DAYS,
    CustomerSplit,
    DataSet,
    SplitSet,
    split,
)
from bench.accuracy.report import FLEETCAST, DataSetResult
from bench.accuracy.scoring import check_forecasts

# The smoke's origins (its first two): it checks the pooling, not the figures.
SMOKE_ORIGINS = 2


def origins(days: int, smoke: bool = False) -> list[int]:
    """The window's days (0: its first) a forecast is made from."""
    found = list(range(0, days, ROLLING_EVERY_DAYS))
    return found[:SMOKE_ORIGINS] if smoke else found


def splits(
    data_set: DataSet,
    readings: pd.DataFrame,
    days: int,
    customers: int | None = None,
    smoke: bool = False,
) -> list[SplitSet]:
    """One hourly split per origin of the last ``days``-day window: the origin's day held
    back (24 hours), every reading before it to fit."""
    return [
        split(data_set, 1, customers, readings, days - 1 - day, HOURLY)
        for day in origins(days, smoke)
    ]


def evaluate(
    data_set: DataSet,
    readings: pd.DataFrame,
    days: int,
    scratch: Path,
    console: Console,
    options: hourly.PeerOptions,
) -> DataSetResult:
    """fleetcast and every hourly peer fitted at each origin of the last ``days``-day
    window, each forecasting the origin's next 24 hours, scored end to end."""
    began = time.perf_counter()
    by_origin = splits(data_set, readings, days, options.customers, options.smoke)
    runs: list[fleetcast_run.FleetcastRun] = []
    forecasts: list[dict[str, peers.Forecasts]] = []
    autogluon: dict[str, object] | None = None
    for day, split_set in zip(origins(days, options.smoke), by_origin, strict=True):
        label = f"{data_set.key}, hourly, day-ahead from day {day + 1} of {days}"
        with console.status(f"{label}: fleetcast hourly ({len(split_set.customers)})"):
            run = fleetcast_run.run(
                split_set.customers,
                scratch / f"{data_set.key}-rolling-{day}",
                {
                    "DefaultHolidayCountry": data_set.holiday_country,
                    "ModelFrequency": HOURLY.model_frequency,
                },
            )
        found, leaderboard = hourly.peer_forecasts(
            split_set.customers, HOURLY.per_day, label, options, f"{data_set.key}-rolling", console
        )
        autogluon = autogluon or leaderboard
        origin = {FLEETCAST: run.forecasts, **found}
        check_forecasts(split_set.customers, origin, HOURLY.per_day, hourly.NAIVE_SEASONS)
        runs.append(run)
        forecasts.append(origin)
    customers, pooled_forecasts = pooled([s.customers for s in by_origin], forecasts)
    first = by_origin[0]
    return hourly.scored(
        dataclasses.replace(first, customers=customers, window=0),
        _merged(runs, pooled_forecasts[FLEETCAST]),
        pooled_forecasts,
        len(customers[0].actuals),
        f"day-ahead from a rolling origin (every {ROLLING_EVERY_DAYS}th day's next 24 hours, "
        f"{len(by_origin)} origins)",
        autogluon,
        time.perf_counter() - began,
        days,
        held_back_days(customers),
    )


def held_back_days(customers: list[CustomerSplit]) -> str:
    """The origins' days most customers share, and how many do: "2013-12-02, 12-07, ...
    (87 of 97 customers)"."""
    spans = Counter(
        tuple(sorted({f"{hour:%Y-%m-%d}" for hour in c.horizon_index})) for c in customers
    )
    span, count = spans.most_common(1)[0]
    days = ", ".join([span[0], *(day[5:] for day in span[1:])])
    return f"the days {days} ({count} of {len(customers)} customers)"


def pooled(
    by_origin: list[list[CustomerSplit]], forecasts: list[dict[str, peers.Forecasts]]
) -> tuple[list[CustomerSplit], dict[str, peers.Forecasts]]:
    """Every origin's customers and forecasts end to end: a customer of every origin gets
    one split whose horizon is its origins' hours in order (its series the first origin's,
    MASE's scale) and each method one forecast of them (NaN for an origin it did not
    forecast the customer at; an interval only where it had one at every origin; CPU per
    customer the mean over the origins). A method is pooled only where every origin has
    it: AutoGluon's base models are those its time limit let it fit, origin by origin
    (its Theta fitted at some of Cambridge's origins and not at others, 2026-12-07)."""
    indexed = [{c.customer_id: c for c in split} for split in by_origin]
    customers = [
        dataclasses.replace(
            first,
            horizon_index=pd.DatetimeIndex(
                np.concatenate([by_id[first.customer_id].horizon_index for by_id in indexed])
            ),
            actuals=np.concatenate([by_id[first.customer_id].actuals for by_id in indexed]),
        )
        for first in by_origin[0]
        if all(first.customer_id in by_id for by_id in indexed)
    ]
    methods = [name for name in forecasts[0] if all(name in origin for origin in forecasts)]
    return customers, {
        name: _end_to_end(
            [origin[name] for origin in forecasts], [c.customer_id for c in customers]
        )
        for name in methods
    }


def _end_to_end(origins_forecasts: list[peers.Forecasts], ids: list[str]) -> peers.Forecasts:
    day = HOURLY.per_day
    missing = np.full(day, np.nan)
    values = {c: np.concatenate([f.values.get(c, missing) for f in origins_forecasts]) for c in ids}
    cpu = {
        c: float(np.mean([f.cpu_seconds.get(c, np.nan) for f in origins_forecasts])) for c in ids
    }
    quantiles: dict[float, dict[str, np.ndarray]] = {}
    for level in origins_forecasts[0].quantiles:
        quantiles[level] = {
            c: np.concatenate([f.quantiles[level][c] for f in origins_forecasts])
            for c in ids
            if all(c in f.quantiles.get(level, {}) for f in origins_forecasts)
        }
    return peers.Forecasts(values, cpu, quantiles)


def _merged(
    runs: list[fleetcast_run.FleetcastRun], forecasts: peers.Forecasts
) -> fleetcast_run.FleetcastRun:
    """The origins' fleetcast runs as one: their CPU and customers trained added up, every
    customer that failed or missed hours at any origin."""
    return fleetcast_run.FleetcastRun(
        forecasts=forecasts,
        training_cpu_seconds=sum(r.training_cpu_seconds for r in runs),
        processing_cpu_seconds=sum(r.processing_cpu_seconds for r in runs),
        trained=sum(r.trained for r in runs),
        failed={c: why for r in runs for c, why in r.failed.items()},
        hyperparameters=runs[0].hyperparameters,
        instances=runs[0].instances,
        incomplete=sorted({c for r in runs for c in r.incomplete}),
    )
