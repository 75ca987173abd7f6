"""``make accuracy``: fleetcast's forecasts against the peers a user would pick instead, on
real public meter data held back from every fit (``python -m bench.accuracy``).

    .venv/bin/python -m bench.accuracy            # every customer of every set (~45 min)
    .venv/bin/python -m bench.accuracy --smoke    # a few customers, no AutoARIMA, no
                                                  # AutoGluon: checks

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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
from bench.accuracy.datasets import (
    DATA_SETS,
    WINDOWS,
    CustomerSplit,
    SplitSet,
    load_readings,
    split,
    window_title,
)
from bench.accuracy.metrics import LOWER, UPPER
from bench.accuracy.report import (
    AUTOGLUON_ENSEMBLE,
    FLEETCAST,
    MEDIAN,
    MLFORECAST,
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
    cache = (
        peers_cache / f"{key}-{peers.inputs_digest(customers, horizon, peer_runs)}.pickle"
        if (peers_cache)
        else None
    )
    found, autogluon, cached = _peer_forecasts(
        customers, horizon, label, models, with_autogluon, cache, console
    )
    if cached:
        PEERS_FROM_CACHE.add(key)
    forecasts = {FLEETCAST: run.forecasts, **found}
    median = peers.median_of([forecasts[m] for m in models])
    # The table's order: fleetcast, the per-series peers, their median, then the global ones.
    order = [FLEETCAST, NAIVE, PROPHET, *models]
    forecasts = {
        **{name: forecasts[name] for name in order},
        MEDIAN: median,
        **{name: f for name, f in forecasts.items() if name not in order},
    }
    check_forecasts(customers, forecasts, horizon)
    scored, results = _scored(customers, forecasts)
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
        window=split_set.window,
        autogluon=autogluon,
    )


def _scored(
    customers: list[CustomerSplit], forecasts: dict[str, peers.Forecasts]
) -> tuple[list[CustomerSplit], dict[str, MethodResult]]:
    """The customers every method forecast whole, and each method's figures on them."""
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
    naive_wapes = results[NAIVE].wapes_list(customers)
    results = {
        name: dataclasses.replace(
            result,
            beats_naive=metrics.beats_share(result.wapes_list(customers), naive_wapes),
        )
        for name, result in results.items()
    }
    return scored, results


