"""Anomaly detection on labelled synthetic billing series (fleetcast.embedded.billing)."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetcast.embedded import billing
from fleetcast_cost.detection import Thresholds, detect_anomalies
from fleetcast_cost.models import Anomaly, DailyUsage, UsageHistory
from fleetcast_cost.sources import parse_usage_pages

THRESHOLDS = Thresholds(relative=0.5, absolute_usd=5.0)
SEEDS = range(12)
# A creep has no single day: the week-long level crosses the thresholds gradually, so
# its label is matched within two days; every other shape must hit its exact day.
CREEP_TOLERANCE_DAYS = 2


def _history(seed: int) -> tuple[billing.BillingHistory, UsageHistory]:
    start = dt.date(2026, 1, 1) + dt.timedelta(days=5 * seed)
    labelled = billing.labelled_history(start, seed=seed)
    # Through the Cost Explorer response shape, as the report reads it.
    return labelled, parse_usage_pages(labelled.pages(), labelled.start, labelled.end)


@pytest.fixture(scope="module")
def detected() -> list[tuple[billing.BillingHistory, list[Anomaly]]]:
    """Twelve 90-day histories, each with every shape: steady, weekly pattern, trend (up
    and down), new usage types, one-day spikes (one on a quiet Saturday, one in a noisy
    series), level shifts, a slow creep and noise; and what the detector found."""
    runs = []
    for seed in SEEDS:
        labelled, history = _history(seed)
        runs.append((labelled, detect_anomalies(history, THRESHOLDS)))
    return runs


def _match(
    labels: list[billing.LabelledAnomaly], found: list[Anomaly]
) -> tuple[int, int, int, int]:
    """(true positives, false positives, false negatives, exact-day hits)."""
    matched: set[int] = set()
    exact = 0
    for label in labels:
        tolerance = CREEP_TOLERANCE_DAYS if label.shape == "creep" else 0
        hit = next(
            (
                i
                for i, anomaly in enumerate(found)
                if i not in matched
                and anomaly.usage_type == label.usage_type
                and abs((anomaly.date - label.day).days) <= tolerance
            ),
            None,
        )
        if hit is not None:
            matched.add(hit)
            exact += found[hit].date == label.day
    true_positives = len(matched)
    return true_positives, len(found) - true_positives, len(labels) - true_positives, exact


def test_precision_and_recall_over_the_labelled_set(
    detected: list[tuple[billing.BillingHistory, list[Anomaly]]],
) -> None:
    # Given the labelled histories and what the detector found in them
    tp = fp = fn = exact = 0
    for labelled, found in detected:
        counts = _match(labelled.labels(), found)
        tp, fp, fn, exact = tp + counts[0], fp + counts[1], fn + counts[2], exact + counts[3]
    # Then precision and recall by (usage type, day) are both at least 0.9
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert precision >= 0.9, (precision, tp, fp, fn)
    assert recall >= 0.9, (recall, tp, fp, fn)
    # And even counting a creep found a day early or late as wrong, they stay above 0.85
    late_or_early = tp - exact
    exact_precision = exact / (exact + fp + late_or_early)
    exact_recall = exact / (exact + fn + late_or_early)
    assert min(exact_precision, exact_recall) >= 0.85, (exact_precision, exact_recall)


def test_a_spike_is_flagged_on_its_own_day_and_only_then(
    detected: list[tuple[billing.BillingHistory, list[Anomaly]]],
) -> None:
    missed_in_noise = 0
    for labelled, found in detected:
        shapes = {series.usage_type: series.shape for series in labelled.series}
        # Given each labelled spike
        for spike in (label for label in labelled.labels() if label.shape == "spike"):
            flagged = [a for a in found if a.usage_type == spike.usage_type]
            # Then its usage type is flagged on the spike's own day, as a spike, and no
            # other day; only a spike in a very noisy series may go unnoticed
            if not flagged and shapes[spike.usage_type] == "noise":
                missed_in_noise += 1
                continue
            assert [(a.date, a.kind) for a in flagged] == [(spike.day, "spike")]
            # And the impact is what it cost above the expected value
            assert flagged[0].impact == pytest.approx(flagged[0].actual - flagged[0].expected)
            assert flagged[0].impact > THRESHOLDS.absolute_usd
    assert missed_in_noise <= len(SEEDS) // 4


def test_new_usage_type_and_level_shift_are_reported_once_on_their_first_day() -> None:
    # Given a history where ml.p3.2xlarge appears and an endpoint's cost doubles
    labelled, history = _history(seed=5)
    labels: dict[tuple[str, str], dt.date] = {
        (label.usage_type, label.shape): label.day for label in labelled.labels()
    }
    found = detect_anomalies(history, THRESHOLDS)

    # Then each is flagged on its first day only: the baseline adapts to the new level
    for usage_type, shape in [
        ("USE1-Train:ml.p3.2xlarge", "new_usage_type"),
        ("USE1-Host:ml.m5.xlarge", "level_shift"),
        ("USE1-Train:ml.m5.4xlarge", "level_shift"),
    ]:
        flagged = [(a.date, a.kind) for a in found if a.usage_type == usage_type]
        assert flagged == [(labels[(usage_type, shape)], shape)]


def test_quiet_shapes_raise_nothing(
    detected: list[tuple[billing.BillingHistory, list[Anomaly]]],
) -> None:
    # Given steady, weekly, trending and noisy usage types without anomalies
    quiet = {
        "USE1-Host:ml.c5.xlarge",
        "USE1-Train:ml.m5.large",
        "USE1-Train:ml.c5.xlarge",
        "USE1-Train:ml.m5.xlarge",
        "USE1-Processing:ml.m5.xlarge",
        "USE1-Train:ml.m5.12xlarge",
        "USE1-Train:VolumeUsage.gp2",
    }
    for labelled, found in detected:
        assert not quiet & {label.usage_type for label in labelled.labels()}
        # Then none of them is flagged
        assert [a for a in found if a.usage_type in quiet] == [], labelled.start


def test_both_thresholds_must_be_exceeded() -> None:
    # Given a storage usage type that triples from $1 to $3 a day, and a $100 one up 20%
    days = 60
    start = dt.date(2026, 3, 1)
    storage = [1.0] * 40 + [3.0] * 20
    training = [100.0] * 40 + [120.0] * 20
    history = UsageHistory(
        start=start,
        end=start + dt.timedelta(days=days),
        usage=tuple(
            row
            for i in range(days)
            for row in _rows(start + dt.timedelta(days=i), storage[i], training[i])
        ),
    )
    # When the detector runs, Then neither is flagged: +$2 is below $5, +20% below 50%
    assert detect_anomalies(history, THRESHOLDS) == []
    # But with a $1 absolute threshold the storage jump is a level shift
    found = detect_anomalies(history, Thresholds(relative=0.5, absolute_usd=1.0))
    assert [(a.usage_type, a.date, a.kind) for a in found] == [
        ("USE1-Train:VolumeUsage.gp2", start + dt.timedelta(days=40), "level_shift")
    ]


def _rows(day: dt.date, storage: float, training: float) -> tuple[DailyUsage, DailyUsage]:
    return (
        DailyUsage(usage_type="USE1-Train:VolumeUsage.gp2", day=day, cost_usd=storage),
        DailyUsage(usage_type="USE1-Train:ml.m5.4xlarge", day=day, cost_usd=training),
    )


def test_the_last_day_is_a_jump_until_tomorrow_tells() -> None:
    # Given a steady series whose last day doubles
    start = dt.date(2026, 3, 1)
    costs = [20.0] * 29 + [60.0]
    history = UsageHistory(
        start=start,
        end=start + dt.timedelta(days=30),
        usage=tuple(
            DailyUsage(
                usage_type="USE1-Train:ml.c5.xlarge", day=start + dt.timedelta(days=i), cost_usd=c
            )
            for i, c in enumerate(costs)
        ),
    )
    # When the detector runs, Then the day is flagged as a jump (spike or shift: unknown)
    [anomaly] = detect_anomalies(history, THRESHOLDS)
    assert (anomaly.date, anomaly.kind, anomaly.expected, anomaly.impact) == (
        start + dt.timedelta(days=29),
        "jump",
        20.0,
        40.0,
    )


def _series(usage_type: str, start: dt.date, costs: list[float]) -> UsageHistory:
    return UsageHistory(
        start=start,
        end=start + dt.timedelta(days=len(costs)),
        usage=tuple(
            DailyUsage(usage_type=usage_type, day=start + dt.timedelta(days=i), cost_usd=cost)
            for i, cost in enumerate(costs)
        ),
    )


# About $100 a day (a little wobble), two days at 2.5x and 2.8x, then $100 again; later a
# one-day spike to $200 that is judged against the restored $100 baseline.
EXCURSION_START = dt.date(2026, 3, 1)
EXCURSION = (
    [100.0 + (i % 5 - 2) for i in range(40)]
    + [250.0, 280.0]
    + [100.0 + (i % 5 - 2) for i in range(15)]
    + [200.0]
    + [100.0 + (i % 5 - 2) for i in range(5)]
)


def test_a_shift_that_comes_back_is_an_excursion_reported_every_day() -> None:
    # Given a usage type at ~$100 a day with a two-day excursion to 2-3x
    history = _series("USE1-Host:ml.m5.xlarge", EXCURSION_START, EXCURSION)
    # When the detector runs
    found = detect_anomalies(history, THRESHOLDS)
    # Then both days of the excursion are reported, each with its own excess over ~$100
    day = EXCURSION_START + dt.timedelta(days=40)
    assert [(a.date, a.kind) for a in found[:2]] == [
        (day, "excursion"),
        (day + dt.timedelta(days=1), "excursion"),
    ]
    for anomaly, actual in zip(found[:2], (250.0, 280.0), strict=True):
        assert anomaly.actual == actual
        assert anomaly.expected == pytest.approx(100.0, abs=2.0)
        assert anomaly.impact == pytest.approx(actual - anomaly.expected)
    # And the baseline went back: the return is no drop, and the later one-day spike is
    # measured against ~$100, not against the excursion
    assert [(a.date, a.kind) for a in found[2:]] == [
        (EXCURSION_START + dt.timedelta(days=57), "spike")
    ]
    assert found[2].expected == pytest.approx(100.0, abs=2.0)


def test_a_shift_that_stays_is_still_reported_once() -> None:
    # Given the same usage type, whose two high days turn out a new level
    costs = EXCURSION[:40] + [250.0 + (i % 5 - 2) for i in range(20)]
    found = detect_anomalies(_series("USE1-Host:ml.m5.xlarge", EXCURSION_START, costs), THRESHOLDS)
    # Then it is one level shift, on its first day
    assert [(a.date, a.kind) for a in found] == [
        (EXCURSION_START + dt.timedelta(days=40), "level_shift")
    ]


def test_an_excursion_on_the_last_days_is_a_level_shift_until_it_comes_back() -> None:
    # Given the excursion's two high days as the last of the history
    history = _series("USE1-Host:ml.m5.xlarge", EXCURSION_START, EXCURSION[:42])
    # Then, with no day back yet, it reads as a level shift on its first day
    found = detect_anomalies(history, THRESHOLDS)
    assert [(a.date, a.kind) for a in found] == [
        (EXCURSION_START + dt.timedelta(days=40), "level_shift")
    ]
    # And the next day back at $100 turns both into excursions
    found = detect_anomalies(
        _series("USE1-Host:ml.m5.xlarge", EXCURSION_START, EXCURSION[:43]), THRESHOLDS
    )
    assert [a.kind for a in found] == ["excursion", "excursion"]
