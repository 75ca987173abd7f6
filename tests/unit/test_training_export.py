"""The run's forecast export and accuracy table, written by the training container."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_training_job import (
    DAYS,
    RUN_ID,
    Instance,
    Run,
    _archive_of_a_trained_customer,
    run_container,
    weekly_series,
)

from fleetcast_contracts.model_archive import read_archive, write_archive
from fleetcast_contracts.training_manifest import CustomerOutcome, CustomerResult
from fleetcast_inference.app import InferenceApp, Request
from fleetcast_inference.settings import InferenceSettings
from fleetcast_training.export import (
    ExportedCustomer,
    ExportedForecast,
    ShardExport,
    forecast_batch,
)
from fleetcast_training.run_exports import ACCURACY_SCHEMA, FORECAST_SCHEMA

GOOD = ["acme", "globex", "initech"]


def forecasts(instance: Instance) -> pa.Table:
    parts = sorted((instance.checkpoints / "exports" / "forecasts").glob("part-*.parquet"))
    assert parts
    return pa.concat_tables(pq.read_table(part) for part in parts)


def accuracy(instance: Instance) -> pa.Table:
    return pq.read_table(instance.checkpoints / "exports" / "accuracy" / "part-algo-1.parquet")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Instance, Run]:
    # Given a shard of three good customers and one with too few rows
    instance = Instance.create(tmp_path_factory.mktemp("opt-ml"), forecast_export_days="10")
    for seed, customer_id in enumerate(GOOD):
        instance.add_customer(customer_id, weekly_series(seed))
    instance.add_customer("tiny", weekly_series(9, days=3))
    # When SageMaker runs the container
    return instance, run_container(instance)


def test_every_trained_customer_has_its_horizon_of_rows_after_its_history(
    exported: tuple[Instance, Run],
):
    instance, run = exported
    assert run.exit_code == 0
    table = forecasts(instance)
    # Then the parts have the export's schema and ten days per trained customer, once each
    assert table.schema == FORECAST_SCHEMA
    rows = table.to_pylist()
    assert sorted({row["customer_id"] for row in rows}) == GOOD
    assert len(rows) == 10 * len(GOOD)
    assert {row["run_id"] for row in rows} == {RUN_ID}
    for customer_id in GOOD:
        _, metadata = read_archive(instance.archive(customer_id))
        days = [row["ds"].date() for row in rows if row["customer_id"] == customer_id]
        first = np.datetime64(metadata.data_end) + np.timedelta64(1, "D")
        assert days == list((first + np.arange(10)).astype(object))
    for row in rows:
        assert 0 <= row["yhat_lower"] <= row["yhat"] <= row["yhat_upper"]


def test_the_exported_forecast_is_what_the_endpoint_serves(
    exported: tuple[Instance, Run], tmp_path: Path
):
    instance, _ = exported
    rows = [r for r in forecasts(instance).to_pylist() if r["customer_id"] == "globex"]
    # Given the endpoint container with the customer's archive loaded, asked for the
    # export's period
    served = _served(instance, "globex", tmp_path, period=10)
    # Then every value, interval included (same seed), is the exported one
    _assert_same_points(served, rows)
    # And asked for fewer days, its days are the export's first, intervals too (a day's
    # draws do not depend on the period: issue 40)
    week = _served(instance, "globex", tmp_path / "week", period=7)
    _assert_same_points(week, rows[:7])


def test_a_customer_whose_last_days_were_not_fitted_is_exported_after_its_last_reading(
    tmp_path: Path,
):
    # Given a customer whose last three days are incomplete (left out of the fit), beside one
    # whose every day is fitted
    instance = Instance.create(tmp_path / "opt-ml", forecast_export_days="10")
    cut = weekly_series(3)
    cut["use"] = ["ok"] * (len(cut) - 3) + ["incomplete"] * 3
    instance.add_part("part-00000.parquet", {"cut": cut, "whole": weekly_series(4)})
    # When the job runs
    assert run_container(instance).exit_code == 0
    rows = forecasts(instance).to_pylist()
    # Then each customer's ten exported days start the day after its last reading, though
    # the cut customer's model ends three days earlier
    last_reading = np.datetime64(cut["ds"].iloc[-1])
    for customer_id in ("cut", "whole"):
        days = [row["ds"].date() for row in rows if row["customer_id"] == customer_id]
        first = last_reading + np.timedelta64(1, "D")
        assert days == list((first + np.arange(10)).astype(object))
    _, metadata = read_archive(instance.archive("cut"))
    assert np.datetime64(metadata.data_end) == last_reading - np.timedelta64(3, "D")
    # And they are the endpoint's answer for the days from the model's end through them
    served = _served(instance, "cut", tmp_path / "endpoint", period=13)
    _assert_same_points(served[3:], [row for row in rows if row["customer_id"] == "cut"])


def test_a_customer_whose_readings_lag_the_runs_is_exported_through_the_runs_horizon(
    tmp_path: Path,
):
    # Given a run whose last period is its current customer's last day, a customer whose
    # readings stopped five days earlier and one whose stopped more than a year earlier
    instance = Instance.create(tmp_path / "opt-ml", forecast_export_days="10")
    current, lagging = weekly_series(5), weekly_series(6, days=DAYS - 5)
    gone = weekly_series(7)
    gone["ds"] = (pd.to_datetime(gone["ds"]) - pd.Timedelta(days=400)).dt.strftime("%Y-%m-%d")
    run_last = np.datetime64(current["ds"].iloc[-1])
    instance.add_part(
        "part-00000.parquet",
        {"current": current, "lagging": lagging, "gone": gone},
        run_last_period=str(run_last.astype("datetime64[us]")),
    )
    # When the job runs
    assert run_container(instance).exit_code == 0
    rows = forecasts(instance).to_pylist()

    def days(customer_id: str) -> list[object]:
        return [row["ds"].date() for row in rows if row["customer_id"] == customer_id]

    def run_of(first: np.datetime64, last: np.datetime64) -> list[object]:
        return list(np.arange(first, last + np.timedelta64(1, "D")).astype(object))

    # Then the current and the lagging customer are exported through the ten days after
    # the run's last day, the lagging one from the day after its own last reading
    one = np.timedelta64(1, "D")
    horizon_end = run_last + 10 * one
    assert days("current") == run_of(run_last + one, horizon_end)
    lagging_end = np.datetime64(lagging["ds"].iloc[-1])
    assert days("lagging") == run_of(lagging_end + one, horizon_end)
    # And the customer gone for over a year gets the ten days after its own readings only
    gone_end = np.datetime64(gone["ds"].iloc[-1])
    assert days("gone") == run_of(gone_end + one, gone_end + 10 * one)
    accuracy_rows = {row["customer_id"]: row for row in accuracy(instance).to_pylist()}
    assert accuracy_rows["lagging"]["forecast_rows"] == 15


def _assert_same_points(served: list[dict[str, object]], rows: list[dict[str, Any]]) -> None:
    """The endpoint's points are the exported rows: dates, values and intervals."""
    assert len(served) == len(rows)
    for point, row in zip(served, rows, strict=True):
        assert point["ds"] == row["ds"].date().isoformat()
        for name in ("yhat", "yhat_lower", "yhat_upper"):
            assert point[name] == pytest.approx(row[name], rel=1e-9, abs=1e-9)


