"""The exact in-process MAP fit against CmdStan's, on Prophet's own Stan data.

The log posterior is computed here, independently of the solver, straight from
``prophet.stan``; a check against CmdStan's own ``lp__`` shows it is the same function.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prophet import Prophet
from prophet.models import CmdStanPyBackend
from prophet.serialize import model_from_json, model_to_json

from fleetcast_contracts.holiday_calendar import (
    HolidayCalendar,
    calendar_years,
    holiday_dates,
    holidays_frame,
)
from fleetcast_training import exact_map
from fleetcast_training.evaluation import smape
from fleetcast_training.exact_map import FallbackReason, NotSolvedExactly
from fleetcast_training.prophet_model import FleetcastProphet
from fleetcast_training.stan_backend import (
    IN_PROCESS,
    FleetcastStanBackend,
    fallback_name,
    silence_stan_logging,
)

SERIES = 232
# CmdStan prints 6 significant digits unless told otherwise; its optimum is compared at
# full precision.
FULL_PRECISION = {"sig_figs": 18}


def log_posterior(data: dict[str, Any], params: dict[str, Any]) -> float:
    """``lp__`` of prophet.stan (constants dropped, no Jacobian), written from the Stan
    program: linear trend, additive and multiplicative features, Prophet's priors."""
    t = np.asarray(data["t"], dtype=float)
    y = np.asarray(data["y"], dtype=float)
    x = np.asarray(data["X"], dtype=float)
    t_change = np.asarray(data["t_change"], dtype=float)
    s_a = np.asarray(data["s_a"], dtype=float)
    s_m = np.asarray(data["s_m"], dtype=float)
    sigmas = np.asarray(data["sigmas"], dtype=float)
    k = float(np.ravel(params["k"])[0])
    m = float(np.ravel(params["m"])[0])
    delta = np.ravel(params["delta"]).astype(float)
    beta = np.ravel(params["beta"]).astype(float)
    sigma = float(np.ravel(params["sigma_obs"])[0])
    changepoints = (t[:, None] >= t_change[None, :]).astype(float)
    trend = (k + changepoints @ delta) * t + (m + changepoints @ (-t_change * delta))
    mean = trend * (1 + (x * s_m) @ beta) + (x * s_a) @ beta
    residual = y - mean
    return float(
        -(k**2) / 50
        - m**2 / 50
        - np.abs(delta).sum() / data["tau"]
        - 2 * sigma**2
        - 0.5 * ((beta / sigmas) ** 2).sum()
        - (residual @ residual) / (2 * sigma**2)
        - y.size * np.log(sigma)
    )


@dataclass
class CmdStanFit:
    data: dict[str, Any]
    params: dict[str, Any]


class RecordingCmdStan(CmdStanPyBackend):
    """Prophet's own backend, keeping the Stan data and the optimum of each fit."""

    def __init__(self) -> None:
        super().__init__()
        self.fits: list[CmdStanFit] = []

    def fit(self, stan_init: dict[str, Any], stan_data: dict[str, Any], **kwargs: Any) -> Any:
        params = super().fit(stan_init, stan_data, **kwargs)
        self.fits.append(CmdStanFit(stan_data, params))
        return params


