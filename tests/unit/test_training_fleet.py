"""The fleet family (issue 39): trees learnt across a shard's customers, backtested honestly,
and the cold start it gives a customer too short for a model of its own."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_training_job import Instance, run_container, weekly_series

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.training_manifest import CustomerOutcome
from fleetcast_forecasters.families import compile_archive
from fleetcast_training import fleet
from fleetcast_training.history import History

HORIZON = 14
WINDOWS = 3


def histories(customers: int, days: int, seed: int = 0) -> list[History]:
    """Daily series with a level, a weekly shape and noise, all ending on the same day."""
    rng = np.random.default_rng(seed)
    times = np.datetime64("2024-01-01", "us") + np.arange(days) * np.timedelta64(1, "D")
    found = []
    for _ in range(customers):
        week = rng.uniform(0.6, 1.4, 7)
        values = rng.uniform(5, 50) * week[np.arange(days) % 7] * rng.normal(1, 0.05, days)
        found.append(History(times, values))
    return found


def learnt(series: list[History]) -> dict[str, fleet.FleetForecast]:
    ids = [f"c{i:03d}" for i in range(len(series))]
    return fleet.learn(ids, series, [None] * len(series), HORIZON, WINDOWS, threads=1)


@pytest.mark.parametrize("window", range(WINDOWS))
def test_a_windows_forecast_uses_no_period_at_or_after_its_origin(window: int) -> None:
    # Given a fleet's histories, and the same histories with every period from a backtest
    # window's origin on changed (tripled)
    series = histories(60, 200)
    origin = 200 - (WINDOWS - window) * HORIZON
    changed = [
        History(h.times, np.where(np.arange(200) >= origin, h.values * 3, h.values)) for h in series
    ]

    # When the fleet learns from each
    before, after = learnt(series), learnt(changed)

    # Then that window's forecasts, and every earlier window's, are the same: nothing at or
    # after a window's origin reached it
    assert before.keys() == after.keys() and len(before) == 60
    for customer_id, forecast in before.items():
        kept = forecast.backtest[: window + 1]
        assert np.isfinite(kept[-1]).all(), customer_id
        np.testing.assert_array_equal(kept, after[customer_id].backtest[: window + 1])
    # And the later periods do move the served forecast (the change was seen where allowed)
    assert any(not np.array_equal(before[c].path, after[c].path) for c in before)


def test_the_fleet_forecasts_a_customer_of_its_level_and_shape() -> None:
    # Given a fleet and a customer with five days of history, three times the fleet's usual
    # level
    series = histories(60, 200)
    short = series[0]
    newcomer = History(short.times[-5:], short.values[-5:] * 3)

    # When the fleet learns
    found = fleet.learn(
        ["newcomer", *[f"c{i}" for i in range(60)]],
        [newcomer, *series],
        [None] * 61,
        HORIZON,
        WINDOWS,
        threads=1,
    )

    # Then the newcomer's forecast is at its own level, not the fleet's, and not backtested
    path = found["newcomer"].path
    assert np.isfinite(path).all() and (path >= 0).all()
    assert path.mean() == pytest.approx(newcomer.values.mean(), rel=0.35)
    assert np.isnan(found["newcomer"].backtest).all()
    assert (found["newcomer"].sigma > 0).all()


def sized_histories(customers: int, periods: int, per_day: int) -> list[History]:
    """Series whose levels run from 0.1 to 10 a period and whose shape depends on the
    level (the larger, the stronger its weekly swing): the trees learn from the level."""
    rng = np.random.default_rng(5)
    step = np.timedelta64(24 // per_day, "h")
    times = np.datetime64("2024-01-01T00", "us") + np.arange(periods) * step
    day = np.arange(periods) // per_day
    hour = np.arange(periods) % per_day
    found = []
    for level in np.logspace(-1, 1, customers):
        swing = 0.5 + 0.4 * np.tanh(np.log(level))
        shape = 1 + swing * np.sin(2 * np.pi * day / 7) + 0.3 * np.sin(2 * np.pi * hour / 24)
        found.append(History(times, level * shape * rng.normal(1, 0.05, periods)))
    return found


@pytest.mark.parametrize("hourly", [False, True], ids=["daily", "hourly"])
def test_the_fleet_forecasts_the_same_in_any_unit(hourly: bool) -> None:
    # Given a fleet whose levels straddle 1 kWh a period and whose shape depends on the
    # level, and the same fleet in units 1024 times smaller (a power of two: every value
    # and ratio scales exactly, so any difference is the unit's own)
    if hourly:
        kwh, learn = sized_histories(30, 24 * 120, 24), hourly_learnt
    else:
        kwh, learn = sized_histories(40, 200, 1), learnt
    small = [History(h.times, h.values * 1024) for h in kwh]

    # When the fleet learns each
    in_kwh, in_small = learn(kwh), learn(small)

    # Then every customer's backtest, path and deviations in the small unit are 1024 times
    # those in kWh: the same trees (a log level in the unit's own terms gave paths up to
    # 10% apart daily and 36% hourly: LightGBM bins a feature's negative and positive
    # values apart)
    assert in_kwh.keys() == in_small.keys() and in_kwh
    for customer, found in in_kwh.items():
        for field in ("backtest", "path", "sigma"):
            np.testing.assert_allclose(
                getattr(in_small[customer], field),
                getattr(found, field) * 1024,
                rtol=1e-5,
                err_msg=f"{customer} {field}",
            )


def test_a_customer_too_short_for_a_model_of_its_own_gets_a_cold_start(tmp_path) -> None:
    # Given a shard of 30 customers with 120 days, one with 5 days, one with 2 days left
    # out of the fit (incomplete) and nothing else
    instance = Instance.create(
        tmp_path, candidates="seasonal_naive,ets,fleet", forecast_export_days="14"
    )
    customers = {f"c{i:02d}": weekly_series(i) for i in range(30)}
    customers["newcomer"] = weekly_series(99).tail(5)
    # (and one whose readings stop ten days before the others')
    customers["lagging"] = weekly_series(97).head(110)
    nothing = weekly_series(98).tail(2)
    nothing["use"] = ["incomplete", "incomplete"]
    customers["nothing"] = nothing
    instance.add_part("part-00000.parquet", customers)

    # When the instance trains
    run = run_container(instance)

    # Then the newcomer has a cold-start model, served like any, with no backtest to judge
    assert run.exit_code == 0, instance.failure()
    results = {r.customer_id: r for r in instance.manifest().customers}
    assert results["newcomer"].outcome is CustomerOutcome.TRAINED
    model_json, metadata = read_archive(instance.archive("newcomer"))
    assert metadata.model_kind == "cold_start"
    assert metadata.metrics is None and metadata.backtest.windows == 0
    assert "5 periods to fit, fewer than the 28" in metadata.backtest.why
    forecast = compile_archive(model_json, metadata.model_kind, "D", 30).forecast(30, seed=1)
    level = customers["newcomer"]["y"].mean()
    assert forecast.yhat.mean() == pytest.approx(level, rel=0.5)
    # And the customers with weeks of history have the fleet family scored among the others
    _, regular = read_archive(instance.archive("c00"))
    assert regular.backtest.score("fleet") is not None
    # And one whose history ends before the fleet's is trained, the fleet not scored for it
    # (its windows' origins are not the fleet's)
    assert results["lagging"].outcome is CustomerOutcome.TRAINED
    _, lagging = read_archive(instance.archive("lagging"))
    assert lagging.backtest.score("fleet") is None
    # And a customer with no whole day is failed, saying how many it has and needs
    assert results["nothing"].outcome is CustomerOutcome.FAILED
    assert (
        results["nothing"].reason == "has 0 rows to fit (2 incomplete left out), needs at least 28"
    )
    assert pd.notna(results["c05"].metrics.wape)


def test_a_fleet_larger_than_one_origins_share_learns() -> None:
    # Given a fleet of more customers than one origin's share of the samples (each origin
    # then takes a subset of them)
    series = histories(fleet.ORIGIN_BUDGET // fleet.unit_of(Frequency.DAILY).origins + 50, 120)

    # When it learns; then every customer is forecast
    assert len(learnt(series)) == len(series)


@pytest.mark.parametrize("with_teachers", [False, True])
def test_a_run_of_a_few_customers_learns_from_the_stored_teachers(
    tmp_path, with_teachers: bool
) -> None:
    # Given a run of four customers, fewer than the fleet family learns from alone, and
    # (or not) the stored customers processing sent beside them as the fleet's teachers
    instance = Instance.create(
        tmp_path, candidates="seasonal_naive,ets,fleet", forecast_export_days="14"
    )
    own = {f"run-{i}": weekly_series(i) for i in range(4)}
    instance.add_part("part-00000.parquet", own)
    if with_teachers:
        stored = {f"stored-{i:02d}": weekly_series(100 + i) for i in range(30)}
        # (one of the run's own customers is among them too: it is not taught twice)
        instance.add_part("teachers.parquet", {**stored, "run-0": own["run-0"]}, channel="fleet")

    # When the instance trains
    run = run_container(instance)

    # Then only the run's customers are trained...
    assert run.exit_code == 0, instance.failure()
    assert sorted(c.customer_id for c in instance.manifest().customers) == sorted(own)
    # ...and the fleet family is scored for them only when it had the teachers to learn from
    _, metadata = read_archive(instance.archive("run-1"))
    assert (metadata.backtest.score("fleet") is not None) is with_teachers


HOURLY_HORIZON = 48


def hourly_histories(customers: int, hours: int, seed: int = 0) -> list[History]:
    """Hourly series with a level, a daily shape peaking at each customer's own hour, a
    quieter weekend and noise, all ending at the same hour."""
    rng = np.random.default_rng(seed)
    times = np.datetime64("2024-01-01T00", "us") + np.arange(hours) * np.timedelta64(1, "h")
    hour = np.arange(hours) % 24
    weekend = ((np.arange(hours) // 24 + 0) % 7) >= 5  # 2024-01-01 was a Monday
    found = []
    for _ in range(customers):
        peak = rng.integers(0, 24)
        shape = 1 + 0.6 * np.cos(2 * np.pi * (hour - peak) / 24) - 0.3 * weekend
        values = rng.uniform(1, 10) * shape * rng.normal(1, 0.05, hours)
        found.append(History(times, values))
    return found


def hourly_learnt(series: list[History]) -> dict[str, fleet.FleetForecast]:
    ids = [f"h{i:03d}" for i in range(len(series))]
    return fleet.learn(
        ids,
        series,
        [None] * len(series),
        HOURLY_HORIZON,
        WINDOWS,
        threads=1,
        frequency=Frequency.HOURLY,
    )


@pytest.mark.parametrize("window", range(WINDOWS))
def test_an_hourly_windows_forecast_uses_no_hour_at_or_after_its_origin(window: int) -> None:
    # Given an hourly fleet's histories (ten weeks), and the same with every hour from a
    # backtest window's origin on tripled
    hours = 10 * 168
    series = hourly_histories(30, hours)
    origin = hours - (WINDOWS - window) * HOURLY_HORIZON
    changed = [
        History(h.times, np.where(np.arange(hours) >= origin, h.values * 3, h.values))
        for h in series
    ]

    # When the fleet learns from each
    before, after = hourly_learnt(series), hourly_learnt(changed)

    # Then that window's forecasts and the earlier windows' are the same
    assert before.keys() == after.keys() and len(before) == 30
    for customer_id, forecast in before.items():
        kept = forecast.backtest[: window + 1]
        assert np.isfinite(kept[-1]).all(), customer_id
        np.testing.assert_array_equal(kept, after[customer_id].backtest[: window + 1])
    assert any(not np.array_equal(before[c].path, after[c].path) for c in before)


def test_the_hourly_fleet_forecasts_each_customers_own_hours() -> None:
    # Given an hourly fleet whose customers peak at different hours of the day
    series = hourly_histories(40, 10 * 168, seed=3)

    # When the fleet learns
    found = hourly_learnt(series)

    # Then each customer's forecast follows its own day (not the fleet's average day): its
    # forecast hours correlate with the same hours of its last week
    assert len(found) == 40
    for index, history in enumerate(series):
        forecast = found[f"h{index:03d}"]
        # (the path is a season long, a week of hours, though the horizon is 48 hours)
        assert forecast.season == 168 and forecast.path.shape == (168,)
        assert forecast.sigma.shape == (168,)
        assert forecast.last_history == history.times[-1]
        last_week = history.values[-168:]
        assert np.corrcoef(forecast.path, last_week)[0, 1] > 0.8, index
        assert forecast.path.mean() == pytest.approx(last_week.mean(), rel=0.25)
    # And its archive says the weekly season, so the served path repeats weeks past it
    model = found["h000"].model(100)
    assert model["season"] == 168


def test_an_hourly_shard_scores_the_fleet_and_serves_a_newcomer_a_cold_start(tmp_path) -> None:
    # Given an hourly shard of 24 customers with six weeks of hours and one with two days
    instance = Instance.create(
        tmp_path,
        candidates="seasonal_naive,fleet",
        frequency="H",
        holdout_days="1",
        forecast_export_days="2",
    )
    hours = 6 * 168
    stamps = pd.date_range("2025-01-06", periods=hours, freq="h")
    series = hourly_histories(25, hours, seed=5)
    customers = {
        f"h{i:02d}": pd.DataFrame({"ds": stamps, "y": h.values.round(4)})
        for i, h in enumerate(series[:24])
    }
    customers["newcomer"] = pd.DataFrame({"ds": stamps[-48:], "y": series[24].values[-48:]})
    # (and one of 400 hours: more than the 192 a model of its own needs with this
    # instance's holdout, fewer than the 505 of three weeks of lags and a backtest window; and a meter read once a day, whose
    # days processing left out as incomplete hours)
    customers["three_weeks"] = pd.DataFrame({"ds": stamps[-400:], "y": series[3].values[-400:]})
    days = stamps[::24]
    customers["daily_meter"] = pd.DataFrame(
        {"ds": days, "y": [24.0] * len(days), "use": ["incomplete"] * len(days)}
    )
    instance.add_part("part-00000.parquet", customers)

    # When the instance trains
    run = run_container(instance)

    # Then the fleet is scored for the customers with weeks of hours, an hourly model
    assert run.exit_code == 0, instance.failure()
    _, regular = read_archive(instance.archive("h00"))
    assert regular.backtest.score("fleet") is not None
    # And the newcomer has an hourly cold start at its own level
    model_json, metadata = read_archive(instance.archive("newcomer"))
    assert metadata.model_kind == "cold_start"
    assert "48 periods to fit" in metadata.backtest.why
    forecast = compile_archive(model_json, "cold_start", "H", 48).forecast(48, seed=1)
    level = customers["newcomer"]["y"].mean()
    assert forecast.yhat.mean() == pytest.approx(level, rel=0.5)
    # And the customer too short for a backtest has one too, saying so
    _, three_weeks = read_archive(instance.archive("three_weeks"))
    assert three_weeks.model_kind == "cold_start"
    assert "400 periods to fit, too few for a backtest (it needs 505)" in three_weeks.backtest.why
    # And the daily meter fails, saying why no hour of it can be fitted
    outcome = {c.customer_id: c for c in instance.manifest().customers}["daily_meter"]
    assert outcome.outcome is CustomerOutcome.FAILED
    assert outcome.reason == (
        "has 0 rows to fit: its meter reads every 24 h, less often than the model's hours, "
        "so none of its 42 hours has a total of its own (hourly models need readings at "
        "least every hour); needs at least 192"
    )


def test_an_hourly_fleet_learns_from_origins_on_every_weekday() -> None:
    # Given an hourly fleet of ten weeks
    unit = fleet.unit_of(Frequency.HOURLY)
    series = hourly_histories(20, 10 * 168)
    grid = fleet._grid(series, [None] * len(series), HOURLY_HORIZON, unit)

    # When its samples are drawn
    features = fleet._training_set(grid, np.arange(20), grid.columns, HOURLY_HORIZON).features

    # Then their origins (the target's hour of the week less its step) fall on all seven
    # days at the series' hour of the day: the step does not say the hour of the week
    column = {name: i for i, name in enumerate(unit.features)}
    origin_hour = (features[:, column["weekday"]] - features[:, column["step"]]) % 168
    assert sorted(np.unique(origin_hour)) == [24 * day for day in range(7)]
    # (a daily model keeps its weekly origins)
    assert fleet.unit_of(Frequency.DAILY).origin_spacing == 7


def test_an_hourly_customers_hour_median_is_not_moved_by_one_spike() -> None:
    # Given an hourly customer of six weeks using 1 every hour, but 100 at 18:00 on one day
    # of its last four weeks, among twelve like it without the spike
    unit = fleet.unit_of(Frequency.HOURLY)
    hours = 6 * 168
    times = np.datetime64("2024-01-01T00", "us") + np.arange(hours) * np.timedelta64(1, "h")
    spiked = np.ones(hours)
    spiked[hours - 3 * 24 + 18] = 100.0
    series = [History(times, spiked)] + [History(times, np.ones(hours)) for _ in range(12)]
    grid = fleet._grid(series, [None] * len(series), HOURLY_HORIZON, unit)

    # When the features of the next day's 18:00 are built
    found, level, _ = fleet._features(grid, np.arange(2), grid.columns, np.array([18]))

    # Then the hour's mean carries the spike and its medians do not (over the level)
    column = {name: i for i, name in enumerate(unit.features)}
    spike = found[0, 0]
    assert spike[column["hour_profile"]] * level[0] == pytest.approx((27 + 100) / 28)
    assert spike[column["hour_median"]] * level[0] == pytest.approx(1.0)
    assert spike[column["hour_median_week"]] * level[0] == pytest.approx(1.0)
    # And the hours just before the origin are the last hours' (1 each, over the level)
    assert spike[column["last_hours"]] == pytest.approx(1 / level[0])
    assert spike[column["hour_before_last"]] == pytest.approx(1 / level[0])


def test_the_hour_median_skips_missing_values() -> None:
    # Given hours with missing values, and an hour with none
    rng = np.random.default_rng(5)
    values = rng.uniform(0, 1, (6, 28, 24))
    values[rng.random(values.shape) < 0.3] = np.nan
    values[0, :, 3] = np.nan

    # When their medians over the days are taken; then they are numpy's nanmedian's
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        expected = np.nanmedian(values, axis=1)
    np.testing.assert_array_equal(fleet._nanmedian_axis1(values), expected)
    assert np.isnan(fleet._nanmedian_axis1(values)[0, 3])


@pytest.mark.parametrize("frequency", [Frequency.DAILY, Frequency.HOURLY])
def test_a_customers_features_are_its_own_whatever_origins_are_built_with_it(
    frequency: Frequency,
) -> None:
    # Given a fleet of ten weeks
    unit = fleet.unit_of(frequency)
    periods = 10 * unit.season
    if frequency is Frequency.HOURLY:
        series = hourly_histories(6, periods)
    else:
        times = np.datetime64("2024-01-01", "us") + np.arange(periods) * np.timedelta64(1, "D")
        rng = np.random.default_rng(3)
        series = [History(times, rng.uniform(1, 2, periods)) for _ in range(6)]
    grid = fleet._grid(series, [None] * len(series), HOURLY_HORIZON, unit)

    # When three customers' features are built at once, each at its own origin and steps
    rows = np.array([0, 3, 5])
    # (the last reaches outside the grid: its first columns, and the year before them)
    origins = np.array([grid.columns - 1, grid.columns - unit.season - 3, 3 * unit.season])
    steps = np.array([[0, 1, 5], [2, 3, 9], [0, 7, 8]])
    together, level, counted = fleet._features(grid, rows, origins, steps)

    # Then each is what it is built alone
    for i in range(len(rows)):
        alone, own_level, own_counted = fleet._features(
            grid, rows[i : i + 1], int(origins[i]), steps[i]
        )
        np.testing.assert_array_equal(together[i], alone[0])
        np.testing.assert_array_equal([level[i], counted[i]], [own_level[0], own_counted[0]])


def _fits_of(
    series: list[History], frequency: Frequency, horizon: int, windows: int, monkeypatch
) -> tuple[dict[str, fleet.FleetForecast], list[tuple[int, int, fleet._Samples]]]:
    """The fleet's forecasts of ``series``, and each training set its trees were fitted
    on: its cut-off, the grid's columns and the samples."""
    fits: list[tuple[int, int, fleet._Samples]] = []
    built = fleet._training_set

    def recorded(grid, sample, cutoff, served):
        found = built(grid, sample, cutoff, served)
        fits.append((cutoff, grid.columns, found))
        return found

    monkeypatch.setattr(fleet, "_training_set", recorded)
    ids = [f"c{i:03d}" for i in range(len(series))]
    found = fleet.learn(
        ids, series, [None] * len(series), horizon, windows, threads=1, frequency=frequency
    )
    return found, fits


