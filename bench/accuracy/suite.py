"""``make accuracy``: fleetcast's forecasts against the peers a user would pick instead, on
real public meter data held back from every fit (``python -m bench.accuracy``).

    .venv/bin/python -m bench.accuracy            # every customer of every set (~90 min)
    .venv/bin/python -m bench.accuracy --smoke    # a few customers, no AutoARIMA, no
                                                  # AutoGluon: checks
    .venv/bin/python -m bench.accuracy --hourly-only   # the hourly part alone (~65 min)

For each data set (:mod:`bench.accuracy.datasets`) and each of two windows: H days of each
customer are held back (the last H, then the H before those), H being the forecast export's
horizon (``ForecastExportDays``' default in template.yaml, 30); fleetcast is run through its
real processing and training jobs on the readings before them and scored on its forecast
export (:mod:`bench.accuracy.fleetcast_run`); the peers are fitted on the daily totals of
the same readings (:mod:`bench.accuracy.peers`). Per customer WAPE, MASE and wQL, and the
80% interval's coverage (:mod:`bench.accuracy.metrics`); per method their median and mean
over customers, CPU per customer, and how many customers it beats seasonal naive on. Every
figure goes to ``--results``; ``--readme`` rewrites the README's "Accuracy" section,
``--chart`` draws the per-customer WAPE distributions.

Then the hourly part (issue 42, :mod:`bench.accuracy.hourly`): the same sets' last window in
hours, fleetcast's hourly models against the hourly peers, day-ahead and over 30 days of
hours, and day-ahead from a rolling origin (:mod:`bench.accuracy.rolling`: every method
fitted again at six origins over the window, each forecasting its next 24 hours). ``--hourly-only`` runs it alone and replaces only its own figures (in ``--results``
and the README's hourly subsection), ``--no-hourly`` runs the daily part alone.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console

from bench.accuracy import fleetcast_run, hourly, metrics, peers, rolling
from bench.accuracy.datasets import (
    DATA_SETS,
    HOURLY,
    WINDOWS,
    CustomerSplit,
    SplitSet,
    load_readings,
    split,
    window_title,
)
from bench.accuracy.report import (
    AUTOGLUON_ENSEMBLE,
    FLEETCAST,
    MEDIAN,
    MLFORECAST,
    NAIVE,
    PROPHET,
    DataSetResult,
    draw_chart,
    hourly_section,
    print_tables,
    readme_section,
    update_readme,
    update_readme_hourly,
    versions,
    write_results,
)
from bench.accuracy.scoring import check_forecasts, common_horizon, scored_results
from bench.measure import Machine
from fleetcast_training.stan_backend import silence_stan_logging

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CUSTOMERS = 3


def evaluate(
    split_set: SplitSet,
    horizon: int,
    scratch: Path,
    with_arima: bool,
    console: Console,
    peers_cache: Path | None = None,
    with_autogluon: bool = False,
) -> DataSetResult:
    customers = split_set.customers
    key = split_set.data_set.key
    label = f"{key}, {window_title(split_set.window, horizon)}"
    began = time.perf_counter()
    with console.status(f"{label}: fleetcast (processing + training, {len(customers)} customers)"):
        run = fleetcast_run.run(
            customers,
            scratch / f"{key}-{split_set.window}",
            {"DefaultHolidayCountry": split_set.data_set.holiday_country},
        )
    models = peers.STATSFORECAST_MODELS if with_arima else peers.STATSFORECAST_MODELS[:2]
    peer_runs = (*models, MLFORECAST, *((AUTOGLUON_ENSEMBLE,) if with_autogluon else ()))
    cache = peers.cache_path(peers_cache, key, customers, horizon, peer_runs)
    found, autogluon = _peer_forecasts(
        customers, horizon, label, models, with_autogluon, cache, console
    )
    forecasts = {FLEETCAST: run.forecasts, **found}
    median = peers.median_of([forecasts[m] for m in models])
    # The table's order: fleetcast, the per-series peers, their median, then the global ones.
    order = [FLEETCAST, NAIVE, PROPHET, *models]
    forecasts = {
        **{name: forecasts[name] for name in order},
        MEDIAN: median,
        **{name: f for name, f in forecasts.items() if name not in order},
    }
    check_forecasts(customers, forecasts, horizon, {NAIVE: metrics.SEASON})
    scored, results = scored_results(customers, forecasts, (NAIVE,))
    wins, total = results[FLEETCAST].beats_naive
    return DataSetResult(
        data_set=split_set.data_set,
        customers=[c.customer_id for c in customers],
        scored=[c.customer_id for c in scored],
        too_short=split_set.too_short,
        readings=split_set.readings,
        horizon=horizon,
        methods=results,
        beats_naive=wins,
        beats_naive_of=total,
        median_members=list(models),
        fleetcast_run=run,
        fit_days=[len(c.series) for c in customers],
        horizon_dates=common_horizon(customers),
        seconds=time.perf_counter() - began,
        window=split_set.window,
        autogluon=autogluon,
    )


def _peer_forecasts(
    customers: list[CustomerSplit],
    horizon: int,
    label: str,
    models: tuple[str, ...],
    with_autogluon: bool,
    cache: Path | None,
    console: Console,
) -> tuple[dict[str, peers.Forecasts], dict[str, object] | None]:
    """Every peer's forecasts of ``customers`` (:func:`peers.cached_or_computed`)."""

    def compute() -> dict[str, peers.Forecasts]:
        with console.status(f"{label}: seasonal naive and stock Prophet"):
            forecasts = {
                NAIVE: peers.seasonal_naive(customers, horizon),
                PROPHET: peers.stock_prophet(customers, horizon),
            }
        with console.status(f"{label}: statsforecast {', '.join(models)}"):
            forecasts.update(peers.statsforecast_models(customers, horizon, models))
        with console.status(f"{label}: mlforecast (LightGBM across the customers)"):
            forecasts.update(peers.mlforecast_lightgbm(customers, horizon))
        return forecasts

    def run_autogluon(leaderboard: Path) -> dict[str, peers.Forecasts]:
        with console.status(f"{label}: AutoGluon-TimeSeries medium_quality"):
            return peers.autogluon_models(customers, horizon, leaderboard)

    return peers.cached_or_computed(cache, with_autogluon, compute, run_autogluon)