def generated_series(seed: int) -> tuple[str, pd.DataFrame]:
    """One of eight kinds of series, 40 to 1100 days (or 40 to 90 days hourly)."""
    rng = np.random.default_rng(seed)
    kind = (
        "plain",
        "gaps",
        "outliers",
        "level shift",
        "near zero",
        "hourly",
        "near constant",
        "noisy",
    )[seed % 8]
    hourly = kind == "hourly"
    days = int(rng.integers(40, 91 if hourly else 1101))
    ds = pd.date_range(
        "2023-03-01", periods=days * 24 if hourly else days, freq="h" if hourly else "D"
    )
    day = (ds - ds[0]) / pd.Timedelta(days=1)
    level = rng.uniform(-50, 500)
    y = (
        level
        + rng.normal(0, 0.3) * day
        + rng.uniform(0, 60) * np.sin(2 * np.pi * day / 365.25 + rng.uniform(0, 6))
        + rng.uniform(0, 20) * np.sin(2 * np.pi * day / 7 + rng.uniform(0, 6))
        + (rng.uniform(0, 15) * np.sin(2 * np.pi * day + 1) if hourly else 0)
        + rng.normal(0, rng.uniform(0.5, 10 if kind != "noisy" else 80), ds.size)
    )
    y = np.asarray(y, dtype=float)
    if kind == "gaps":
        keep = rng.uniform(size=ds.size) > 0.2
        start = int(rng.integers(0, max(1, ds.size - 40)))
        keep[start : start + 30] = False
        keep[:2] = True
        ds, y = ds[keep], y[keep]
    elif kind == "outliers":
        spikes = rng.choice(ds.size, size=max(1, ds.size // 50), replace=False)
        y[spikes] *= rng.choice([-4.0, 6.0], size=spikes.size)
    elif kind == "level shift":
        y[int(rng.integers(ds.size // 4, 3 * ds.size // 4)) :] += rng.choice([-1, 1]) * 200
    elif kind == "near zero":
        y = y * 1e-9
    elif kind == "near constant":
        y = np.full(ds.size, 42.0)
        y[int(rng.integers(0, ds.size))] += 1e-6
    return kind, pd.DataFrame({"ds": ds, "y": y})


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[tuple[str, CmdStanFit]]]:
    """CmdStan's fit of each generated series (Prophet's defaults, as training resolves
    them), with the Stan data Prophet gave it."""
    silence_stan_logging()
    backend = RecordingCmdStan()
    kinds = []
    for seed in range(SERIES):
        kind, history = generated_series(seed)
        model = FleetcastProphet(uncertainty_samples=0)
        model.stan_backend = backend
        model.fit(history, **FULL_PRECISION)
        kinds.append(kind)
    assert len(backend.fits) == SERIES
    yield list(zip(kinds, backend.fits, strict=True))


def test_in_process_log_posterior_is_at_least_cmdstans(fleet: list[tuple[str, CmdStanFit]]):
    # Given CmdStan's optimum of 200+ varied series
    worse, compared, declined = [], 0, set()
    for kind, fit in fleet:
        # When the in-process solver fits the same Stan data
        try:
            solution = exact_map.solve(fit.data)
        except NotSolvedExactly as fallback:
            declined.add((kind, fallback.reason))
            continue
        ours = stan_params(solution)
        # Then its log posterior, computed here, is at least CmdStan's
        lp_ours, lp_cmdstan = log_posterior(fit.data, ours), log_posterior(fit.data, fit.params)
        if lp_ours < lp_cmdstan - 1e-9 * abs(lp_cmdstan):
            worse.append((kind, lp_ours, lp_cmdstan))
        compared += 1
        # And the solver reports that same value as lp__
        assert solution.log_posterior == pytest.approx(lp_ours, rel=1e-9, abs=1e-9)
    assert worse == []
    assert compared >= 200
    # And only series with (next to) no noise are left to CmdStan
    assert declined <= {("near constant", FallbackReason.NEAR_EXACT_FIT)}
    assert {kind for kind, _ in fleet} >= {"hourly", "gaps", "near zero", "level shift"}


def test_the_objective_is_cmdstans_lp_at_cmdstans_optimum(fleet: list[tuple[str, CmdStanFit]]):
    # Given CmdStan's optimum, printed at full precision, for a few series of each kind
    for _, fit in fleet[:16]:
        # Then the log posterior computed here equals CmdStan's lp__ there
        lp = float(np.ravel(fit.params["lp__"])[0])
        assert log_posterior(fit.data, fit.params) == pytest.approx(lp, rel=1e-9, abs=1e-9)
        # And so does the solver's own objective
        design = exact_map.design(fit.data)
        w = np.concatenate([np.ravel(fit.params[p]) for p in ("k", "m", "delta", "beta")])
        sigma = float(np.ravel(fit.params["sigma_obs"])[0])
        ours = -exact_map.negative_log_posterior(
            design, np.asarray(fit.data["y"], dtype=float), w, sigma, fit.data["tau"]
        )
        assert ours == pytest.approx(lp, rel=1e-9, abs=1e-9)


def test_every_fit_passes_its_optimality_check(fleet: list[tuple[str, CmdStanFit]]):
    for kind, fit in fleet:
        if kind == "near constant":
            continue
        solution = exact_map.solve(fit.data)
        assert solution.violation <= exact_map.KKT_TOLERANCE
        # A perturbed solution would not pass: the check can fail
        design = exact_map.design(fit.data)
        y = np.asarray(fit.data["y"], dtype=float)
        w = np.concatenate([[solution.k, solution.m], solution.delta, solution.beta])
        w[1] += 1e-4
        violation = exact_map.optimality_violation(
            design, y, design.z.T @ y, w, solution.sigma_obs, fit.data["tau"]
        )
        assert violation > exact_map.KKT_TOLERANCE


def test_where_the_sigma_search_starts_does_not_change_the_answer(
    fleet: list[tuple[str, CmdStanFit]],
):
    for kind, fit in fleet:
        if kind == "near constant":
            continue
        solved = exact_map.solve(fit.data)
        for start in (1e-8, solved.sigma_obs**2 * 1.3, 50.0):
            again = exact_map.solve(fit.data, start_variance=start)
            assert again.violation <= exact_map.KKT_TOLERANCE
            assert again.log_posterior == pytest.approx(solved.log_posterior, rel=1e-10)
            assert again.sigma_obs == pytest.approx(solved.sigma_obs, rel=1e-6)


def test_a_near_exact_fit_is_left_to_cmdstan(fleet: list[tuple[str, CmdStanFit]]):
    # Given a series that is constant but for a 1e-6 blip (Prophet calls Stan for it)
    fit = next(fit for kind, fit in fleet if kind == "near constant")
    # Then the solver declines it, saying why
    with pytest.raises(NotSolvedExactly, match="near-exact fit: sigma_obs"):
        exact_map.solve(fit.data)


def holdout_smape(history: pd.DataFrame, backend: Any, days: int = 7) -> float:
    model = FleetcastProphet(uncertainty_samples=0)
    if backend is not None:
        model.stan_backend = backend
    model.fit(history.iloc[:-days])
    forecast = model.predict(history[["ds"]].iloc[-days:])["yhat"].to_numpy()
    return smape(history["y"].to_numpy()[-days:], forecast)


def test_holdout_error_is_no_worse_than_stock_prophets_on_average(tmp_path: Path):
    # Given daily series of every kind but hourly
    silence_stan_logging()
    backend = FleetcastStanBackend(tmp_path)
    histories = [generated_series(seed)[1] for seed in range(1000, 1048) if seed % 8 != 5]
    histories.append(histories[0].assign(y=7.0))  # constant: Prophet fits it without Stan
    # When a week is held out and forecast by stock Prophet and by the in-process fit
    stock = [holdout_smape(history, None) for history in histories]
    ours = [holdout_smape(history, backend) for history in histories]
    # Then the in-process fits are at least as accurate on average
    assert set(backend.fit_methods) <= {IN_PROCESS, fallback_name(FallbackReason.NEAR_EXACT_FIT)}
    assert backend.fit_methods[IN_PROCESS] >= 36
    assert np.mean(ours) <= np.mean(stock) + 1e-3


def test_a_model_fitted_in_process_is_prophets_own(tmp_path: Path):
    # Given a series fitted through fleetcast's backend and through CmdStan
    silence_stan_logging()
    _, history = generated_series(3)
    ours = FleetcastProphet(uncertainty_samples=0)
    ours.stan_backend = FleetcastStanBackend(tmp_path)
    ours.fit(history)
    stock = Prophet(uncertainty_samples=0).fit(history)
    # Then the parameters have CmdStan's names, order and shapes
    assert list(ours.params) == list(stock.params)
    for name, value in stock.params.items():
        assert ours.params[name].shape == value.shape
    # And the serialised model loads and forecasts as the fitted one does
    future = ours.make_future_dataframe(periods=14, include_history=False)
    loaded = model_from_json(model_to_json(ours))
    pd.testing.assert_frame_equal(loaded.predict(future), ours.predict(future))


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"seasonality_mode": "multiplicative"}, FallbackReason.MULTIPLICATIVE),
        ({"growth": "flat"}, FallbackReason.NONLINEAR_GROWTH),
        ({"growth": "logistic"}, FallbackReason.NONLINEAR_GROWTH),
    ],
)
def test_unsupported_shapes_fall_back_to_cmdstan(
    tmp_path: Path, settings: dict[str, str], reason: FallbackReason
):
    # Given a model the solver does not solve exactly
    silence_stan_logging()
    _, history = generated_series(0)
    history = history.assign(cap=history["y"].max() * 1.5)
    backend = FleetcastStanBackend(tmp_path)
    model = Prophet(uncertainty_samples=0, **settings)  # type: ignore[arg-type]
    model.stan_backend = backend
    # When it is fitted
    model.fit(history)
    # Then CmdStan fitted it, and the fallback is counted with its reason
    assert backend.fit_methods == {fallback_name(reason): 1}
    assert model.stan_fit is not None
    stock = Prophet(uncertainty_samples=0, **settings).fit(history)  # type: ignore[arg-type]
    for name in ("k", "m", "delta", "beta", "sigma_obs"):
        np.testing.assert_allclose(model.params[name], stock.params[name], rtol=1e-6, atol=1e-9)


