"""Where the numbers come from: Cost Explorer, Cost Anomaly Detection, SageMaker and
CloudWatch. The only module here that reads from AWS.

Each fetch either returns typed values or raises :class:`SourceFailure` carrying a
message that says what to do; the report carries on with the other sources. Throttling
is botocore's job (adaptive retry mode, 8 attempts), so reaching the error here means
the retries ran out. The ``parse_*`` functions are pure, so the CLI can feed them a file
of saved responses and the tests can feed them anything.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleetcast_contracts.errors import error_code
from fleetcast_cost.models import (
    AwsAnomaly,
    DailyUsage,
    Source,
    SourceProblem,
    TrainingJob,
    UsageHistory,
    Utilisation,
)
from fleetcast_cost.prices import PriceTable

SAGEMAKER_SERVICE = "Amazon SageMaker"
TRAINING_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"
# Describing thousands of jobs would outlast the function; the newest are the ones to fix.
MAX_JOBS_DESCRIBED = 500
_THROTTLED = frozenset(
    {"ThrottlingException", "LimitExceededException", "RequestLimitExceeded", "TooManyRequests"}
)


class SourceFailure(Exception):
    def __init__(self, problem: SourceProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def _failure(
    source: Source, what: str, error: Exception, advice: Mapping[str, str]
) -> SourceFailure:
    code = error_code(error)
    if code is not None and code in advice:
        message = advice[code]
    elif code in _THROTTLED:
        message = (
            f"{what} throttled the report even after 8 attempts with back-off ({code}); "
            "the next scheduled run will try again."
        )
    elif isinstance(error, BotoCoreError):
        message = f"Could not reach {what}: {error}."
    else:
        detail = getattr(error, "response", {}).get("Error", {}).get("Message") or str(error)
        message = f"{what} failed ({code}): {' '.join(detail.split())[:300]}"
    return SourceFailure(SourceProblem(source=source, message=message))


# --- Cost Explorer: daily SageMaker cost by usage type -------------------------------


def usage_request(start: dt.date, end: dt.date) -> dict[str, Any]:
    """The GetCostAndUsage parameters (``end`` exclusive, as Cost Explorer has it)."""
    return {
        "TimePeriod": {"Start": start.isoformat(), "End": end.isoformat()},
        "Granularity": "DAILY",
        "Filter": {"Dimensions": {"Key": "SERVICE", "Values": [SAGEMAKER_SERVICE]}},
        "GroupBy": [{"Type": "DIMENSION", "Key": "USAGE_TYPE"}],
        "Metrics": ["UnblendedCost", "UsageQuantity"],
    }


_COST_EXPLORER_ADVICE = {
    "AccessDeniedException": (
        "Cost Explorer is not enabled for this account (AccessDeniedException): enable it "
        "in the Billing and Cost Management console (data can take 24 hours to appear) "
        "and check the function's role allows ce:GetCostAndUsage."
    ),
    "DataUnavailableException": (
        "Cost Explorer has no data for this period yet (DataUnavailableException): after "
        "enabling Cost Explorer, data can take 24 hours to appear."
    ),
}


def fetch_usage(ce: Any, start: dt.date, end: dt.date) -> UsageHistory:
    """Every page of daily SageMaker cost by usage type over ``[start, end)``."""
    try:
        pages = list(_pages(ce.get_cost_and_usage, usage_request(start, end)))
    except (ClientError, BotoCoreError) as error:
        raise _failure("cost_explorer", "Cost Explorer", error, _COST_EXPLORER_ADVICE) from error
    return parse_usage_pages(pages, start, end)


def _pages(operation: Any, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Cost Explorer pages by NextPageToken: GetCostAndUsage has no boto3 paginator, and
    one loop serves GetAnomalies too."""
    token: str | None = None
    while True:
        page = operation(**request, **({"NextPageToken": token} if token else {}))
        yield page
        token = page.get("NextPageToken")
        if not token:
            return


