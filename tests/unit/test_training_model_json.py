"""model.json as training writes it holds the JSON value of Prophet's model_to_json."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_dict, model_to_json

from fleetcast_training.model_json import encode_model


def test_a_fitted_model_is_prophets_json_value_and_loads_back() -> None:
    # Given a Prophet model fitted on a year of daily data
    rng = np.random.default_rng(3)
    history = pd.DataFrame(
        {
            "ds": pd.date_range("2024-01-01", periods=400, freq="D"),
            "y": 50 + 5 * np.sin(np.arange(400) / 7) + rng.normal(0, 1, 400),
        }
    )
    model = Prophet(uncertainty_samples=50).fit(history)
    # When its model_to_dict is encoded
    written = encode_model(model_to_dict(model))
    # Then it is the same JSON value as Prophet's own text, keys in the same order
    ours, prophets = json.loads(written), json.loads(model_to_json(model))
    assert ours == prophets
    assert list(ours) == list(prophets)
    # and Prophet loads it into a model that forecasts exactly as the original
    future = model.make_future_dataframe(14, include_history=False)
    np.testing.assert_array_equal(
        model_from_json(written.decode()).predict(future)["yhat"], model.predict(future)["yhat"]
    )


def test_awkward_floats_read_back_as_the_same_doubles() -> None:
    awkward = [1e-05, 0.0, -0.0, 1e20, 2.5e-300, 1 / 3, 7.0, -1.5e-7, 123456789.123, 5e-324]
    model = {"params": {"trend": [awkward]}, "y_scale": 1e-7, "history": '{"a": "b"}'}
    assert json.loads(encode_model(model)) == model


def test_a_model_holding_nan_or_infinity_is_written_as_json_dumps_writes_it() -> None:
    # orjson would print these as null: Prophet would read back None, not the number
    for odd in (float("nan"), float("inf"), -float("inf")):
        for model in (
            {"params": {"k": [[0.5, odd]]}},
            {"y_min": odd, "params": {}},
            {"changepoints_t": [odd, -odd]},
        ):
            assert encode_model(model) == json.dumps(model).encode()


def test_numbers_that_overflow_a_sum_still_read_back() -> None:
    model = {"params": {"trend": [1.7e308, 1.7e308, -1.0]}}
    assert json.loads(encode_model(model)) == model