def test_a_failed_optimality_check_falls_back_to_cmdstan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a check no solution can pass
    silence_stan_logging()
    monkeypatch.setattr(exact_map, "KKT_TOLERANCE", -1.0)
    _, history = generated_series(0)
    backend = FleetcastStanBackend(tmp_path)
    model = Prophet(uncertainty_samples=0)
    model.stan_backend = backend
    # When a supported model is fitted
    model.fit(history)
    # Then CmdStan fitted it and the reason is counted
    assert backend.fit_methods == {fallback_name(FallbackReason.OPTIMALITY_CHECK): 1}
    with pytest.raises(NotSolvedExactly, match="optimality check failed"):
        exact_map.solve(RecordingFit.of(history).data)


def test_cmdstan_options_go_to_cmdstan(tmp_path: Path):
    silence_stan_logging()
    _, history = generated_series(0)
    backend = FleetcastStanBackend(tmp_path)
    model = Prophet(uncertainty_samples=0)
    model.stan_backend = backend
    model.fit(history, algorithm="Newton")
    assert backend.fit_methods == {fallback_name(FallbackReason.CMDSTAN_OPTIONS): 1}


def test_series_on_the_same_grid_share_the_design():
    # Given two customers on the same dates, and one on other dates
    silence_stan_logging()
    _, first = generated_series(8)
    second = first.assign(y=first["y"] * 2 + 5)
    other = first.iloc[1:]
    # Then the first two share one design (feature matrix, Z'Z), the third has its own
    designs = [exact_map.design(RecordingFit.of(h).data) for h in (first, second, other)]
    assert designs[0] is designs[1]
    assert designs[2] is not designs[0]


