"""Synthetic SageMaker billing history in Cost Explorer's exact ``GetCostAndUsage`` shape.

Cost Explorer cannot be emulated from first principles, so the local stack and the tests
load moto with a history built here: one series per usage type, each drawn from a named
shape (steady, weekly pattern, trend, a new usage type, a one-day spike, a level shift, a
slow creep, noise), with the days that a cost watcher should flag labelled.

The pages answer the request the cost-report adapter makes: ``Granularity=DAILY``, filter
``SERVICE = Amazon SageMaker``, grouped by ``USAGE_TYPE``, metrics ``UnblendedCost`` and
``UsageQuantity``. Days without usage have no group, as in the real response.

Everything is deterministic for a given seed (``random.Random``, no global state).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

AnomalyShape = Literal["spike", "level_shift", "new_usage_type", "creep"]

# The defaults the report ships with: a flag needs +50% and +$5 over the expected day.
DEFAULT_RELATIVE_THRESHOLD = 0.5
DEFAULT_ABSOLUTE_THRESHOLD_USD = 5.0
# Cost Explorer marks the most recent days as estimated until billing closes them.
ESTIMATED_TRAILING_DAYS = 2
DEFAULT_ACCOUNT_ID = "123456789012"  # moto's default account


@dataclass(frozen=True)
class LabelledAnomaly:
    """A day a cost watcher should flag, and why."""

    usage_type: str
    day: date
    shape: AnomalyShape


@dataclass(frozen=True)
class UsageSeries:
    """One usage type's daily cost; ``quantity`` is derived from a constant unit price."""

    usage_type: str
    shape: str
    unit: str
    unit_price_usd: float
    costs: tuple[float, ...]
    anomaly_days: tuple[tuple[int, AnomalyShape], ...] = ()

    def quantity(self, day_index: int) -> float:
        return self.costs[day_index] / self.unit_price_usd


@dataclass(frozen=True)
class BillingHistory:
    """Daily SageMaker costs from ``start`` for ``days`` days (``end`` exclusive)."""

    start: date
    days: int
    series: tuple[UsageSeries, ...] = field(default_factory=tuple)

    @property
    def end(self) -> date:
        return self.start + timedelta(days=self.days)

    def labels(self) -> list[LabelledAnomaly]:
        return sorted(
            (
                LabelledAnomaly(s.usage_type, self.start + timedelta(days=i), shape)
                for s in self.series
                for i, shape in s.anomaly_days
            ),
            key=lambda label: (label.day, label.usage_type),
        )

    def daily_costs(self) -> dict[str, list[float]]:
        return {s.usage_type: list(s.costs) for s in self.series}

    def pages(self, days_per_page: int = 30) -> list[dict[str, Any]]:
        """The ``GetCostAndUsage`` responses, one per page, linked by ``NextPageToken``."""
        results = [self._result_for_day(i) for i in range(self.days)]
        chunks = [results[i : i + days_per_page] for i in range(0, len(results), days_per_page)]
        pages: list[dict[str, Any]] = []
        for number, chunk in enumerate(chunks, start=1):
            page: dict[str, Any] = {
                "GroupDefinitions": [{"Type": "DIMENSION", "Key": "USAGE_TYPE"}],
                "ResultsByTime": chunk,
                "DimensionValueAttributes": [],
            }
            if number < len(chunks):
                page["NextPageToken"] = f"fleetcast-billing-page-{number + 1}"
            pages.append(page)
        return pages

    def moto_injection(self, account_id: str = DEFAULT_ACCOUNT_ID) -> dict[str, Any]:
        """The body for moto's ``POST /moto-api/static/ce/cost-and-usage-results``.

        moto hands queued results out one per *distinct* request body, so the pages must
        be queued in the order the adapter asks for them, before anything else asks.
        """
        return {"account_id": account_id, "results": self.pages()}

    def _result_for_day(self, index: int) -> dict[str, Any]:
        day = self.start + timedelta(days=index)
        groups = [
            {
                "Keys": [s.usage_type],
                "Metrics": {
                    "UnblendedCost": {"Amount": _amount(s.costs[index]), "Unit": "USD"},
                    "UsageQuantity": {"Amount": _amount(s.quantity(index)), "Unit": s.unit},
                },
            }
            for s in self.series
            if s.costs[index] > 0
        ]
        return {
            "TimePeriod": {"Start": day.isoformat(), "End": (day + timedelta(days=1)).isoformat()},
            "Total": {},
            "Groups": groups,
            "Estimated": index >= self.days - ESTIMATED_TRAILING_DAYS,
        }


