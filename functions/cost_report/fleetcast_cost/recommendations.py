"""What to change in the training jobs, and what each change would save a month.

Each rule looks at one job (pure functions of :class:`TrainingJob` and the price table);
jobs that deserve the same change on the same instance type become one recommendation.
Monthly saving = the jobs' saving over the days observed / those days x 30, with the
arithmetic spelled out in the evidence. Billing follows SageMaker: instance count x
``BillableTimeInSeconds`` (wall clock from Downloading on) x the on-demand hourly price,
plus the warm pool's ``ResourceRetainedBillableTimeInSeconds``.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fleetcast_cost.models import Recommendation, RecommendationKind, TrainingJob
from fleetcast_cost.prices import PriceTable, family

DAYS_PER_MONTH = 30
FASTFILE_MIN_DOWNLOAD_SHARE = 0.20
RIGHT_SIZE_MAX_CPU_PERCENT = 30.0
# The next size down has half the memory: only suggest it when half would still do.
RIGHT_SIZE_MAX_MEMORY_PERCENT = 45.0
HETEROGENEOUS_MIN_CPU_PERCENT = 80.0
HETEROGENEOUS_MAX_GPU_PERCENT = 30.0
# GPU utilisation we assume once a CPU instance group feeds the GPUs.
HETEROGENEOUS_TARGET_GPU_PERCENT = 80.0
OLD_GPU_FAMILIES = frozenset({"p2", "p3", "p3dn"})

_ACTIONS: dict[RecommendationKind, str] = {
    "use_spot": (
        "Enable managed spot training (EnableManagedSpotTraining, MaxWaitTimeInSeconds) "
        "and keep writing checkpoints so an interrupted job resumes."
    ),
    "fastfile_input_mode": (
        "Set TrainingInputMode (or the channel's InputMode) to FastFile so training "
        "starts while data streams from S3."
    ),
    "right_size_instance": "Train on the next size down.",
    "heterogeneous_cluster": (
        "Move data loading and preprocessing to a CPU instance group (heterogeneous "
        "cluster) so the GPUs are kept busy."
    ),
    "warm_pool_keepalive": (
        "Lower KeepAlivePeriodInSeconds (or drop the warm pool) unless the next job "
        "really starts within the keep-alive period."
    ),
    "cheaper_gpu_family": "Move to a current GPU family (ml.g5 or ml.g4dn) that fits the job.",
}


@dataclass(frozen=True)
class JobSaving:
    """One job deserving one change: what it would have saved over the observed days."""

    kind: RecommendationKind
    job: TrainingJob
    saving_usd: float
    # The instance type suggested instead, where the change is a move.
    target: str | None = None


def job_cost_usd(job: TrainingJob, prices: PriceTable) -> float:
    price = prices.get(job.instance_type)
    if price is None:
        return 0.0
    return _instance_hours(job) * price.usd_per_hour


def _instance_hours(job: TrainingJob) -> float:
    seconds = job.billable_seconds or job.training_seconds
    return seconds * job.instance_count / 3600


def use_spot(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    if job.spot:
        return None
    cost = job_cost_usd(job, prices)
    if cost <= 0:
        return None
    return JobSaving("use_spot", job, cost * prices.spot_discount_assumed)


def fastfile_input_mode(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    if job.input_mode != "File" or job.billable_seconds <= 0:
        return None
    share = _download_share(job)
    if share < FASTFILE_MIN_DOWNLOAD_SHARE:
        return None
    return JobSaving("fastfile_input_mode", job, job_cost_usd(job, prices) * share)


def _download_share(job: TrainingJob) -> float:
    if job.billable_seconds <= 0:
        return 0.0
    return min(1.0, job.phase_seconds.get("Downloading", 0.0) / job.billable_seconds)


def right_size_instance(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    use = job.utilisation
    if use is None or use.cpu_mean is None or use.cpu_p90 is None:
        return None
    if use.cpu_mean >= RIGHT_SIZE_MAX_CPU_PERCENT or use.cpu_p90 >= RIGHT_SIZE_MAX_CPU_PERCENT:
        return None
    if use.memory_max is not None and use.memory_max >= RIGHT_SIZE_MAX_MEMORY_PERCENT:
        return None
    smaller = prices.next_size_down(job.instance_type)
    current, target = prices.get(job.instance_type), prices.get(smaller or "")
    if smaller is None or current is None or target is None:
        return None
    saving = _instance_hours(job) * (current.usd_per_hour - target.usd_per_hour)
    return JobSaving("right_size_instance", job, saving, smaller) if saving > 0 else None


def heterogeneous_cluster(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    use, current = job.utilisation, prices.get(job.instance_type)
    if use is None or current is None or current.gpus == 0:
        return None
    if use.cpu_mean is None or use.gpu_mean is None:
        return None
    if (
        use.cpu_mean <= HETEROGENEOUS_MIN_CPU_PERCENT
        or use.gpu_mean >= HETEROGENEOUS_MAX_GPU_PERCENT
    ):
        return None
    helper = prices.cheapest_cpu_instance(current.vcpus)
    helper_price = prices.get(helper or "")
    if helper is None or helper_price is None:
        return None
    hours = _instance_hours(job)
    # Fed by the helper, the GPUs finish the same work in gpu_mean/target of the time.
    fraction = use.gpu_mean / HETEROGENEOUS_TARGET_GPU_PERCENT
    after = hours * fraction * (current.usd_per_hour + helper_price.usd_per_hour)
    saving = hours * current.usd_per_hour - after
    return JobSaving("heterogeneous_cluster", job, saving, helper) if saving > 0 else None


def warm_pool_keepalive(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    if job.keep_alive_seconds <= 0 or job.warm_pool_billed_seconds <= 0:
        return None
    if job.warm_pool_reused_by or job.warm_pool_status in {"InUse", "Reused"}:
        return None
    price = prices.get(job.instance_type)
    if price is None:
        return None
    hours = job.warm_pool_billed_seconds * job.instance_count / 3600
    return JobSaving("warm_pool_keepalive", job, hours * price.usd_per_hour)


def cheaper_gpu_family(job: TrainingJob, prices: PriceTable) -> JobSaving | None:
    current = prices.get(job.instance_type)
    if current is None or family(job.instance_type) not in OLD_GPU_FAMILIES:
        return None
    memory_max = job.utilisation.memory_max if job.utilisation else None
    # Without a memory measurement, ask for as much host memory as the job has now.
    needed = current.memory_gib * (memory_max / 100 if memory_max is not None else 1.0)
    target = prices.cheaper_gpu_instance(job.instance_type, needed)
    target_price = prices.get(target or "")
    if target is None or target_price is None:
        return None
    saving = _instance_hours(job) * (current.usd_per_hour - target_price.usd_per_hour)
    return JobSaving("cheaper_gpu_family", job, saving, target)


RULES: tuple[Callable[[TrainingJob, PriceTable], JobSaving | None], ...] = (
    use_spot,
    fastfile_input_mode,
    right_size_instance,
    heterogeneous_cluster,
    warm_pool_keepalive,
    cheaper_gpu_family,
)


@dataclass(frozen=True)
class Recommendations:
    ranked: list[Recommendation]
    # Each job's best saving only, summed: several changes to one job do not add up.
    monthly_saving_usd: float
    observed_days: int


def recommend(
    jobs: Sequence[TrainingJob], report_date: dt.date, lookback_days: int, prices: PriceTable
) -> Recommendations:
    """Every rule on every job, grouped by change and instance type, ranked by saving."""
    if not jobs:
        return Recommendations([], 0.0, 0)
    earliest = min(job.created.date() for job in jobs)
    days = max(1, min(lookback_days, (report_date - earliest).days))
    savings = [s for job in jobs for rule in RULES if (s := rule(job, prices)) and s.saving_usd > 0]
    groups: dict[tuple[str, str, str | None], list[JobSaving]] = defaultdict(list)
    for saving in savings:
        groups[(saving.kind, saving.job.instance_type, saving.target)].append(saving)
    ranked = sorted(
        (_recommendation(group, days, prices) for group in groups.values()),
        key=lambda r: (-r.monthly_saving_usd, r.kind, r.instance_type),
    )
    best: dict[str, float] = defaultdict(float)
    for saving in savings:
        best[saving.job.name] = max(best[saving.job.name], saving.saving_usd)
    return Recommendations(ranked, _monthly(sum(best.values()), days), days)


def _monthly(saving_usd: float, days: int) -> float:
    return round(saving_usd / days * DAYS_PER_MONTH, 2)


def _recommendation(group: list[JobSaving], days: int, prices: PriceTable) -> Recommendation:
    first = group[0]
    jobs = [s.job for s in group]
    saving = sum(s.saving_usd for s in group)
    monthly = _monthly(saving, days)
    arithmetic = f"${saving / days:,.2f}/day x {DAYS_PER_MONTH} = ${monthly:,.2f}/month"
    evidence = _EVIDENCE[first.kind](first, jobs, saving, days, prices) + " " + arithmetic + "."
    action = _ACTIONS[first.kind]
    if first.target:
        action = f"{action} Suggested: {first.target}."
    return Recommendation(
        kind=first.kind,
        evidence=evidence,
        monthly_saving_usd=monthly,
        instance_type=first.job.instance_type,
        action=action,
        job_names=tuple(sorted(job.name for job in jobs)),
    )


def _jobs_phrase(jobs: Sequence[TrainingJob], adjective: str = "") -> str:
    count = len(jobs)
    words = f"{adjective} " if adjective else ""
    instance = jobs[0].instance_type
    counts = sorted({job.instance_count for job in jobs})
    size = f"{counts[0]} x {instance}" if len(counts) == 1 else f"{instance} (x{counts})"
    return f"{count} {words}training job{'s' if count != 1 else ''} on {size}"


def _cost_phrase(jobs: Iterable[TrainingJob], days: int, prices: PriceTable) -> str:
    jobs = list(jobs)
    hours = sum(_instance_hours(job) for job in jobs)
    cost = sum(job_cost_usd(job, prices) for job in jobs)
    return f"billed {hours:,.1f} instance-hours (${cost:,.2f}) in {days} day{'s' * (days != 1)}"


def _mean(values: Iterable[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0


def _spot_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    discount = prices.spot_discount_assumed
    cost = sum(job_cost_usd(job, prices) for job in jobs)
    return (
        f"{_jobs_phrase(jobs, 'on-demand')} {_cost_phrase(jobs, days, prices)}. Managed spot "
        f"training is up to 90% cheaper than on demand; assuming {discount:.0%}: "
        f"${cost / days:,.2f}/day x {discount:.0%} = ${saving / days:,.2f}/day;"
    )


def _fastfile_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    share = _mean(_download_share(job) for job in jobs)
    return (
        f"{_jobs_phrase(jobs, 'File-mode')} {_cost_phrase(jobs, days, prices)} and spent "
        f"{share:.0%} of their billable time Downloading before training could start "
        f"(${saving:,.2f} of it);"
    )


def _right_size_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    current, target = prices.get(first.job.instance_type), prices.get(first.target or "")
    assert current is not None and target is not None
    cpu = _mean(job.utilisation.cpu_mean for job in jobs if job.utilisation)
    p90 = _mean(job.utilisation.cpu_p90 for job in jobs if job.utilisation)
    memory = [job.utilisation.memory_max for job in jobs if job.utilisation]
    memory_text = (
        f", memory at most {max(m for m in memory if m is not None):.0f}%"
        if any(m is not None for m in memory)
        else ""
    )
    hours = sum(_instance_hours(job) for job in jobs)
    return (
        f"{_jobs_phrase(jobs)} used {cpu:.0f}% of {current.vcpus} vCPUs on average "
        f"(90th percentile {p90:.0f}%{memory_text}); {first.target} has {target.vcpus} vCPUs "
        f"at ${target.usd_per_hour:.3f}/h instead of ${current.usd_per_hour:.3f}/h: "
        f"{hours:,.1f} instance-hours in {days} days x "
        f"${current.usd_per_hour - target.usd_per_hour:.3f}/h = ${saving:,.2f};"
    )


def _heterogeneous_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    cpu = _mean(job.utilisation.cpu_mean for job in jobs if job.utilisation)
    gpu = _mean(job.utilisation.gpu_mean for job in jobs if job.utilisation)
    helper = prices.get(first.target or "")
    assert helper is not None
    target = HETEROGENEOUS_TARGET_GPU_PERCENT
    return (
        f"{_jobs_phrase(jobs)} {_cost_phrase(jobs, days, prices)} with the CPUs {cpu:.0f}% "
        f"busy and the GPUs only {gpu:.0f}%: data loading starves the GPUs. Fed by an "
        f"{first.target} group (${helper.usd_per_hour:.3f}/h), GPUs at {target:.0f}% need "
        f"{gpu:.0f}/{target:.0f} = {gpu / target:.0%} of the hours, saving ${saving:,.2f} "
        f"net of the helper;"
    )


def _warm_pool_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    hours = sum(job.warm_pool_billed_seconds * job.instance_count for job in jobs) / 3600
    keep_alive = max(job.keep_alive_seconds for job in jobs)
    return (
        f"{_jobs_phrase(jobs)} kept a warm pool alive (KeepAlivePeriodInSeconds up to "
        f"{keep_alive}) that no job reused: {hours:,.1f} instance-hours billed for "
        f"nothing (${saving:,.2f}) in {days} days;"
    )


def _gpu_family_evidence(
    first: JobSaving, jobs: list[TrainingJob], saving: float, days: int, prices: PriceTable
) -> str:
    current, target = prices.get(first.job.instance_type), prices.get(first.target or "")
    assert current is not None and target is not None
    hours = sum(_instance_hours(job) for job in jobs)
    return (
        f"{_jobs_phrase(jobs)} ({current.gpus} x {current.gpu_model}, "
        f"{current.gpu_memory_gib:.0f} GiB, {current.gpu_fp32_tflops} fp32 TFLOPS per GPU); "
        f"{first.target} ({target.gpus} x {target.gpu_model}, {target.gpu_memory_gib:.0f} "
        f"GiB, {target.gpu_fp32_tflops} TFLOPS, {target.memory_gib:.0f} GiB host memory) "
        f"fits at ${target.usd_per_hour:.3f}/h instead of ${current.usd_per_hour:.3f}/h: "
        f"{hours:,.1f} instance-hours in {days} days x "
        f"${current.usd_per_hour - target.usd_per_hour:.3f}/h = ${saving:,.2f};"
    )


_EVIDENCE: dict[
    RecommendationKind,
    Callable[[JobSaving, list[TrainingJob], float, int, PriceTable], str],
] = {
    "use_spot": _spot_evidence,
    "fastfile_input_mode": _fastfile_evidence,
    "right_size_instance": _right_size_evidence,
    "heterogeneous_cluster": _heterogeneous_evidence,
    "warm_pool_keepalive": _warm_pool_evidence,
    "cheaper_gpu_family": _gpu_family_evidence,
}