@pytest.mark.parametrize("frequency", [Frequency.DAILY, Frequency.HOURLY])
def test_the_trees_that_make_the_backtest_serve_the_forecast(
    frequency: Frequency, monkeypatch
) -> None:
    # Given a fleet of more than a year and a half
    if frequency is Frequency.HOURLY:
        series, horizon, windows = hourly_histories(12, 80 * 168), HOURLY_HORIZON, 3
    else:
        series, horizon, windows = histories(30, 560), HORIZON, WINDOWS

    # When the fleet learns
    forecasts, fits = _fits_of(series, frequency, horizon, windows, monkeypatch)

    # Then its trees are fitted once, on samples whose targets all come before the first
    # backtest window's origin, and serve every customer with a backtest of every window
    assert len(fits) == 1
    cutoff, columns, samples = fits[0]
    assert cutoff == columns - windows * horizon
    assert len(samples.targets) > 0 and (samples.origins + horizon <= cutoff).all()
    assert len(forecasts) == len(series)
    for forecast in forecasts.values():
        assert np.isfinite(forecast.backtest).all() and np.isfinite(forecast.path).all()


def test_a_fleet_too_young_for_a_backtest_is_served_by_trees_of_its_whole_history(
    monkeypatch,
) -> None:
    # Given a fleet of 60 days: its three 14-day windows leave 18 days before them, fewer
    # than a customer's four weeks of level
    series = histories(30, 60)

    # When the fleet learns
    forecasts, fits = _fits_of(series, Frequency.DAILY, HORIZON, WINDOWS, monkeypatch)

    # Then the backtest's cut-off gives no samples, and trees of the whole history serve
    # every customer, with no backtest of the family
    assert len(fits) == 2 and len(fits[0][2].targets) == 0
    cutoff, columns, samples = fits[1]
    assert cutoff == columns and len(samples.targets) >= fleet.MIN_SAMPLES
    assert len(forecasts) == len(series)
    for forecast in forecasts.values():
        assert np.isnan(forecast.backtest).all() and np.isfinite(forecast.path).all()
