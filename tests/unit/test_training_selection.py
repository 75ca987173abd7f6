"""The selection rule's fallback: the naive blend, half seasonal naive and half the
combination, when the combination is worse than seasonal naive on the backtest."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pytest

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.quality_gate import passes_quality_gate
from fleetcast_forecasters import ets, naive_blend, seasonal_median, seasonal_naive, theta
from fleetcast_forecasters.candidates import BacktestPlan, Histories
from fleetcast_forecasters.combination import COMBINING
from fleetcast_forecasters.families import compile_archive
from fleetcast_forecasters.gaussian import common_fields
from fleetcast_training.selection import COMBINATION, NAIVE_BLEND, Candidate, choose

LAST = np.datetime64("2025-03-01")
ORIGINS = [datetime(2025, 2, 1), datetime(2025, 2, 15)]


def fitted_models() -> dict[str, dict[str, object]]:
    """Real whole-history models of four numpy families on ten weeks of one customer."""
    rng = np.random.default_rng(7)
    week = np.array([10.0, 11, 12, 13, 14, 20, 22])
    values = (np.tile(week, 10) + rng.normal(0, 1, 70)).reshape(70, 1)
    grids = Histories(
        values=values,
        first=np.zeros(1, dtype=np.intp),
        last_history=np.array([LAST]),
        season=7,
        uncertainty_samples=0,
        interval_width=0.8,
    )
    plan = BacktestPlan.of(grids.periods, 14, 2)
    models = {}
    for family in (seasonal_naive, seasonal_median, ets, theta):
        model = family.FAMILY.fit(grids, plan).models[0]
        assert model is not None
        models[family.KIND] = model
    return models


def backtests(naive: float, **members: float) -> dict[str, np.ndarray]:
    """Each candidate's backtest: a constant forecast over two windows of 14 days."""
    return {
        kind: np.full((2, 14), level)
        for kind, level in {seasonal_naive.KIND: naive, **members}.items()
    }


ACTUAL = np.full((2, 14), 100.0)