def _peer_forecasts(
    customers: list[CustomerSplit],
    horizon: int,
    label: str,
    models: tuple[str, ...],
    with_autogluon: bool,
    cache: Path | None,
    console: Console,
) -> tuple[dict[str, peers.Forecasts], dict[str, object] | None, bool]:
    """Every peer's forecasts of ``customers`` (from ``cache`` when it holds them, stored
    there when computed), AutoGluon's leaderboard (or why it did not run), and whether
    they came from the cache."""
    autogluon: dict[str, object] | None = (
        None if with_autogluon else {"skipped": "not asked for: --no-autogluon or --smoke"}
    )
    found = peers.load_cached(cache) if cache else None
    if found is not None:
        leaderboard = cache.with_suffix(".json") if cache else None
        if with_autogluon and leaderboard and leaderboard.exists():
            autogluon = json.loads(leaderboard.read_text())
        return found, autogluon, True
    with console.status(f"{label}: seasonal naive and stock Prophet"):
        forecasts = {
            NAIVE: peers.seasonal_naive(customers, horizon),
            PROPHET: peers.stock_prophet(customers, horizon),
        }
    with console.status(f"{label}: statsforecast {', '.join(models)}"):
        forecasts.update(peers.statsforecast_models(customers, horizon, models))
    with console.status(f"{label}: mlforecast (LightGBM across the customers)"):
        forecasts.update(peers.mlforecast_lightgbm(customers, horizon))
    if with_autogluon:
        with (
            console.status(f"{label}: AutoGluon-TimeSeries medium_quality"),
            tempfile.TemporaryDirectory(prefix="fleetcast-autogluon-") as folder,
        ):
            leaderboard = Path(folder) / "leaderboard.json"
            forecasts.update(peers.autogluon_models(customers, horizon, leaderboard))
            autogluon = json.loads(leaderboard.read_text())
    if cache:
        peers.store_cached(cache, forecasts)
        if autogluon and with_autogluon:
            cache.with_suffix(".json").write_text(json.dumps(autogluon))
    return forecasts, autogluon, False


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
    """Per-customer WAPE, MASE and wQL for every customer; the summary (the 80% interval's
    coverage pooled over their days) over ``scored``."""
    wapes: dict[str, float] = {}
    mases: dict[str, float] = {}
    wqls: dict[str, float] = {}
    inside: dict[str, int] = {}
    for customer in customers:
        cid = customer.customer_id
        forecast = forecasts.values.get(cid)
        wqls[cid] = math.nan
        if forecast is None or np.isnan(forecast).any():
            wapes[cid] = mases[cid] = math.nan
            continue
        scale = metrics.naive_scale(customer.daily.to_numpy(np.float64))
        wapes[cid] = metrics.wape(customer.actuals, forecast)
        mases[cid] = metrics.mase(customer.actuals, forecast, scale)
        quantiles = forecasts.customer_quantiles(cid)
        if quantiles and all(np.isfinite(q).all() for q in quantiles.values()):
            wqls[cid] = metrics.wql(customer.actuals, quantiles)
            inside[cid] = metrics.inside(customer.actuals, quantiles[LOWER], quantiles[UPPER])
    with_interval = [c for c in scored if c.customer_id in inside]
    cpu = list(forecasts.cpu_seconds.values())
    return MethodResult(
        name=name,
        wape=wapes,
        mase=mases,
        summary=metrics.Summary.of(
            [wapes[c.customer_id] for c in scored],
            [mases[c.customer_id] for c in scored],
            [wqls[c.customer_id] for c in scored],
            (
                sum(inside[c.customer_id] for c in with_interval),
                sum(len(c.actuals) for c in with_interval),
            ),
        ),
        cpu_ms_per_customer=1000 * float(np.mean(cpu)) if cpu else math.nan,
        forecasts=len(forecasts.values),
        wql=wqls,
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
        for level, by_customer in result.quantiles.items():
            for customer_id, values in by_customer.items():
                if values.shape != (horizon,):
                    raise AssertionError(f"{name} {customer_id}: quantile {level} {values.shape}")
        lower, upper = result.quantiles.get(LOWER, {}), result.quantiles.get(UPPER, {})
        for customer_id in set(lower) & set(upper):
            if (lower[customer_id] > upper[customer_id] + 1e-9).any():
                raise AssertionError(f"{name} {customer_id}: 80% interval upside down")
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
    # wQL: at 0.5 the point forecast's WAPE (0.25); at 0.1 the errors [2, -1, 0, -2] cost
    # [0.2, 0.9, 0, 1.8] (x2 / 20 = 0.29), at 0.9 [1.8, 0.1, 0, 0.2] (0.21).
    quantiles = {0.1: forecast, 0.5: forecast, 0.9: forecast}
    if not math.isclose(metrics.wql(actuals, quantiles), (0.29 + 0.25 + 0.21) / 3):
        raise AssertionError("wQL")
    lower, upper = np.array([9.0, 0.0, 5.0, 6.0]), np.array([11.0, 2.0, 5.0, 8.0])
    if metrics.inside(actuals, lower, upper) != 3:
        raise AssertionError("days inside the interval")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few customers, no AutoARIMA, no AutoGluon"
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
        help="only this window (0: the last horizon, 1: the one before; default: both)",
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
    with_autogluon = not options.smoke if options.autogluon is None else options.autogluon
    if with_autogluon and not peers.autogluon_available():
        raise SystemExit(
            f"{peers.AUTOGLUON_PYTHON} is missing: `make accuracy` installs AutoGluon "
            "(requirements/autogluon.lock.txt) first; --no-autogluon runs without it"
        )
    planned = sum(not options.data_set or d.key in options.data_set for d in DATA_SETS) * len(
        options.window or WINDOWS
    )
    with tempfile.TemporaryDirectory(prefix="fleetcast-accuracy-") as folder:
        for data_set in DATA_SETS:
            if options.data_set and data_set.key not in options.data_set:
                continue
            readings = load_readings(data_set.path)
            for window in options.window or WINDOWS:
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
                publish(options, results, machine, time.perf_counter() - began, planned)
    print_tables(results, machine, console)
    console.print(f"[dim]make accuracy took {time.perf_counter() - began:.0f} s[/]")
    return 0


def publish(
    options: argparse.Namespace,
    results: list[DataSetResult],
    machine: Machine,
    seconds: float,
    planned: int,
) -> None:
    """Every output for the results so far (after each set and window, so a long run that
    is stopped leaves what it measured, said to be partial)."""
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
                planned=planned,
            ),
        )