def _amount(value: float) -> str:
    return f"{value:.10f}"


class _Shapes:
    """Builds one series per shape over a fixed window, with its labels."""

    def __init__(
        self,
        start: date,
        days: int,
        rng: random.Random,
        relative_threshold: float,
        absolute_threshold_usd: float,
    ) -> None:
        self.start = start
        self.days = days
        self.rng = rng
        self.relative = relative_threshold
        self.absolute = absolute_threshold_usd

    def _noisy(self, level: Sequence[float], sigma: float) -> tuple[float, ...]:
        return tuple(
            round(v * math.exp(self.rng.gauss(0.0, sigma)), 4) if v > 0 else 0.0 for v in level
        )

    def _weekday(self, index: int) -> int:
        return (self.start + timedelta(days=index)).weekday()

    def steady(self, usage_type: str, unit: str, price: float, base: float, sigma: float = 0.05):
        return UsageSeries(
            usage_type, "steady", unit, price, self._noisy([base] * self.days, sigma)
        )

    def weekly(
        self,
        usage_type: str,
        unit: str,
        price: float,
        weekday_base: float,
        weekend_base: float,
        sigma: float = 0.05,
        spike_at: int | None = None,
        spike_factor: float = 3.0,
    ) -> UsageSeries:
        level = [weekend_base if self._weekday(i) >= 5 else weekday_base for i in range(self.days)]
        labels: tuple[tuple[int, AnomalyShape], ...] = ()
        if spike_at is not None:
            level[spike_at] *= spike_factor
            labels = ((spike_at, "spike"),)
        return UsageSeries(usage_type, "weekly", unit, price, self._noisy(level, sigma), labels)

    def trend(
        self,
        usage_type: str,
        unit: str,
        price: float,
        base: float,
        total_change: float,
        sigma: float = 0.05,
    ) -> UsageSeries:
        """A gradual change of ``total_change`` (e.g. 0.3 = +30%) over the window: within
        the thresholds, so nothing to flag."""
        level = [base * (1 + total_change * i / (self.days - 1)) for i in range(self.days)]
        return UsageSeries(usage_type, "trend", unit, price, self._noisy(level, sigma))

    def new_usage_type(
        self, usage_type: str, unit: str, price: float, first_day: int, base: float
    ) -> UsageSeries:
        level = [0.0 if i < first_day else base for i in range(self.days)]
        return UsageSeries(
            usage_type,
            "new_usage_type",
            unit,
            price,
            self._noisy(level, 0.05),
            ((first_day, "new_usage_type"),),
        )

    def spike(
        self,
        usage_type: str,
        unit: str,
        price: float,
        base: float,
        day: int,
        factor: float,
        sigma: float = 0.05,
    ) -> UsageSeries:
        level = [base] * self.days
        level[day] = base * factor
        return UsageSeries(
            usage_type, "spike", unit, price, self._noisy(level, sigma), ((day, "spike"),)
        )

    def level_shift(
        self, usage_type: str, unit: str, price: float, base: float, day: int, factor: float
    ) -> UsageSeries:
        level = [base if i < day else base * factor for i in range(self.days)]
        return UsageSeries(
            usage_type,
            "level_shift",
            unit,
            price,
            self._noisy(level, 0.05),
            ((day, "level_shift"),),
        )

    def creep(
        self,
        usage_type: str,
        unit: str,
        price: float,
        base: float,
        start_day: int,
        daily_increase: float,
    ) -> UsageSeries:
        """Cost rising by ``daily_increase`` dollars a day from ``start_day``.

        Labelled on each day the week-long level (the median of the last seven noiseless
        days) has drifted past both thresholds from where it last stood, the definition
        of "cumulative drift" the report uses.
        """
        level = [base + max(0, i - start_day) * daily_increase for i in range(self.days)]
        labels: list[tuple[int, AnomalyShape]] = []
        anchor = base
        for i in range(start_day, self.days):
            week_level = statistics.median(level[max(0, i - 6) : i + 1])
            if week_level > anchor * (1 + self.relative) and week_level - anchor > self.absolute:
                labels.append((i, "creep"))
                anchor = week_level
        return UsageSeries(
            usage_type, "creep", unit, price, self._noisy(level, 0.03), tuple(labels)
        )

    def noise(
        self,
        usage_type: str,
        unit: str,
        price: float,
        base: float,
        sigma: float = 0.3,
        spike_at: int | None = None,
        spike_factor: float = 6.0,
    ) -> UsageSeries:
        """A usage type whose cost wobbles a lot from day to day (``sigma`` on a log
        scale): only a spike far outside that wobble is an anomaly."""
        level = [base] * self.days
        labels: tuple[tuple[int, AnomalyShape], ...] = ()
        if spike_at is not None:
            level[spike_at] *= spike_factor
            labels = ((spike_at, "spike"),)
        return UsageSeries(usage_type, "noise", unit, price, self._noisy(level, sigma), labels)