class RecordingFit:
    @staticmethod
    def of(history: pd.DataFrame) -> CmdStanFit:
        """Prophet's Stan data for ``history`` (fitted with CmdStan, recorded)."""
        backend = RecordingCmdStan()
        model = FleetcastProphet(uncertainty_samples=0)
        model.stan_backend = backend
        model.fit(history)
        return backend.fits[0]


HOLIDAY_CALENDARS = (("US", None), ("DE", "BY"), ("GB", None), ("FR", None))


def holiday_model(country: str, subdivision: str | None, history: pd.DataFrame) -> Prophet:
    """Prophet with the calendar added as training adds it (a country's own holidays, or
    a subdivision's frame)."""
    calendar = HolidayCalendar.of(country, subdivision)
    frame = None
    if subdivision is not None:
        years = calendar_years(history["ds"].iloc[0].date(), history["ds"].iloc[-1].date())
        frame = holidays_frame(calendar, years)
    model = FleetcastProphet(uncertainty_samples=0, holidays=frame)
    if subdivision is None:
        model.add_country_holidays(country_name=country)
    return model


def with_holiday_dips(history: pd.DataFrame, country: str, subdivision: str | None) -> pd.DataFrame:
    years = range(history["ds"].iloc[0].year, history["ds"].iloc[-1].year + 1)
    dates = {day for day, _ in holiday_dates(country, subdivision, years)}
    dips = np.array([stamp.date() in dates for stamp in history["ds"]])
    return history.assign(y=np.where(dips, history["y"] - 0.3 * history["y"].abs(), history["y"]))


def test_holiday_models_reach_at_least_cmdstans_log_posterior(tmp_path: Path):
    # Given daily series of every kind with dips on their calendar's holidays, fitted by
    # CmdStan with the holidays as Prophet's additive features
    silence_stan_logging()
    compared = 0
    for seed in range(40):
        kind, history = generated_series(seed)
        if kind in ("hourly", "near constant"):
            continue
        country, subdivision = HOLIDAY_CALENDARS[seed % len(HOLIDAY_CALENDARS)]
        history = with_holiday_dips(history, country, subdivision)
        backend = RecordingCmdStan()
        model = holiday_model(country, subdivision, history)
        model.stan_backend = backend
        model.fit(history, **FULL_PRECISION)
        fit = backend.fits[0]
        holiday_columns = len(model.train_holiday_names)
        assert holiday_columns > 0
        # When the in-process solver fits the same Stan data
        solution = exact_map.solve(fit.data)
        ours = stan_params(solution)
        # Then its log posterior is at least CmdStan's
        lp_ours, lp_cmdstan = log_posterior(fit.data, ours), log_posterior(fit.data, fit.params)
        assert lp_ours >= lp_cmdstan - 1e-9 * abs(lp_cmdstan), (kind, country, seed)
        compared += 1
    assert compared >= 25