def check_metrics() -> None:
    """WAPE, MASE and the beats share on hand-worked cases."""
    actuals = np.array([10.0, 0.0, 5.0, 5.0])
    forecast = np.array([8.0, 1.0, 5.0, 7.0])
    if not math.isclose(metrics.wape(actuals, forecast), 5.0 / 20.0):
        raise AssertionError("WAPE")
    if not math.isnan(metrics.wape(np.zeros(3), np.ones(3))):
        raise AssertionError("WAPE of an all-zero horizon must be undefined")
    history = np.array([1.0, 2, 3, 4, 5, 6, 7, 2, 2, 4, 4, 5, 6, 9])
    if not math.isclose(metrics.naive_scale(history), (1 + 0 + 1 + 0 + 0 + 0 + 2) / 7):
        raise AssertionError("seasonal naive's in-sample MAE")
    if not math.isclose(metrics.mase(actuals, forecast, 0.5), (5.0 / 4) / 0.5):
        raise AssertionError("MASE")
    if metrics.beats_share([0.1, 0.3, math.nan], [0.2, 0.2, 0.2]) != (1, 3):
        raise AssertionError("beats share")
    # wQL: at 0.5 the point forecast's WAPE (0.25); at 0.1 the errors [2, -1, 0, -2] cost
    # [0.2, 0.9, 0, 1.8] (x2 / 20 = 0.29), at 0.9 [1.8, 0.1, 0, 0.2] (0.21).
    quantiles = {0.1: forecast, 0.5: forecast, 0.9: forecast}
    if not math.isclose(metrics.wql(actuals, quantiles), (0.29 + 0.25 + 0.21) / 3):
        raise AssertionError("wQL")
    lower, upper = np.array([9.0, 0.0, 5.0, 6.0]), np.array([11.0, 2.0, 5.0, 8.0])
    if metrics.inside(actuals, lower, upper) != 3:
        raise AssertionError("days inside the interval")


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few customers, no AutoARIMA, no AutoGluon; hourly: the first set only",
    )
    parser.add_argument(
        "--autogluon",
        action=argparse.BooleanOptionalAction,
        help="AutoGluon-TimeSeries as a peer (default: yes, but not with --smoke); needs "
        ".venv-autogluon, which `make accuracy` installs",
    )
    parser.add_argument(
        "--window",
        type=int,
        action="append",
        choices=WINDOWS,
        help="only this window of the daily part (0: the last horizon, 1: the one before; "
        "default: both)",
    )
    part = parser.add_mutually_exclusive_group()
    part.add_argument(
        "--hourly-only",
        action="store_true",
        help="only the hourly part (issue 42): its figures replace the hourly ones of "
        "--results and --readme, the daily ones are kept",
    )
    part.add_argument(
        "--no-hourly", action="store_true", help="only the daily part (the hourly figures kept)"
    )
    parser.add_argument("--results", type=Path, help="where to write every figure as JSON")
    parser.add_argument("--chart", type=Path, help="where to draw the WAPE distributions")
    parser.add_argument("--readme", type=Path, help="README whose Accuracy section to replace")
    parser.add_argument("--customers", type=int, help="at most this many customers per set")
    parser.add_argument(
        "--data-set",
        action="append",
        choices=[d.key for d in DATA_SETS],
        help="only this data set (repeatable; default: all)",
    )
    parser.add_argument(
        "--peers-cache",
        type=Path,
        help="a folder keeping the peers' forecasts (they do not depend on fleetcast's "
        "code) between runs, keyed by their inputs: while iterating on the engine",
    )
    return parser.parse_args()