def parse_usage_pages(
    pages: Iterable[Mapping[str, Any]], start: dt.date | None = None, end: dt.date | None = None
) -> UsageHistory:
    """GetCostAndUsage responses (grouped by USAGE_TYPE) as a :class:`UsageHistory`.

    Without ``start``/``end`` the window is the one the pages cover; pages without a
    single day then raise ``ValueError``.
    """
    rows: list[DailyUsage] = []
    first: dt.date | None = None
    last: dt.date | None = None
    for page in pages:
        for result in page.get("ResultsByTime", []):
            day = dt.date.fromisoformat(result["TimePeriod"]["Start"])
            period_end = dt.date.fromisoformat(result["TimePeriod"]["End"])
            first = day if first is None else min(first, day)
            last = period_end if last is None else max(last, period_end)
            for group in result.get("Groups", []):
                metrics = group.get("Metrics", {})
                cost = metrics.get("UnblendedCost", {})
                quantity = metrics.get("UsageQuantity", {})
                rows.append(
                    DailyUsage(
                        usage_type=group["Keys"][0],
                        day=day,
                        cost_usd=float(cost.get("Amount", 0.0)),
                        quantity=float(quantity.get("Amount", 0.0)),
                        unit=quantity.get("Unit", ""),
                        estimated=bool(result.get("Estimated", False)),
                    )
                )
    window_start, window_end = start or first, end or last
    if window_start is None or window_end is None:
        raise ValueError("the GetCostAndUsage pages hold no ResultsByTime: no days to analyse")
    return UsageHistory(start=window_start, end=window_end, usage=tuple(rows))


# --- Cost Anomaly Detection ------------------------------------------------------------

_ANOMALY_ADVICE = {
    "AccessDeniedException": (
        "Cost Anomaly Detection refused GetAnomalies (AccessDeniedException): check the "
        "function's role allows ce:GetAnomalies."
    ),
    "UnknownMonitorException": (
        "Cost Anomaly Detection does not know the monitor in COST_ANOMALY_MONITOR_ARN "
        "(UnknownMonitorException): copy the ARN from the Cost Anomaly Detection console, "
        "or leave the parameter empty."
    ),
}


def fetch_aws_anomalies(
    ce: Any, monitor_arn: str, start: dt.date, end: dt.date
) -> list[AwsAnomaly]:
    """Every page of the monitor's anomalies that started in ``[start, end)``."""
    request = {
        "MonitorArn": monitor_arn,
        "DateInterval": {"StartDate": start.isoformat(), "EndDate": end.isoformat()},
    }
    try:
        pages = list(_pages(ce.get_anomalies, request))
    except (ClientError, BotoCoreError) as error:
        raise _failure(
            "cost_anomaly_detection", "Cost Anomaly Detection", error, _ANOMALY_ADVICE
        ) from error
    return parse_anomaly_pages(pages)


def parse_anomaly_pages(pages: Iterable[Mapping[str, Any]]) -> list[AwsAnomaly]:
    """One :class:`AwsAnomaly` per SageMaker root cause of each anomaly."""
    found: list[AwsAnomaly] = []
    for page in pages:
        for anomaly in page.get("Anomalies", []):
            impact = anomaly.get("Impact", {})
            total = float(impact.get("TotalImpact", 0.0))
            actual = float(impact.get("TotalActualSpend") or 0.0)
            expected = float(impact.get("TotalExpectedSpend") or max(actual - total, 0.0))
            causes = [
                cause
                for cause in anomaly.get("RootCauses", [])
                if cause.get("Service") == SAGEMAKER_SERVICE
            ]
            if not causes and anomaly.get("DimensionValue") == SAGEMAKER_SERVICE:
                causes = [{}]
            for cause in causes:
                contribution = cause.get("Impact", {}).get("Contribution")
                share = (
                    float(contribution) if contribution is not None and len(causes) > 1 else total
                )
                found.append(
                    AwsAnomaly(
                        anomaly_id=anomaly["AnomalyId"],
                        usage_type=cause.get("UsageType") or f"{SAGEMAKER_SERVICE} (no usage type)",
                        start=_date(anomaly["AnomalyStartDate"]),
                        end=_date(anomaly["AnomalyEndDate"])
                        if anomaly.get("AnomalyEndDate")
                        else None,
                        actual=round(actual if len(causes) == 1 else expected + share, 2),
                        expected=round(expected, 2),
                        impact=round(share, 2),
                        max_score=float(anomaly.get("AnomalyScore", {}).get("MaxScore", 0.0)),
                    )
                )
    return found


