"""Every method's forecasts scored on the held-back horizon, the same way for the daily and
the hourly part of make accuracy, and the checks every run's forecasts must pass."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np

from bench.accuracy import metrics, peers
from bench.accuracy.datasets import CustomerSplit
from bench.accuracy.metrics import LOWER, UPPER
from bench.accuracy.report import FLEETCAST, MethodResult


def scored_results(
    customers: list[CustomerSplit],
    forecasts: dict[str, peers.Forecasts],
    naives: tuple[str, ...],
) -> tuple[list[CustomerSplit], dict[str, MethodResult]]:
    """The customers every method forecast whole, and each method's figures on them; a
    method beats naive on a customer when its WAPE is below every one of ``naives``'."""
    # Every method is summarised over the same customers: those all of them forecast every
    # period of the horizon for. A customer fleetcast's export misses periods of is listed
    # (and counts as a loss against seasonal naive), not dropped from fleetcast's figures.
    scored = [
        c
        for c in customers
        if all(
            c.customer_id in f.values and not np.isnan(f.values[c.customer_id]).any()
            for f in forecasts.values()
        )
    ]
    results = {name: score(name, customers, scored, f) for name, f in forecasts.items()}
    # fmin: the better naive where both have a WAPE, the one that has where one has.
    naive_wapes = np.fmin.reduce(
        [np.asarray(results[n].wapes_list(customers), dtype=np.float64) for n in naives]
    )
    results = {
        name: dataclasses.replace(
            result,
            beats_naive=metrics.beats_share(result.wapes_list(customers), list(naive_wapes)),
        )
        for name, result in results.items()
    }
    return scored, results


def common_horizon(customers: list[CustomerSplit]) -> str:
    """The held-back days most customers share, and how many do."""
    spans = Counter(
        f"{c.horizon_index[0]:%Y-%m-%d} to {c.horizon_index[-1]:%Y-%m-%d}" for c in customers
    )
    span, count = spans.most_common(1)[0]
    return f"{span} ({count} of {len(customers)} customers)"


def score(
    name: str,
    customers: list[CustomerSplit],
    scored: list[CustomerSplit],
    forecasts: peers.Forecasts,
) -> MethodResult:
    """Per-customer WAPE, MASE (scaled by seasonal naive's in-sample error at the split's
    season: 7 days, 24 hours) and wQL for every customer; the summary (the 80% interval's
    coverage pooled over their periods) over ``scored``."""
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
        scale = metrics.naive_scale(customer.series.to_numpy(np.float64), customer.frequency.season)
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


def check_splits(customers: list[CustomerSplit], horizon: int) -> None:
    """What every customer's split must hold: raises AssertionError otherwise."""
    for customer in customers:
        unit = customer.frequency.unit
        if len(customer.horizon_index) != horizon or customer.actuals.shape != (horizon,):
            raise AssertionError(f"{customer.customer_id}: horizon is not {horizon} {unit}s")
        if customer.series.index[-1] + customer.frequency.period != customer.horizon_index[0]:
            raise AssertionError(
                f"{customer.customer_id}: the fit window does not end the {unit} before"
            )
        if (customer.fit_readings["timestamp"] >= customer.horizon_index[0]).any():
            raise AssertionError(f"{customer.customer_id}: a held-back reading is in the fit data")
        series_sum = float(customer.series.sum())
        readings_sum = float(customer.fit_readings["consumption"].sum())
        if not math.isclose(series_sum, readings_sum, rel_tol=1e-9, abs_tol=1e-9):
            raise AssertionError(
                f"{customer.customer_id}: {unit}ly totals {series_sum} != {readings_sum}"
            )


def check_forecasts(
    customers: list[CustomerSplit],
    forecasts: dict[str, peers.Forecasts],
    horizon: int,
    naives: dict[str, int],
) -> None:
    """What every run must hold, whatever the engine (``naives``: each seasonal naive's
    name and season): raises AssertionError otherwise."""
    check_splits(customers, horizon)
    for customer in customers:
        for name, season in naives.items():
            naive = forecasts[name].values[customer.customer_id]
            last_season = customer.series.to_numpy()[-season:]
            if not np.array_equal(naive, np.resize(last_season, horizon)):
                raise AssertionError(
                    f"{customer.customer_id}: {name} is not the last {season} repeated"
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
