"""``make accuracy``: fleetcast's forecasts against the peers a user would pick instead, on
real public meter data held back from every fit (``python -m bench.accuracy``).

    .venv/bin/python -m bench.accuracy            # every customer of every set (~15 min)
    .venv/bin/python -m bench.accuracy --smoke    # a few customers, no AutoARIMA: checks

For each data set (:mod:`bench.accuracy.datasets`): each customer's last H days are held
back, H being the forecast export's horizon (``ForecastExportDays``' default in
template.yaml, 30); fleetcast is run through its real processing and training jobs on the
readings before them and scored on its forecast export (:mod:`bench.accuracy.fleetcast_run`);
the peers are fitted on the daily totals of the same readings (:mod:`bench.accuracy.peers`).
Per customer WAPE and MASE (:mod:`bench.accuracy.metrics`); per method their median and
mean over customers, CPU per customer, and how many customers fleetcast beats seasonal
naive on. Every figure goes to ``--results``; ``--readme`` rewrites the README's
"Accuracy" section, ``--chart`` draws the per-customer WAPE distributions.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rich.console import Console

from bench.accuracy import fleetcast_run, metrics, peers
from bench.accuracy.datasets import DATA_SETS, CustomerSplit, SplitSet, split
from bench.accuracy.report import (
    FLEETCAST,
    MEDIAN,
    NAIVE,
    PROPHET,
    DataSetResult,
    MethodResult,
    draw_chart,
    print_tables,
    readme_section,
    update_readme,
    versions,
    write_results,
)
from bench.measure import Machine
from fleetcast_training.stan_backend import silence_stan_logging

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CUSTOMERS = 3
# Data sets whose peers' forecasts this run read from --peers-cache.
PEERS_FROM_CACHE: set[str] = set()


def evaluate(
    split_set: SplitSet,
    horizon: int,
    scratch: Path,
    with_arima: bool,
    console: Console,
    peers_cache: Path | None = None,
) -> DataSetResult:
    customers = split_set.customers
    key = split_set.data_set.key
    began = time.perf_counter()
    with console.status(f"{key}: fleetcast (processing + training, {len(customers)} customers)"):
        run = fleetcast_run.run(
            customers,
            scratch / key,
            {"DefaultHolidayCountry": split_set.data_set.holiday_country},
        )
    models = peers.STATSFORECAST_MODELS if with_arima else peers.STATSFORECAST_MODELS[:2]
    cache = (
        peers_cache / f"{key}-{peers.inputs_digest(customers, horizon, models)}.pickle"
        if (peers_cache)
        else None
    )
    found = peers.load_cached(cache) if cache else None
    if found is not None:
        forecasts = {FLEETCAST: run.forecasts, **found}
        PEERS_FROM_CACHE.add(key)
    else:
        with console.status(f"{key}: seasonal naive and stock Prophet"):
            forecasts = {
                FLEETCAST: run.forecasts,
                NAIVE: peers.seasonal_naive(customers, horizon),
                PROPHET: peers.stock_prophet(customers, horizon),
            }
        with console.status(f"{key}: statsforecast {', '.join(models)}"):
            forecasts.update(peers.statsforecast_models(customers, horizon, models))
        if cache:
            peers.store_cached(cache, {k: v for k, v in forecasts.items() if k != FLEETCAST})
    forecasts[MEDIAN] = peers.median_of([forecasts[m] for m in models])
    check_forecasts(customers, forecasts, horizon)
    # Every method is summarised over the same customers: those all of them forecast every
    # day of the horizon for. A customer fleetcast's export misses days of is listed (and
    # counts as a loss against seasonal naive), not dropped from fleetcast's figures alone.
    scored = [
        c
        for c in customers
        if all(
            c.customer_id in f.values and not np.isnan(f.values[c.customer_id]).any()
            for f in forecasts.values()
        )
    ]
    results = {name: score(name, customers, scored, f) for name, f in forecasts.items()}
    wins, total = metrics.beats_share(
        results[FLEETCAST].wapes_list(customers), results[NAIVE].wapes_list(customers)
    )
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
        fleetcast_training_cpu_seconds=run.training_cpu_seconds,
        fleetcast_processing_cpu_seconds=run.processing_cpu_seconds,
        fleetcast_trained=run.trained,
        fleetcast_failed=run.failed,
        fleetcast_incomplete=run.incomplete,
        fleetcast_hyperparameters=run.hyperparameters,
        fleetcast_instances=run.instances,
        fit_days=[len(c.daily) for c in customers],
        horizon_dates=_common_horizon(customers),
        seconds=time.perf_counter() - began,
    )


def _common_horizon(customers: list[CustomerSplit]) -> str:
    """The held-back days most customers share, and how many do."""
    spans = Counter(
        f"{c.horizon_days[0]:%Y-%m-%d} to {c.horizon_days[-1]:%Y-%m-%d}" for c in customers
    )
    span, count = spans.most_common(1)[0]
    return f"{span} ({count} of {len(customers)} customers)"


def score(
    name: str,
    customers: list[CustomerSplit],
    scored: list[CustomerSplit],
    forecasts: peers.Forecasts,
) -> MethodResult:
    """Per-customer WAPE and MASE for every customer; the summary over ``scored``."""
    wapes: dict[str, float] = {}
    mases: dict[str, float] = {}
    for customer in customers:
        forecast = forecasts.values.get(customer.customer_id)
        if forecast is None or np.isnan(forecast).any():
            wapes[customer.customer_id] = mases[customer.customer_id] = math.nan
            continue
        scale = metrics.naive_scale(customer.daily.to_numpy(np.float64))
        wapes[customer.customer_id] = metrics.wape(customer.actuals, forecast)
        mases[customer.customer_id] = metrics.mase(customer.actuals, forecast, scale)
    cpu = list(forecasts.cpu_seconds.values())
    return MethodResult(
        name=name,
        wape=wapes,
        mase=mases,
        summary=metrics.Summary.of(
            [wapes[c.customer_id] for c in scored], [mases[c.customer_id] for c in scored]
        ),
        cpu_ms_per_customer=1000 * float(np.mean(cpu)) if cpu else math.nan,
        forecasts=len(forecasts.values),
    )


def check_forecasts(
    customers: list[CustomerSplit], forecasts: dict[str, peers.Forecasts], horizon: int
) -> None:
    """What every run must hold, whatever the engine: raises AssertionError otherwise."""
    for customer in customers:
        if len(customer.horizon_days) != horizon or customer.actuals.shape != (horizon,):
            raise AssertionError(f"{customer.customer_id}: horizon is not {horizon} days")
        if customer.daily.index[-1] + np.timedelta64(1, "D") != customer.horizon_days[0]:
            raise AssertionError(
                f"{customer.customer_id}: the fit window does not end the day before"
            )
        if (customer.fit_readings["timestamp"] >= customer.horizon_days[0]).any():
            raise AssertionError(f"{customer.customer_id}: a held-back reading is in the fit data")
        daily_sum = float(customer.daily.sum())
        readings_sum = float(customer.fit_readings["consumption"].sum())
        if not math.isclose(daily_sum, readings_sum, rel_tol=1e-9, abs_tol=1e-9):
            raise AssertionError(
                f"{customer.customer_id}: daily totals {daily_sum} != {readings_sum}"
            )
        naive = forecasts[NAIVE].values[customer.customer_id]
        last_week = customer.daily.to_numpy()[-metrics.SEASON :]
        if not np.array_equal(naive[: metrics.SEASON], last_week) or not np.array_equal(
            naive[metrics.SEASON : 2 * metrics.SEASON], last_week
        ):
            raise AssertionError(
                f"{customer.customer_id}: seasonal naive is not last week repeated"
            )
    for name, result in forecasts.items():
        for customer_id, values in result.values.items():
            if values.shape != (horizon,):
                raise AssertionError(f"{name} {customer_id}: {values.shape} values, not {horizon}")
            if name != FLEETCAST and not np.isfinite(values).all():
                raise AssertionError(f"{name} {customer_id}: forecast is not finite")
        for customer_id, cpu in result.cpu_seconds.items():
            if not (math.isfinite(cpu) and cpu >= 0):
                raise AssertionError(f"{name} {customer_id}: CPU {cpu}")
    if not forecasts[FLEETCAST].values:
        raise AssertionError("fleetcast's export has no customer")


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


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="a few customers, no AutoARIMA")
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
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    silence_stan_logging()
    console = Console(width=None if sys.stdout.isatty() else 200)
    machine = Machine.describe()
    began = time.perf_counter()
    check_metrics()
    horizon = fleetcast_run.export_horizon()
    limit = SMOKE_CUSTOMERS if options.smoke else options.customers
    results: list[DataSetResult] = []
    with tempfile.TemporaryDirectory(prefix="fleetcast-accuracy-") as folder:
        for data_set in DATA_SETS:
            if options.data_set and data_set.key not in options.data_set:
                continue
            split_set = split(data_set, horizon, limit)
            results.append(
                evaluate(
                    split_set,
                    horizon,
                    Path(folder),
                    not options.smoke,
                    console,
                    options.peers_cache,
                )
            )
    seconds = time.perf_counter() - began
    print_tables(results, machine, console)
    console.print(f"[dim]make accuracy took {seconds:.0f} s[/]")
    if options.results:
        write_results(results, machine, versions(), seconds, options.results)
    if options.chart:
        draw_chart(results, machine, options.chart)
    if options.readme:
        root = options.readme.resolve().parent
        chart = options.chart or ROOT / "bench" / "accuracy.png"
        figures = options.results or ROOT / "bench" / "accuracy-results.json"
        update_readme(
            options.readme,
            readme_section(
                results,
                machine,
                str(chart.resolve().relative_to(root)),
                str(figures.resolve().relative_to(root)),
                seconds,
                peers_cached=bool(PEERS_FROM_CACHE),
            ),
        )
    return 0