def _served(
    instance: Instance, customer_id: str, root: Path, period: int
) -> list[dict[str, object]]:
    """What the endpoint container answers for ``period`` of the customer's archive."""
    settings = InferenceSettings(
        host="127.0.0.1", port=0, opt_ml_root=root, memory_budget_bytes=2**30, multi_model=True
    )
    folder = settings.models_root / customer_id / "model"
    folder.mkdir(parents=True)
    folder.joinpath(f"{customer_id}.tar.gz").write_bytes(instance.archive(customer_id).read_bytes())
    app = InferenceApp(settings)

    def call(path: str, body: object) -> dict[str, object]:
        response = app.dispatch(Request("POST", path, "", {}, json.dumps(body).encode()))
        assert response.status == 200, response.body
        answer: dict[str, object] = json.loads(response.body)
        return answer

    call("/models", {"model_name": customer_id, "url": f"/opt/ml/models/{customer_id}/model"})
    forecast = call(f"/models/{customer_id}/invoke", {"period": period})["forecast"]
    assert isinstance(forecast, list)
    return forecast


def test_the_accuracy_table_has_every_customer_of_the_shard(exported: tuple[Instance, Run]):
    instance, _ = exported
    table = accuracy(instance)
    assert table.schema == ACCURACY_SCHEMA
    rows = {row["customer_id"]: row for row in table.to_pylist()}
    assert sorted(rows) == [*GOOD, "tiny"]
    manifest = {r.customer_id: r for r in instance.manifest().customers}
    for customer_id in GOOD:
        row, metrics = rows[customer_id], manifest[customer_id].metrics
        assert metrics is not None
        assert (row["outcome"], row["forecast_rows"], row["export_error"]) == ("trained", 10, None)
        for name in ("smape", "wape", "mase", "rmse", "mae"):
            assert row[name] == getattr(metrics, name) and row[name] is not None
            assert row[f"naive_{name}"] == getattr(metrics, f"naive_{name}")
        assert row["beats_naive"] == (metrics.smape < metrics.naive_smape)
    tiny = rows["tiny"]
    assert (tiny["outcome"], tiny["forecast_rows"], tiny["smape"]) == ("failed", 0, None)
    assert tiny["failure_reason"] == "has 3 rows, needs at least 28"