def _date(value: str) -> dt.date:
    # AnomalyStartDate comes as "2024-05-01" or "2024-05-01T00:00:00Z".
    return dt.date.fromisoformat(value[:10])


# --- SageMaker training jobs and their CloudWatch utilisation --------------------------

_SAGEMAKER_ADVICE = {
    "AccessDeniedException": (
        "SageMaker refused to list or describe training jobs (AccessDeniedException): "
        "check the function's role allows sagemaker:ListTrainingJobs and "
        "sagemaker:DescribeTrainingJob."
    ),
}
_CLOUDWATCH_ADVICE = {
    "AccessDeniedException": (
        "CloudWatch refused GetMetricData (AccessDeniedException): utilisation-based "
        "advice (right-sizing, heterogeneous clusters) is skipped until the function's "
        "role allows cloudwatch:GetMetricData."
    ),
}


def fetch_training_jobs(
    sagemaker: Any,
    cloudwatch: Any | None,
    since: dt.datetime,
    now: dt.datetime,
    prices: PriceTable,
) -> tuple[list[TrainingJob], list[SourceProblem]]:
    """Training jobs created since ``since``, newest first, with their utilisation.

    CloudWatch failing costs only the utilisation, reported once as a problem.
    """
    problems: list[SourceProblem] = []
    try:
        names = [
            summary["TrainingJobName"]
            for page in sagemaker.get_paginator("list_training_jobs").paginate(
                CreationTimeAfter=since, SortBy="CreationTime", SortOrder="Descending"
            )
            for summary in page.get("TrainingJobSummaries", [])
        ]
        if len(names) > MAX_JOBS_DESCRIBED:
            problems.append(
                SourceProblem(
                    source="training_jobs",
                    severity="info",
                    message=(
                        f"{len(names)} training jobs in the lookback: only the newest "
                        f"{MAX_JOBS_DESCRIBED} were analysed."
                    ),
                )
            )
        descriptions = [
            sagemaker.describe_training_job(TrainingJobName=name)
            for name in names[:MAX_JOBS_DESCRIBED]
        ]
    except (ClientError, BotoCoreError) as error:
        raise _failure("training_jobs", "SageMaker", error, _SAGEMAKER_ADVICE) from error
    jobs = [parse_training_job(description) for description in descriptions]
    if cloudwatch is not None:
        try:
            jobs = [
                job.model_copy(
                    update={"utilisation": fetch_utilisation(cloudwatch, d, prices, now)}
                )
                for job, d in zip(jobs, descriptions, strict=True)
            ]
        except (ClientError, BotoCoreError) as error:
            problems.append(_failure("cloudwatch", "CloudWatch", error, _CLOUDWATCH_ADVICE).problem)
    return jobs, problems


def parse_training_job(description: Mapping[str, Any]) -> TrainingJob:
    """The cost-relevant facts of a DescribeTrainingJob response."""
    resources = description.get("ResourceConfig", {})
    groups = resources.get("InstanceGroups") or []
    # Heterogeneous clusters name their instances per group; the first group stands in.
    instance_type = resources.get("InstanceType") or (groups[0]["InstanceType"] if groups else "")
    instance_count = resources.get("InstanceCount") or (groups[0]["InstanceCount"] if groups else 1)
    warm_pool = description.get("WarmPoolStatus", {})
    return TrainingJob(
        name=description["TrainingJobName"],
        created=description["CreationTime"],
        status=description.get("TrainingJobStatus", ""),
        instance_type=instance_type,
        instance_count=int(instance_count),
        spot=bool(description.get("EnableManagedSpotTraining", False)),
        training_seconds=int(description.get("TrainingTimeInSeconds") or 0),
        billable_seconds=int(description.get("BillableTimeInSeconds") or 0),
        phase_seconds=_phase_seconds(description.get("SecondaryStatusTransitions", [])),
        input_mode=_input_mode(description),
        keep_alive_seconds=int(resources.get("KeepAlivePeriodInSeconds") or 0),
        warm_pool_status=warm_pool.get("Status"),
        warm_pool_billed_seconds=int(warm_pool.get("ResourceRetainedBillableTimeInSeconds") or 0),
        warm_pool_reused_by=warm_pool.get("ReusedByJob"),
    )