@pytest.mark.parametrize(("country", "subdivision"), [("US", None), ("DE", "BY")])
def test_a_holiday_model_fitted_in_process_forecasts_as_prophet_does(
    tmp_path: Path, country: str, subdivision: str | None
):
    # Given a series with dips on its calendar's holidays, fitted in-process
    silence_stan_logging()
    _, history = generated_series(3)
    history = with_holiday_dips(history, country, subdivision)
    ours = holiday_model(country, subdivision, history)
    backend = FleetcastStanBackend(tmp_path)
    ours.stan_backend = backend
    ours.fit(history)
    assert backend.fit_methods == {IN_PROCESS: 1}
    # When both forecast a year past the history, over Christmas
    future = ours.make_future_dataframe(periods=365, include_history=False)
    forecast = model_from_json(model_to_json(ours)).predict(future)
    # Then the archived model forecasts what the fitted one does (CmdStan's optimum is
    # not compared here: its L-BFGS stops early; the log posterior test above compares)
    pd.testing.assert_frame_equal(forecast, ours.predict(future))
    # And it dips on Christmas Day against the week before
    christmas = forecast.loc[forecast["ds"].dt.strftime("%m-%d") == "12-25", "holidays"]
    assert (christmas < 0).all() and christmas.size == 1


def stan_params(solution: exact_map.MapSolution) -> dict[str, Any]:
    """The in-process solution as the Stan parameters Prophet's model keeps."""
    return {
        "k": solution.k,
        "m": solution.m,
        "delta": solution.delta,
        "beta": solution.beta,
        "sigma_obs": solution.sigma_obs,
    }


def _stan_data(features: np.ndarray) -> dict[str, Any]:
    rows = features.shape[0]
    t = np.linspace(0, 1, rows)
    return {
        "T": rows,
        "S": 3,
        "K": features.shape[1],
        "tau": 0.05,
        "trend_indicator": 0,
        "y": np.sin(8 * t) + t,
        "t": t,
        "cap": np.zeros(rows),
        "t_change": np.array([0.2, 0.4, 0.6]),
        "X": features,
        "sigmas": np.full(features.shape[1], 10.0),
        "s_a": np.ones(features.shape[1]),
        "s_m": np.zeros(features.shape[1]),
    }


def test_a_design_is_shared_by_the_same_rows_of_a_table_and_by_equal_values_alone():
    # Given a shape's feature table and two customers' rows of it: the same run of rows
    # (views of the same memory), a copy of them, and other values for the same times
    rng = np.random.default_rng(8)
    table = np.ascontiguousarray(rng.normal(size=(400, 6)))
    first = exact_map.design(_stan_data(table[50:350]))
    # Then the same rows of the table, and a copy of them, get the cached design
    assert exact_map.design(_stan_data(table[50:350])) is first
    copy = table[50:350].copy()
    assert exact_map.design(_stan_data(copy)) is first
    # And it keeps the latest equal features, whose memory the next customer's likely shares
    assert first.features is copy
    # But other values, or other rows of the table, get a design of their own
    other = exact_map.design(_stan_data(table[51:351]))
    assert other is not first
    np.testing.assert_array_equal(other.features, table[51:351])


def test_a_fit_without_its_trend_is_the_same_fit():
    # Given a fit with its trend along the rows and one without
    data = _stan_data(np.random.default_rng(3).normal(size=(300, 4)))
    whole, bare = exact_map.solve(data), exact_map.solve(data, trend=False)
    # Then they are the same parameters, and only the first has a trend
    for name in ("k", "m", "delta", "beta", "sigma_obs", "log_posterior"):
        np.testing.assert_array_equal(getattr(bare, name), getattr(whole, name))
    assert whole.trend.shape == (300,) and bare.trend.size == 0