def test_a_resumed_customer_is_exported_once_and_the_counts_reconcile(tmp_path: Path):
    # Given an instance restarted after a spot interruption that had finished one customer
    # (its archive checkpointed) and had even written its parts before being stopped
    instance = Instance.create(tmp_path / "restarted", forecast_export_days="5")
    for seed, customer_id in enumerate(["kept", "fresh"]):
        instance.add_customer(customer_id, weekly_series(seed))
    instance.checkpoints.mkdir()
    earlier = _archive_of_a_trained_customer(tmp_path / "earlier", "kept")
    instance.archive("kept").write_bytes(earlier.read_bytes())
    assert run_container(instance).exit_code == 0
    # When it is restarted once more and finishes
    run = run_container(instance)
    # Then the kept customer was resumed, not refitted, and is in the export exactly once
    assert run.exit_code == 0
    outcomes = instance.outcomes()
    assert outcomes == {"kept": CustomerOutcome.RESUMED, "fresh": CustomerOutcome.RESUMED}
    customers = forecasts(instance).column("customer_id").to_pylist()
    assert sorted(customers) == sorted(["kept"] * 5 + ["fresh"] * 5)
    # And forecast customers == trained + resumed customers
    exported = set(customers)
    counted = [o for o in outcomes.values() if o is not CustomerOutcome.FAILED]
    assert len(exported) == len(counted)


def test_a_model_the_forecaster_cannot_read_keeps_its_result_and_says_why(tmp_path: Path):
    # Given a checkpointed archive whose model is not a Prophet model
    instance = Instance.create(tmp_path, forecast_export_days="5")
    instance.add_customer("odd", weekly_series(0))
    instance.add_customer("good", weekly_series(1))
    instance.checkpoints.mkdir()
    _, metadata = read_archive(_archive_of_a_trained_customer(tmp_path / "earlier", "odd"))
    write_archive(instance.archive("odd"), '{"placeholder": "no model"}', metadata)
    # When the job runs
    assert run_container(instance).exit_code == 0
    # Then the customer is still resumed, without forecast rows, and the reason is exported
    rows = {row["customer_id"]: row for row in accuracy(instance).to_pylist()}
    assert rows["odd"]["outcome"] == "resumed"
    assert rows["odd"]["forecast_rows"] == 0
    assert f"not a {metadata.model_kind} model" in rows["odd"]["export_error"] or (
        "not a fitted Prophet model" in rows["odd"]["export_error"]
    )
    assert set(forecasts(instance).column("customer_id").to_pylist()) == {"good"}


