"""stan_json writes the numbers json.dumps would, so CmdStan reads identical data."""

from __future__ import annotations

import json

import numpy as np

from fleetcast_training.stan_backend import stan_json


def test_every_number_reads_back_as_the_same_double() -> None:
    # Given Stan data shaped like Prophet's: scalars, short and long vectors, a matrix,
    # with awkward values (tiny, huge, negative zero, integral floats, thirds)
    rng = np.random.default_rng(0)
    awkward = [1e-05, 0.0, 1e20, 2.5e-300, 1 / 3, 7.0, -1.5e-7, 123456789.123]
    data = {
        "T": 730,
        "tau": 0.05,
        "y": (rng.normal(0, 1, 730) * 10.0 ** rng.integers(-8, 8, 730)).tolist() + awkward,
        "X": rng.normal(0, 1, (730, 26)).tolist(),
        "s_a": [1] * 300,
        "t_change": [],
        "sigmas": [10.0] * 26,
    }
    # When written by stan_json
    text = stan_json(data)
    # Then it is JSON that holds exactly the same numbers as json.dumps would write
    assert json.loads(text) == json.loads(json.dumps(data))
    assert [float(v) for v in json.loads(text)["y"]] == data["y"]
    assert "0.00001" in text  # the long vectors and the matrix did take Arrow's path


def test_values_arrow_would_spell_ambiguously_take_the_standard_encoder() -> None:
    # NaN is not JSON for Arrow; "-0" could be read back as the integer 0
    for odd in (float("nan"), -0.0):
        data = {"y": [odd] + [1.0] * 300}
        assert stan_json(data) == '{"y":' + json.dumps(data["y"]) + "}"
