"""Serving Prophet models, end to end on a local stack with ``ModelCandidates=prophet``:
every customer is served Prophet (seasonal naive is scored, as the gate's yardstick, and
Prophet beats it on these series), and the API's forecasts and quantiles are Prophet's
own ``predict`` and ``predictive_samples`` of the live archive, loaded with
``prophet.serialize.model_from_json``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prophet.serialize import model_from_json
from test_pipeline import finished, readings, registry, to_csv, upload
from test_serving import get, get_when_ready, live_archive

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_contracts.families import PROPHET
from fleetcast_forecasters import calibration
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.prophet_forecaster import forecast_seed

pytestmark = [
    pytest.mark.e2e,
    # Its stack has ModelCandidates=prophet: it cannot share a process with the session's.
    pytest.mark.own_stack,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]
DAYS = 150
CUSTOMERS = [f"pro-{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def prophet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    state_dir: Path = tmp_path_factory.mktemp("fleetcast-prophet")
    local = EmbeddedStack(
        state_dir=state_dir,
        port=0,
        parameters={"TrainingInstanceCount": "1", "ModelCandidates": "prophet"},
    )
    local.start()
    yield local
    local.stop()


@pytest.fixture(scope="module")
def served(prophet_stack: EmbeddedStack) -> dict[str, Any]:
    """A finished run of the customers, and the stack's serving environment."""
    run_id = upload(
        prophet_stack, "prophet.csv", to_csv(readings(CUSTOMERS, "2024-03-01", DAYS, seed=3))
    )
    status = finished(prophet_stack, run_id)
    assert status.customers_registered == len(CUSTOMERS), status
    assert prophet_stack.info is not None
    return {"run_id": run_id, "env": prophet_stack.info.environment()}


def prophet_model(stack: EmbeddedStack, customer_id: str) -> Any:
    """The customer's live model, loaded by Prophet itself, after checking it is Prophet's."""
    model_json, metadata = live_archive(stack, customer_id)
    assert metadata.model_kind == PROPHET, (customer_id, metadata.backtest)
    return model_from_json(model_json)


def test_only_prophet_and_its_yardstick_were_candidates(
    prophet_stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    # Then every live model is Prophet's, scored beside seasonal naive alone
    models = registry(prophet_stack)
    for customer_id in CUSTOMERS:
        live = models.live(customer_id)
        assert live is not None and live.model_kind == PROPHET, customer_id
        _, metadata = live_archive(prophet_stack, customer_id)
        assert metadata.backtest is not None
        scored = {score.model_kind for score in metadata.backtest.candidates}
        assert scored == {PROPHET, "seasonal_naive"}, customer_id


def test_every_customer_gets_prophets_forecast_through_the_api(
    prophet_stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    for index, customer_id in enumerate(CUSTOMERS):
        period = (7, 1, 30)[index % 3]
        # Given Prophet's own predict of the customer's live model
        model = prophet_model(prophet_stack, customer_id)
        future = model.make_future_dataframe(periods=period, include_history=False)
        expected = model.predict(future)["yhat"].to_numpy()
        # When the API is asked for its forecast
        status, _, body = get_when_ready(
            served["env"], f"/customers/{customer_id}/forecast?period={period}"
        )
        # Then it is Prophet's, dated as Prophet dates it
        assert status == 200, body
        assert body["run_id"] == served["run_id"]
        assert [p["ds"][:10] for p in body["forecast"]] == [str(day.date()) for day in future["ds"]]
        yhat = [point["yhat"] for point in body["forecast"]]
        assert np.allclose(yhat, expected, rtol=0, atol=1e-6)
        assert all(p["yhat_lower"] < p["yhat"] < p["yhat_upper"] for p in body["forecast"])


def test_quantiles_through_the_api_are_those_of_the_calibrated_interval(
    prophet_stack: EmbeddedStack, served: dict[str, Any]
) -> None:
    # Given a customer's live Prophet model, whose interval its own backtest calibrated
    # (fleetcast_forecasters.calibration: Prophet's point forecast, the backtest's errors'
    # width), compiled here as the container compiles it, seeded as it seeds this run
    customer_id, period = "pro-05", 14
    model_json, metadata = live_archive(prophet_stack, customer_id)
    assert metadata.model_kind == PROPHET
    assert json.loads(model_json)[calibration.FIELD] is not None
    compiled = compile_archive(model_json, PROPHET, "D").forecast(
        period, forecast_seed(served["run_id"]), (0.1, 0.5, 0.9)
    )
    path = f"/customers/{customer_id}/forecast?period={period}"

    # When the API is asked for quantiles (out of order, one repeated), and without them
    status, _, body = get(served["env"], path + "&quantiles=0.9,0.1,0.5,0.10")
    again = get(served["env"], path + "&quantiles=0.1,0.5,0.9")[2]
    plain = get(served["env"], path)[2]

    # Then each point carries the calibrated simulation's quantiles, the same every time,
    # beside the answer it has without them
    assert status == 200, body
    assert body["quantiles"] == [0.1, 0.5, 0.9] and again == body
    got = [[point["quantiles"][q] for q in ("0.1", "0.5", "0.9")] for point in body["forecast"]]
    assert compiled.quantile_values is not None
    np.testing.assert_allclose(got, compiled.quantile_values.T, rtol=0, atol=1e-6)
    assert [{k: p[k] for k in p if k != "quantiles"} for p in body["forecast"]] == plain["forecast"]
    # ... and the interval is the calibrated one, around Prophet's own point forecast
    bounds = [[point["yhat_lower"], point["yhat_upper"]] for point in plain["forecast"]]
    np.testing.assert_allclose(
        bounds, np.stack([compiled.yhat_lower, compiled.yhat_upper], axis=1), rtol=0, atol=1e-6
    )
    model = prophet_model(prophet_stack, customer_id)
    future = model.make_future_dataframe(periods=period, include_history=False)
    np.testing.assert_allclose(
        [p["yhat"] for p in plain["forecast"]], model.predict(future)["yhat"], rtol=0, atol=1e-6
    )