def test_a_combination_worse_than_naive_falls_back_to_the_blend_when_it_is_best():
    # Given a customer whose combination over-forecasts by 10% on the backtest and whose
    # seasonal naive under-forecasts by 9% (the combination fails the gate)
    models = fitted_models()
    bt = backtests(91.0, ets=110.0, theta=110.0, seasonal_median=110.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    common = common_fields(LAST, 0, 0.8)
    # When the model is chosen
    choice = choose(candidates, ACTUAL, ORIGINS, None, common, 1)
    # Then it is the naive blend, halfway between them (0.5 off, the least error)
    assert choice is not None and choice.kind == NAIVE_BLEND
    assert choice.backtest.chosen == NAIVE_BLEND and "least backtest error" in choice.backtest.why
    blend = choice.backtest.score(NAIVE_BLEND)
    assert blend is not None and blend.mae == pytest.approx(0.5)
    assert passes_quality_gate(choice.metrics)
    # And its model holds seasonal naive at half the weight and the combination's members
    # at a sixth each, and is served as their weighted mean
    members = {member["kind"]: member for member in choice.model["members"]}
    assert choice.model["kind"] == NAIVE_BLEND
    assert {kind: member["weight"] for kind, member in members.items()} == pytest.approx(
        {"seasonal_naive": 0.5, "ets": 1 / 6, "theta": 1 / 6, "seasonal_median": 1 / 6}
    )
    served = compile_archive(json.dumps(choice.model), NAIVE_BLEND, "D", 14).yhat
    paths = {kind: compile_archive(models[kind], kind, "D", 14).yhat for kind in members}
    expected = 0.5 * paths["seasonal_naive"] + sum(
        paths[kind] / 6 for kind in ("ets", "theta", "seasonal_median")
    )
    np.testing.assert_allclose(served, np.maximum(expected, 0), rtol=1e-12)


def test_the_combination_is_served_when_it_passes_the_gate_even_if_the_blend_scores_better():
    # Given a combination 2% over and naive 3% under: the blend (0.5% under) scores best
    models = fitted_models()
    bt = backtests(97.0, ets=102.0, theta=102.0, seasonal_median=102.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    choice = choose(candidates, ACTUAL, ORIGINS, None, {}, 1)
    # Then the combination is served, and the blend recorded as the runner-up
    assert choice is not None and choice.kind == COMBINATION
    assert choice.backtest.runner_up == NAIVE_BLEND


def test_a_single_candidate_closer_than_the_blend_is_served_instead():
    models = fitted_models()
    bt = backtests(95.0, ets=99.0, theta=130.0, seasonal_median=130.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    choice = choose(candidates, ACTUAL, ORIGINS, None, {}, 1)
    assert choice is not None and choice.kind == "ets"


def test_without_seasonal_naive_among_the_servable_kinds_there_is_no_blend():
    # Given naive scored only as the yardstick (the stack's candidates leave it out)
    models = fitted_models()
    bt = backtests(91.0, ets=110.0, theta=110.0, seasonal_median=110.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    servable = {"ets", "theta", "seasonal_median"}
    choice = choose(candidates, ACTUAL, ORIGINS, None, {}, 1, servable=servable)
    # Then no blend is scored or served
    assert choice is not None and choice.kind in servable
    assert choice.backtest.score(NAIVE_BLEND) is None


def test_candidates_that_share_no_usable_point_with_the_rest_are_left_out_not_the_customer():
    # Given a meter off (no usable value) until the last week of the last window, so that
    # seasonal naive and the seasonal median have no last weeks to forecast those days from
    # (the NSW household 10017650 of make accuracy's earlier window), while ETS and Theta
    # forecast every point, ETS 5% over and Theta 10% under
    models = fitted_models()
    bt = backtests(100.0, ets=105.0, theta=90.0, seasonal_median=100.0)
    actual = np.full((2, 14), np.nan)
    actual[1, 7:] = 100.0
    for kind in (seasonal_naive.KIND, seasonal_median.KIND):
        bt[kind][:] = np.nan
    bt[seasonal_median.KIND][0, :3] = 100.0  # points of no usable value: not shared
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    # When the model is chosen
    choice = choose(candidates, actual, ORIGINS, None, {}, 1)
    # Then the customer is served the combination of what could be scored, on the seven
    # usable points, and the backtest says what was left out and why
    assert choice is not None and choice.kind == COMBINATION
    assert [m["kind"] for m in choice.model["members"]] == ["ets", "theta"]
    assert choice.backtest.windows == 1
    assert {s.model_kind for s in choice.backtest.candidates} == {"ets", "theta", COMBINATION}
    assert choice.backtest.score(COMBINATION).mae == pytest.approx(2.5)
    assert "seasonal_naive, seasonal_median left out" in choice.backtest.why
    # And with no usable point at all there is still nothing to choose from
    assert choose(candidates, np.full((2, 14), np.nan), ORIGINS, None, {}, 1) is None


def test_candidates_sharing_a_usable_point_are_all_scored_on_the_points_they_share():
    # Given seasonal naive without the first window (too little history before it)
    models = fitted_models()
    bt = backtests(95.0, ets=99.0, theta=130.0, seasonal_median=130.0)
    bt[seasonal_naive.KIND][0] = np.nan
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    choice = choose(candidates, ACTUAL, ORIGINS, None, {}, 1)
    # Then every candidate is scored, on the second window alone, and none left out
    assert choice is not None and choice.backtest.windows == 1
    assert choice.backtest.score(seasonal_naive.KIND) is not None
    assert "left out" not in choice.backtest.why


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m["members"][0].update(weight=0), "weights must be positive"),
        (lambda m: m["members"][0].update(weight="x"), "weights must be positive"),
        (lambda m: m["members"].append({"kind": COMBINATION, "model": {}}), "none of them"),
        (lambda m: m["members"][0].pop("model"), "not a fitted naive_blend"),
        (lambda m: m.update(kind=COMBINATION), "not a naive_blend model"),
    ],
)
def test_a_blend_that_is_not_a_fitted_one_is_refused_naming_what_is_wrong(change, message):
    models = fitted_models()
    model = {
        "kind": NAIVE_BLEND,
        "members": [
            {"kind": kind, "model": models[kind], "weight": 0.5}
            for kind in ("seasonal_naive", "ets")
        ],
        "sigma": 1.0,
        **common_fields(LAST, 0, 0.8),
    }
    change(model)
    with pytest.raises(ValueError, match=message):
        compile_archive(json.dumps(model), NAIVE_BLEND, "D", 14)


def test_the_blend_is_one_of_the_kinds_written_as_combinations():
    assert naive_blend.KIND in COMBINING and COMBINATION in COMBINING


def test_a_member_of_weight_two_counts_twice_in_the_combination_and_its_blend(monkeypatch):
    # Given ETS of weight 2 beside Theta and the seasonal median of weight 1
    from fleetcast_training import selection

    weights = {"ets": 2.0, "theta": 1.0, "seasonal_median": 1.0}
    monkeypatch.setattr(selection, "COMBINED", {Frequency.DAILY: weights})
    models = fitted_models()
    # (and seasonal naive 5% under: the combination fails the gate)
    bt = backtests(95.0, ets=110.0, theta=106.0, seasonal_median=106.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    # When the model is chosen
    choice = choose(candidates, ACTUAL, ORIGINS, None, common_fields(LAST, 0, 0.8), 1)
    # Then the combination's backtest is the weighted mean (108 = (2 x 110 + 106 + 106) / 4)
    assert choice is not None
    combination = choice.backtest.score(COMBINATION)
    assert combination is not None and combination.mae == pytest.approx(8.0)
    # And the served blend (the least error: 0.5 x 95 + 0.5 x 108 = 101.5) holds the
    # members' half in proportion to their weights, served as that weighted mean
    assert choice.kind == NAIVE_BLEND
    weights = {m["kind"]: m["weight"] for m in choice.model["members"]}
    assert weights == pytest.approx(
        {"seasonal_naive": 0.5, "ets": 0.25, "theta": 0.125, "seasonal_median": 0.125}
    )
    served = compile_archive(json.dumps(choice.model), NAIVE_BLEND, "D", 14).yhat
    paths = {kind: compile_archive(models[kind], kind, "D", 14).yhat for kind in weights}
    expected = sum(weights[kind] * paths[kind] for kind in weights)
    np.testing.assert_allclose(served, np.maximum(expected, 0), rtol=1e-12)


def test_a_model_is_combined_with_its_own_frequencys_weights(monkeypatch):
    # Given ETS weighing 3 in an hourly model's combination and 1 in a daily one's
    from fleetcast_training import selection

    monkeypatch.setattr(
        selection,
        "COMBINED",
        {
            Frequency.DAILY: {"ets": 1.0, "theta": 1.0, "seasonal_median": 1.0},
            Frequency.HOURLY: {"ets": 3.0, "theta": 1.0, "seasonal_median": 1.0},
        },
    )
    models = fitted_models()
    bt = backtests(150.0, ets=110.0, theta=95.0, seasonal_median=95.0)
    candidates = [Candidate(kind, bt[kind], models[kind]) for kind in bt]
    common = common_fields(LAST, 0, 0.8)
    # When the same candidates are chosen among for a daily and for an hourly model
    daily = choose(candidates, ACTUAL, ORIGINS, None, common, 1)
    hourly = choose(candidates, ACTUAL, ORIGINS, None, common, 24)
    # Then each combination is its frequency's weighted mean: (110 + 95 + 95) / 3 = 100
    # daily, (3 x 110 + 95 + 95) / 5 = 104 hourly, and its model says so
    assert daily is not None and hourly is not None
    assert daily.kind == hourly.kind == COMBINATION
    assert daily.backtest.score(COMBINATION).mae == pytest.approx(0.0)
    assert hourly.backtest.score(COMBINATION).mae == pytest.approx(4.0)
    weights = {m["kind"]: m.get("weight", 1) for m in hourly.model["members"]}
    assert weights == {"ets": 3.0, "theta": 1, "seasonal_median": 1}