def main() -> int:
    options = _options()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    silence_stan_logging()
    console = Console(width=None if sys.stdout.isatty() else 200)
    machine = Machine.describe()
    began = time.perf_counter()
    check_metrics()
    horizon = fleetcast_run.export_horizon()
    limit = SMOKE_CUSTOMERS if options.smoke else options.customers
    with_autogluon = not options.smoke if options.autogluon is None else options.autogluon
    if with_autogluon and not peers.autogluon_available():
        raise SystemExit(
            f"{peers.AUTOGLUON_PYTHON} is missing: `make accuracy` installs AutoGluon "
            "(requirements/autogluon.lock.txt) first; --no-autogluon runs without it"
        )
    data_sets = [d for d in DATA_SETS if not options.data_set or d.key in options.data_set]
    windows = [] if options.hourly_only else options.window or list(WINDOWS)
    results: list[DataSetResult] = []
    progress = Progress(
        began=began,
        daily_planned=len(data_sets) * len(windows),
        # Each set's hourly part gives three results: day-ahead, 30 days, and day-ahead from
        # a rolling origin.
        hourly_planned=0 if options.no_hourly else 3 * len(data_sets),
    )
    with tempfile.TemporaryDirectory(prefix="fleetcast-accuracy-") as folder:
        for data_set in data_sets:
            readings = load_readings(data_set.path)
            for window in windows:
                split_set = split(data_set, horizon, limit, readings, window)
                results.append(
                    evaluate(
                        split_set,
                        horizon,
                        Path(folder),
                        not options.smoke,
                        console,
                        options.peers_cache,
                        with_autogluon,
                    )
                )
                print_tables(results[-1:], machine, console)
                publish(options, results, machine, progress)
            # The smoke's hourly part: the first set only (about two minutes a set).
            if options.no_hourly or (options.smoke and data_set is not DATA_SETS[0]):
                continue
            split_set = split(data_set, horizon, limit, readings, 0, HOURLY)
            peer_options = hourly.PeerOptions(
                options.smoke, with_autogluon, options.peers_cache, limit
            )
            started = time.perf_counter()
            found = hourly.evaluate(split_set, Path(folder), console, peer_options)
            _add_hourly(found, started, results, progress, options, machine, console)
            started = time.perf_counter()
            found = [
                rolling.evaluate(data_set, readings, horizon, Path(folder), console, peer_options)
            ]
            _add_hourly(found, started, results, progress, options, machine, console)
    print_tables(results, machine, console)
    console.print(
        f"[dim]make accuracy took {time.perf_counter() - began:.0f} s, its hourly part "
        f"{progress.hourly_seconds:.0f} s[/]"
    )
    return 0


def _add_hourly(
    found: list[DataSetResult],
    started: float,
    results: list[DataSetResult],
    progress: Progress,
    options: argparse.Namespace,
    machine: Machine,
    console: Console,
) -> None:
    """An hourly measure's results (begun at ``started``) added to the run's and published."""
    progress.hourly_seconds += time.perf_counter() - started
    results += found
    print_tables(found, machine, console)
    publish(options, results, machine, progress)


@dataclass
class Progress:
    """How far a run is: when it began, the results it plans, its hourly part's seconds."""

    began: float
    daily_planned: int
    hourly_planned: int
    hourly_seconds: float = 0.0


def publish(
    options: argparse.Namespace,
    results: list[DataSetResult],
    machine: Machine,
    progress: Progress,
) -> None:
    """Every output for the results so far (after each set and window, so a long run that
    is stopped leaves what it measured, said to be partial). The daily part's outputs are
    left as they are by a run without daily results (--hourly-only), the hourly part's by
    one without hourly results."""
    # The daily part's time: the run's but for its hourly part.
    seconds = time.perf_counter() - progress.began - progress.hourly_seconds
    daily = [r for r in results if not r.hourly]
    by_hour = [r for r in results if r.hourly]
    if options.results:
        write_results(
            results, machine, versions(), seconds, options.results, progress.hourly_seconds
        )
    if options.chart and daily:
        draw_chart(daily, machine, options.chart)
    if not options.readme:
        return
    root = options.readme.resolve().parent
    chart = options.chart or ROOT / "bench" / "accuracy.png"
    figures_path = options.results or ROOT / "bench" / "accuracy-results.json"
    figures = str(figures_path.resolve().relative_to(root))
    hourly_part = (
        hourly_section(
            by_hour,
            machine,
            figures,
            progress.hourly_seconds,
            progress.hourly_planned,
            "`make accuracy-hourly`" if options.hourly_only else "`make accuracy`'s hourly part",
            peers_cached=bool(peers.READ_FROM_CACHE),
        )
        if by_hour
        else ""
    )
    if not daily:
        update_readme_hourly(options.readme, hourly_part)
        return
    update_readme(
        options.readme,
        readme_section(
            daily,
            machine,
            str(chart.resolve().relative_to(root)),
            figures,
            seconds,
            peers_cached=bool(peers.READ_FROM_CACHE),
            planned=progress.daily_planned,
            hourly=hourly_part,
        ),
    )