def labelled_history(
    start: date,
    days: int = 90,
    seed: int = 0,
    relative_threshold: float = DEFAULT_RELATIVE_THRESHOLD,
    absolute_threshold_usd: float = DEFAULT_ABSOLUTE_THRESHOLD_USD,
) -> BillingHistory:
    """Every shape, several times, for measuring a detector's precision and recall.

    Anomalies sit in the last two thirds of the window so a detector has history to
    learn from; days are relative to ``start``, so any 90-day window works.
    """
    if days < 60:
        raise ValueError("a labelled history needs at least 60 days")
    rng = random.Random(seed)
    s = _Shapes(start, days, rng, relative_threshold, absolute_threshold_usd)

    def at(fraction: float) -> int:
        # Jitter keeps the anomalies off fixed weekdays across seeds.
        return min(days - 1, int(days * fraction) + rng.randint(-3, 3))

    # In this order: each series draws its days and its noise from the one generator.
    return BillingHistory(
        start,
        days,
        (*_regular_series(s, at), *_one_off_series(s, at), *_drifting_series(s, at)),
    )


def _price(instance: str) -> float:
    return _TRAINING_PRICES[instance]


def _regular_series(s: _Shapes, at: Callable[[float], int]) -> tuple[UsageSeries, ...]:
    """Steady, weekly and trending usage types: nothing to flag but one weekend spike."""
    return (
        s.steady("USE1-Host:ml.c5.xlarge", "Hrs", 0.238, base=0.238 * 24, sigma=0.01),
        s.steady("USE1-Train:ml.m5.large", "Hrs", _price("ml.m5.large"), base=14.0),
        s.weekly(
            "USE1-Train:ml.c5.xlarge",
            "Hrs",
            _price("ml.c5.xlarge"),
            weekday_base=42.0,
            weekend_base=9.0,
        ),
        s.weekly(
            "USE1-Train:ml.c5.2xlarge",
            "Hrs",
            _price("ml.c5.2xlarge"),
            weekday_base=30.0,
            weekend_base=6.0,
            spike_at=_weekend_day(s.start, at(0.7)),
            spike_factor=3.0,
        ),
        s.trend(
            "USE1-Train:ml.m5.xlarge",
            "Hrs",
            _price("ml.m5.xlarge"),
            base=25.0,
            total_change=0.3,
        ),
        s.trend("USE1-Processing:ml.m5.xlarge", "Hrs", 0.23, base=18.0, total_change=-0.3),
    )


def _one_off_series(s: _Shapes, at: Callable[[float], int]) -> tuple[UsageSeries, ...]:
    """A new usage type, a spike, a level shift: each flagged on one day."""
    return (
        s.new_usage_type(
            "USE1-Train:ml.p3.2xlarge", "Hrs", _price("ml.p3.2xlarge"), at(0.75), base=92.0
        ),
        s.new_usage_type(
            "USE1-Train:ml.g5.xlarge", "Hrs", _price("ml.g5.xlarge"), at(0.5), base=34.0
        ),
        s.spike(
            "USE1-Train:ml.m5.2xlarge",
            "Hrs",
            _price("ml.m5.2xlarge"),
            base=22.0,
            day=at(0.55),
            factor=3.5,
        ),
        s.spike(
            "USE1-Train:ml.c5.4xlarge",
            "Hrs",
            _price("ml.c5.4xlarge"),
            base=40.0,
            day=at(0.85),
            factor=2.2,
        ),
        s.level_shift(
            "USE1-Host:ml.m5.xlarge", "Hrs", 0.23, base=0.23 * 24 * 2, day=at(0.6), factor=2.0
        ),
        s.level_shift(
            "USE1-Train:ml.m5.4xlarge",
            "Hrs",
            _price("ml.m5.4xlarge"),
            base=30.0,
            day=at(0.4),
            factor=1.9,
        ),
    )


