"""Each recommendation fires on a job built to deserve it and stays silent on one that
does not; savings come from the bundled price table."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from fleetcast_cost.models import TrainingJob, Utilisation
from fleetcast_cost.prices import bundled_prices
from fleetcast_cost.recommendations import recommend

PRICES = bundled_prices()
REPORT_DAY = dt.date(2026, 11, 30)
# Jobs seen over the 10 days before the report: monthly = saving / 10 x 30.
CREATED = dt.datetime(2026, 11, 20, 2, 0, tzinfo=dt.UTC)
OBSERVED_DAYS = 10


def price(instance_type: str) -> float:
    entry = PRICES.get(instance_type)
    assert entry is not None, instance_type
    return entry.usd_per_hour


def job(**changes: Any) -> TrainingJob:
    """A well-run job that deserves nothing: spot, FastFile, busy but not saturated,
    no warm pool. Two instances billed one hour each."""
    base = TrainingJob(
        name="fleetcast-t-q0000000905-20261120t020000",
        created=CREATED,
        instance_type="ml.m5.xlarge",
        instance_count=2,
        spot=True,
        training_seconds=7200,
        billable_seconds=3600,
        phase_seconds={"Starting": 120, "Downloading": 60, "Training": 3400, "Uploading": 140},
        input_mode="FastFile",
        utilisation=Utilisation(cpu_mean=55, cpu_p90=70, memory_mean=40, memory_max=60),
    )
    return base.model_copy(update=changes)


def monthly(saving_over_observed_days: float) -> float:
    return round(saving_over_observed_days / OBSERVED_DAYS * 30, 2)


def recommendations(*jobs: TrainingJob) -> dict[str, Any]:
    return {r.kind: r for r in recommend(list(jobs), REPORT_DAY, 90, PRICES).ranked}


def test_a_well_run_job_gets_no_recommendation() -> None:
    assert recommendations(job()) == {}


CASES = {
    "use_spot": (
        job(spot=False),
        # 2 instances x 1 h x on-demand price, 70% of it
        2 * 1 * price("ml.m5.xlarge") * PRICES.spot_discount_assumed,
        None,
        [job(spot=True)],
    ),
    "fastfile_input_mode": (
        job(input_mode="File", phase_seconds={"Downloading": 900, "Training": 2700}),
        # Downloading was 900 of 3600 billable seconds: a quarter of the job's cost
        0.25 * 2 * 1 * price("ml.m5.xlarge"),
        None,
        [
            job(input_mode="File", phase_seconds={"Downloading": 600, "Training": 3000}),
            job(input_mode="FastFile", phase_seconds={"Downloading": 900, "Training": 2700}),
        ],
    ),
    "right_size_instance": (
        job(
            instance_type="ml.m5.2xlarge",
            utilisation=Utilisation(cpu_mean=12, cpu_p90=20, memory_max=30),
        ),
        2 * 1 * (price("ml.m5.2xlarge") - price("ml.m5.xlarge")),
        "ml.m5.xlarge",
        [
            # Busy now and then: the 90th percentile is above 30%
            job(
                instance_type="ml.m5.2xlarge",
                utilisation=Utilisation(cpu_mean=12, cpu_p90=45, memory_max=30),
            ),
            # Half the memory would not fit
            job(
                instance_type="ml.m5.2xlarge",
                utilisation=Utilisation(cpu_mean=12, cpu_p90=20, memory_max=70),
            ),
            # Nothing smaller in the family
            job(instance_type="ml.m5.large", utilisation=Utilisation(cpu_mean=5, cpu_p90=9)),
        ],
    ),
    "heterogeneous_cluster": (
        job(
            instance_type="ml.g5.2xlarge",
            utilisation=Utilisation(cpu_mean=90, cpu_p90=97, gpu_mean=20, memory_max=50),
        ),
        # GPUs at 80% instead of 20% need a quarter of the hours, plus the CPU helper
        # (the cheapest instance with the g5.2xlarge's 8 vCPUs) for those hours
        2 * 1 * price("ml.g5.2xlarge")
        - 2 * 1 * (20 / 80) * (price("ml.g5.2xlarge") + price("ml.c5.2xlarge")),
        "ml.c5.2xlarge",
        [
            job(
                instance_type="ml.g5.2xlarge",
                utilisation=Utilisation(cpu_mean=90, cpu_p90=97, gpu_mean=55),
            ),
            # High CPU on a CPU instance is just a busy job
            job(instance_type="ml.c5.2xlarge", utilisation=Utilisation(cpu_mean=95, cpu_p90=99)),
        ],
    ),
    "warm_pool_keepalive": (
        job(keep_alive_seconds=1800, warm_pool_status="Terminated", warm_pool_billed_seconds=1800),
        # Half an hour kept alive on 2 instances, never reused
        0.5 * 2 * price("ml.m5.xlarge"),
        None,
        [
            job(
                keep_alive_seconds=1800,
                warm_pool_status="Reused",
                warm_pool_billed_seconds=600,
                warm_pool_reused_by="fleetcast-t-q0000000922-20261120t030000",
            ),
            job(keep_alive_seconds=0),
        ],
    ),
    "cheaper_gpu_family": (
        job(
            instance_type="ml.p3.2xlarge",
            utilisation=Utilisation(cpu_mean=55, cpu_p90=70, gpu_mean=60, memory_max=40),
        ),
        # A10G: more memory and fp32 than a V100; 40% of 61 GiB fits in 32 GiB
        2 * 1 * (price("ml.p3.2xlarge") - price("ml.g5.2xlarge")),
        "ml.g5.2xlarge",
        [
            job(instance_type="ml.g5.2xlarge"),
            job(instance_type="ml.p4d.24xlarge"),
            # Eight K80s: no current instance with eight GPUs is cheaper
            job(instance_type="ml.p2.8xlarge"),
        ],
    ),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_recommendation_fires_on_a_job_that_deserves_it(kind: str) -> None:
    deserving, saving, target, _ = CASES[kind]
    # When the job is analysed
    found = recommendations(deserving)
    # Then exactly this recommendation fires
    assert list(found) == [kind]
    recommendation = found[kind]
    # And its monthly saving is the price-table arithmetic over the observed days
    assert recommendation.monthly_saving_usd == pytest.approx(monthly(saving), abs=0.01)
    assert recommendation.monthly_saving_usd > 0
    # And the evidence shows that arithmetic
    per_day = saving / OBSERVED_DAYS
    assert f"${per_day:,.2f}/day x 30 = ${monthly(saving):,.2f}/month" in recommendation.evidence
    assert recommendation.job_names == (deserving.name,)
    if target:
        assert target in recommendation.action


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_recommendation_stays_silent_on_a_job_that_does_not(kind: str) -> None:
    _, _, _, near_misses = CASES[kind]
    for near_miss in near_misses:
        assert kind not in recommendations(near_miss), near_miss


def test_same_change_on_the_same_instance_type_is_one_recommendation_ranked_by_saving() -> None:
    # Given three on-demand jobs, one of them on a p3 that a g5 would replace
    jobs = [
        job(name="a", spot=False),
        job(name="b", spot=False),
        job(name="c", spot=False, instance_type="ml.p3.2xlarge"),
    ]
    result = recommend(jobs, REPORT_DAY, 90, PRICES)
    # Then spot is recommended once per instance type, and the ranking follows the saving
    assert [(r.kind, r.instance_type, r.job_names) for r in result.ranked] == [
        ("use_spot", "ml.p3.2xlarge", ("c",)),
        ("cheaper_gpu_family", "ml.p3.2xlarge", ("c",)),
        ("use_spot", "ml.m5.xlarge", ("a", "b")),
    ]
    savings = [r.monthly_saving_usd for r in result.ranked]
    assert savings == sorted(savings, reverse=True)
    # And the headline counts each job's best saving once: spot on c, not spot + g5
    best = 2 * 2 * price("ml.m5.xlarge") * 0.7 + 2 * price("ml.p3.2xlarge") * 0.7
    assert result.monthly_saving_usd == pytest.approx(monthly(best), abs=0.01)
    assert result.observed_days == OBSERVED_DAYS


def test_price_table_is_dated_and_sourced() -> None:
    assert dt.date.fromisoformat(PRICES.as_of)
    assert "pricing" in PRICES.source
    assert PRICES.region == "us-east-1"
    assert 0.5 <= PRICES.spot_discount_assumed < 0.9
    # Every GPU instance says enough to compare families
    for name, entry in PRICES.instances.items():
        if entry.gpus:
            assert entry.gpu_memory_gib > 0 and entry.gpu_fp32_tflops > 0, name