def test_no_export_when_the_horizon_is_zero(tmp_path: Path):
    instance = Instance.create(tmp_path, forecast_export_days="0")
    instance.add_customer("acme", weekly_series(0))
    assert run_container(instance).exit_code == 0
    assert instance.outcomes() == {"acme": CustomerOutcome.TRAINED}
    assert not (instance.checkpoints / "exports").exists()


def test_a_model_without_uncertainty_samples_exports_null_bounds():
    # Given a forecast without an interval (uncertainty_samples=0) beside one with
    dates = np.array(["2025-01-01", "2025-01-02"], dtype="datetime64[ns]")
    plain = ExportedForecast(dates, np.array([1.0, 2.0]), None, None)
    full = ExportedForecast(dates, np.array([3.0, 4.0]), np.array([2.0, 3.0]), np.array([4, 5.0]))
    customers = [
        ExportedCustomer(CustomerResult(customer_id=c, outcome=CustomerOutcome.TRAINED), f)
        for c, f in (("a", plain), ("b", full))
    ]
    # Then the bounds are null where there is none, values where there are
    rows = forecast_batch(RUN_ID, customers).to_pylist()
    assert [(r["customer_id"], r["yhat_lower"], r["yhat_upper"]) for r in rows] == [
        ("a", None, None),
        ("a", None, None),
        ("b", 2.0, 4.0),
        ("b", 3.0, 5.0),
    ]


def test_parts_hold_a_bounded_number_of_customers_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given five customers and at most two to a part
    monkeypatch.setattr("fleetcast_training.export.CUSTOMERS_PER_PART", 2)
    dates = np.array(["2025-01-01"], dtype="datetime64[ns]")
    customers = [
        ExportedCustomer(
            CustomerResult(customer_id=f"c{i}", outcome=CustomerOutcome.TRAINED),
            ExportedForecast(dates, np.array([float(i)]), None, None),
        )
        for i in range(5)
    ]
    # When written twice (a restart), then three parts, each customer once
    for attempt in range(2):
        export = ShardExport(tmp_path / f"spill-{attempt}", RUN_ID)
        for customer in customers:
            export.add(customer)
        paths, _ = export.write(tmp_path, "algo-1")
    assert [p.name for p in paths] == [f"part-algo-1-{n:05d}.parquet" for n in range(3)]
    assert sorted(p.name for p in paths[0].parent.iterdir()) == [p.name for p in paths]
    ids = pa.concat_tables(pq.read_table(p) for p in paths).column("customer_id").to_pylist()
    assert ids == [f"c{i}" for i in range(5)]


def test_a_level_shift_is_in_the_accuracy_table_and_the_archive(tmp_path: Path):
    # Given two customers, one whose use fell to a fifth 20 days before the end, and every
    # family a candidate
    families = "seasonal_naive,seasonal_median,ets,theta,prophet"
    instance = Instance.create(tmp_path, forecast_export_days="5", candidates=families)
    instance.add_customer("steady", weekly_series(0))
    fallen = weekly_series(1)
    fallen.loc[fallen.index[-20:], "y"] *= 0.2
    instance.add_customer("fallen", fallen)
    # When the job runs
    assert run_container(instance).exit_code == 0
    # Then the accuracy table says which customer's history ends in a shift, and how old
    rows = {row["customer_id"]: row for row in accuracy(instance).to_pylist()}
    assert rows["fallen"]["level_shift_days"] == 20
    assert rows["steady"]["level_shift_days"] is None
    _, metadata = read_archive(instance.archive("fallen"))
    assert metadata.backtest is not None and metadata.backtest.level_shift_days == 20