def _phase_seconds(transitions: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    phases: dict[str, float] = {}
    for transition in transitions:
        started, ended = transition.get("StartTime"), transition.get("EndTime")
        if isinstance(started, dt.datetime) and isinstance(ended, dt.datetime):
            seconds = max(0.0, (ended - started).total_seconds())
            phases[transition["Status"]] = phases.get(transition["Status"], 0.0) + seconds
    return phases


def _input_mode(description: Mapping[str, Any]) -> str:
    """File when any channel downloads before training: that is the wait FastFile removes."""
    default = description.get("AlgorithmSpecification", {}).get("TrainingInputMode", "File")
    modes = [c.get("InputMode", default) for c in description.get("InputDataConfig", [])]
    if not modes:
        return str(default)
    return "File" if "File" in modes else str(modes[0])


_METRICS = {"cpu": "CPUUtilization", "memory": "MemoryUtilization", "gpu": "GPUUtilization"}


def fetch_utilisation(
    cloudwatch: Any, description: Mapping[str, Any], prices: PriceTable, now: dt.datetime
) -> Utilisation | None:
    """The first host's CPU, memory and GPU utilisation over the job, per instance."""
    name = description["TrainingJobName"]
    started = description.get("TrainingStartTime") or description.get("CreationTime")
    ended = description.get("TrainingEndTime") or description.get("LastModifiedTime")
    if not isinstance(started, dt.datetime) or not isinstance(ended, dt.datetime):
        return None
    response = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": key,
                "MetricStat": {
                    "Metric": {
                        "Namespace": TRAINING_METRICS_NAMESPACE,
                        "MetricName": metric,
                        "Dimensions": [{"Name": "Host", "Value": f"{name}/algo-1"}],
                    },
                    "Period": _period(started, now),
                    "Stat": "Average",
                },
            }
            for key, metric in _METRICS.items()
        ],
        StartTime=started - dt.timedelta(minutes=1),
        EndTime=ended + dt.timedelta(minutes=1),
    )
    values = {
        result["Id"]: [float(v) for v in result.get("Values", [])]
        for result in response.get("MetricDataResults", [])
    }
    if not any(values.values()):
        return None
    price = prices.get(parse_training_job(description).instance_type)
    # SageMaker reports CPU and GPU utilisation summed over cores: 400% is 4 busy vCPUs.
    cpu = _scaled(values.get("cpu", []), price.vcpus if price else None)
    gpu = _scaled(values.get("gpu", []), price.gpus if price and price.gpus else None)
    memory = values.get("memory", [])
    return Utilisation(
        cpu_mean=_mean(cpu),
        cpu_p90=_percentile(cpu, 0.9),
        memory_mean=_mean(memory),
        memory_max=max(memory) if memory else None,
        gpu_mean=_mean(gpu),
        gpu_p90=_percentile(gpu, 0.9),
    )


def _period(started: dt.datetime, now: dt.datetime) -> int:
    """CloudWatch keeps 1-minute points for 15 days, 5-minute ones for 63, then hours."""
    age = _utc(now) - _utc(started)
    if age < dt.timedelta(days=15):
        return 60
    return 300 if age < dt.timedelta(days=63) else 3600


def _scaled(values: list[float], units: int | None) -> list[float]:
    if not values or units is None:
        return []
    return [v / units for v in values]


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 2)


def _utc(moment: dt.datetime) -> dt.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
