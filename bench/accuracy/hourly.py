"""make accuracy's hourly part (issue 42): hourly models against the peers a user would
pick for hourly data, day-ahead and over 30 days of hours (``python -m bench.accuracy
--hourly-only`` runs it alone).

For each data set, the last window only (the daily part's last ``horizon`` days): every
customer's readings before it summed to hours (:func:`bench.accuracy.datasets.split` with
:data:`~bench.accuracy.datasets.HOURLY`); fleetcast's jobs run with ``ModelFrequency=H``
(:mod:`bench.accuracy.fleetcast_run`), and its forecast export's 720 hours read; the peers
(:mod:`bench.accuracy.peers`) fitted once on the hourly series, each forecasting the 720
hours. Every method is then scored twice on that one forecast: **day-ahead**, its first 24
hours, and **30 days**, all 720 (:mod:`bench.accuracy.scoring`). Day-ahead from a rolling
origin, a fit at each of six origins over the window, is :mod:`bench.accuracy.rolling`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bench.accuracy import fleetcast_run, peers
from bench.accuracy.datasets import HOURLY, CustomerSplit, SplitSet
from bench.accuracy.report import (
    AUTOGLUON_ENSEMBLE,
    FLEETCAST,
    MEDIAN,
    MLFORECAST,
    NAIVE_DAY,
    NAIVE_WEEK,
    DataSetResult,
)
from bench.accuracy.scoring import check_forecasts, common_horizon, scored_results

STATSFORECAST_MODELS = ("MSTL", "AutoETS", "AutoTheta")
# The smoke leaves AutoETS out: with a season of 24 it is the slow one.
SMOKE_STATSFORECAST_MODELS = ("MSTL", "AutoTheta")
NAIVE_SEASONS = {NAIVE_DAY: 24, NAIVE_WEEK: 168}
DAY_AHEAD = 24


@dataclass(frozen=True)
class PeerOptions:
    """How a run asks for the peers: the smoke's few models, AutoGluon or not, the peers'
    cache, at most ``customers`` a set."""

    smoke: bool = False
    with_autogluon: bool = False
    peers_cache: Path | None = None
    customers: int | None = None

    @property
    def models(self) -> tuple[str, ...]:
        return SMOKE_STATSFORECAST_MODELS if self.smoke else STATSFORECAST_MODELS


def evaluate(
    split_set: SplitSet, scratch: Path, console: Console, options: PeerOptions
) -> list[DataSetResult]:
    """fleetcast and the peers on ``split_set`` (an hourly split): its day-ahead result,
    then its 30-day one."""
    customers = split_set.customers
    key = split_set.data_set.key
    horizon = len(customers[0].horizon_index)
    label = f"{key}, hourly, last {horizon // HOURLY.per_day} days"
    began = time.perf_counter()
    with console.status(f"{label}: fleetcast hourly (processing + training, {len(customers)})"):
        run = fleetcast_run.run(
            customers,
            scratch / f"{key}-hourly",
            {
                "DefaultHolidayCountry": split_set.data_set.holiday_country,
                "ModelFrequency": HOURLY.model_frequency,
            },
        )
    found, autogluon = peer_forecasts(customers, horizon, label, options, f"{key}-hourly", console)
    forecasts = {FLEETCAST: run.forecasts, **found}
    check_forecasts(customers, forecasts, horizon, NAIVE_SEASONS)
    seconds = time.perf_counter() - began
    days = horizon // HOURLY.per_day
    return [
        scored(split_set, run, forecasts, periods, title, autogluon, seconds, days)
        for periods, title in (
            (DAY_AHEAD, f"day-ahead (the first {DAY_AHEAD} hours)"),
            (horizon, f"30 days of hours ({horizon})"),
        )
    ]


def scored(
    split_set: SplitSet,
    run: fleetcast_run.FleetcastRun,
    forecasts: dict[str, peers.Forecasts],
    periods: int,
    title: str,
    autogluon: dict[str, object] | None,
    seconds: float,
    held_back_days: int,
    horizon_dates: str | None = None,
) -> DataSetResult:
    """Every method scored on the first ``periods`` hours of its forecast (``horizon_dates``:
    how the tables name the held-back hours, their first and last day by default)."""
    customers = split_set.customers
    cut = [c.first(periods) for c in customers]
    scored_customers, methods = scored_results(
        cut, {name: f.first(periods) for name, f in forecasts.items()}, tuple(NAIVE_SEASONS)
    )
    wins, total = methods[FLEETCAST].beats_naive
    return DataSetResult(
        data_set=split_set.data_set,
        customers=[c.customer_id for c in customers],
        scored=[c.customer_id for c in scored_customers],
        too_short=split_set.too_short,
        readings=split_set.readings,
        horizon=periods,
        methods=methods,
        beats_naive=wins,
        beats_naive_of=total,
        median_members=[m for m in STATSFORECAST_MODELS if m in forecasts],
        fleetcast_run=run,
        fit_days=[len(c.series) // HOURLY.per_day for c in customers],
        horizon_dates=horizon_dates or common_horizon(customers),
        seconds=seconds,
        window=split_set.window,
        autogluon=autogluon,
        frequency=HOURLY.model_frequency,
        horizon_title=title,
        held_back_days=held_back_days,
    )


def peer_forecasts(
    customers: list[CustomerSplit],
    horizon: int,
    label: str,
    options: PeerOptions,
    cache_name: str,
    console: Console,
) -> tuple[dict[str, peers.Forecasts], dict[str, object] | None]:
    """Every hourly peer's forecasts of ``customers`` ``horizon`` hours ahead, their
    hour-by-hour median included (:func:`peers.cached_or_computed`, cached as
    ``cache_name`` and the inputs' digest), and AutoGluon's leaderboard (or why it did not
    run)."""
    models = options.models
    runs = (
        *NAIVE_SEASONS,
        *models,
        MLFORECAST,
        *((AUTOGLUON_ENSEMBLE,) if options.with_autogluon else ()),
    )
    cache = peers.cache_path(options.peers_cache, cache_name, customers, horizon, runs)

    def compute() -> dict[str, peers.Forecasts]:
        with console.status(f"{label}: seasonal naive at 24 and 168 hours"):
            forecasts = {
                name: peers.seasonal_naive(customers, horizon, season)
                for name, season in NAIVE_SEASONS.items()
            }
        with console.status(f"{label}: statsforecast {', '.join(models)}"):
            forecasts.update(
                peers.statsforecast_models(
                    customers, horizon, models, HOURLY, peers.HOURLY_STATS_HISTORY, processes=2
                )
            )
        with console.status(f"{label}: mlforecast (LightGBM across the customers, hourly)"):
            forecasts.update(peers.mlforecast_lightgbm(customers, horizon, HOURLY))
        return forecasts

    def run_autogluon(leaderboard: Path) -> dict[str, peers.Forecasts]:
        with console.status(f"{label}: AutoGluon-TimeSeries medium_quality, hourly"):
            return peers.autogluon_models(
                customers, horizon, leaderboard, HOURLY, peers.HOURLY_AUTOGLUON_TIME_LIMIT
            )

    found, autogluon = peers.cached_or_computed(
        cache, options.with_autogluon, compute, run_autogluon
    )
    return {
        **{name: found[name] for name in (*NAIVE_SEASONS, *models)},
        MEDIAN: peers.median_of([found[m] for m in models]),
        **{name: f for name, f in found.items() if name not in (*NAIVE_SEASONS, *models)},
    }, autogluon