def _drifting_series(s: _Shapes, at: Callable[[float], int]) -> tuple[UsageSeries, ...]:
    """A slow creep, and noisy usage types of which one spikes far outside its noise."""
    return (
        s.creep(
            "USE1-Train:ml.c5.9xlarge",
            "Hrs",
            _price("ml.c5.9xlarge"),
            base=20.0,
            start_day=at(0.45),
            daily_increase=0.5,
        ),
        s.noise("USE1-Train:ml.m5.12xlarge", "Hrs", _price("ml.m5.12xlarge"), base=35.0),
        s.noise(
            "USE1-Processing:ml.c5.2xlarge",
            "Hrs",
            0.408,
            base=12.0,
            sigma=0.25,
            spike_at=at(0.65),
            spike_factor=6.0,
        ),
        s.noise("USE1-Train:VolumeUsage.gp2", "GB-Mo", 0.14 / 30, base=2.5, sigma=0.3),
    )


def demo_history(end: date, days: int = 90, seed: int = 7) -> BillingHistory:
    """A plausible fleetcast account for the local stack: an endpoint, nightly training
    on ml.c5.xlarge with a weekly rhythm, processing, storage, and three anomalies near
    the end of the window (a spike, a new ml.p3.2xlarge, an endpoint scaled from one
    instance to three) so a
    freshly started stack has something to report."""
    start = end - timedelta(days=days)
    rng = random.Random(seed)
    s = _Shapes(start, days, rng, DEFAULT_RELATIVE_THRESHOLD, DEFAULT_ABSOLUTE_THRESHOLD_USD)
    return BillingHistory(
        start,
        days,
        (
            s.level_shift(
                "USE1-Host:ml.c5.xlarge", "Hrs", 0.238, base=0.238 * 24, day=days - 2, factor=3.0
            ),
            s.weekly(
                "USE1-Train:ml.c5.xlarge",
                "Hrs",
                _TRAINING_PRICES["ml.c5.xlarge"],
                weekday_base=24.0,
                weekend_base=6.0,
                spike_at=days - 4,
                spike_factor=3.0,
            ),
            s.new_usage_type(
                "USE1-Train:ml.p3.2xlarge",
                "Hrs",
                _TRAINING_PRICES["ml.p3.2xlarge"],
                first_day=days - 3,
                base=3.825 * 8,
            ),
            s.steady("USE1-Processing:ml.m5.xlarge", "Hrs", 0.23, base=4.6),
            s.steady("USE1-Train:VolumeUsage.gp2", "GB-Mo", 0.14 / 30, base=0.9),
        ),
    )


def _weekend_day(start: date, index: int) -> int:
    """The nearest Saturday at or after ``index``: a spike that a weekday-blind baseline
    would miss (or, worse, flag every weekend)."""
    while (start + timedelta(days=index)).weekday() != 5:
        index += 1
    return index


# Training on-demand $/hour used to turn synthetic costs into instance hours; they match
# fleetcast_cost/prices.json for the types that appear here.
_TRAINING_PRICES = {
    "ml.m5.large": 0.115,
    "ml.m5.xlarge": 0.23,
    "ml.m5.2xlarge": 0.461,
    "ml.m5.4xlarge": 0.922,
    "ml.m5.12xlarge": 2.765,
    "ml.c5.xlarge": 0.204,
    "ml.c5.2xlarge": 0.408,
    "ml.c5.4xlarge": 0.816,
    "ml.c5.9xlarge": 1.836,
    "ml.g5.xlarge": 1.408,
    "ml.p3.2xlarge": 3.825,
}
