"""The cost watch's typed values: what the sources return and what the analysis says.

``CostAnalysis.model_dump(mode="json")`` is the ``--json`` output of ``fleetcast
cost-report``: ``anomalies[{usage_type, date, actual, expected, impact, ...}]`` and
``recommendations[{kind, evidence, monthly_saving_usd, ...}]``.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AnomalyKind = Literal[
    # A day above its expected value; "jump" until the next day tells spike from shift.
    "jump",
    "spike",
    "level_shift",
    # Days of a "level shift" that came back to the old level: each day reported.
    "excursion",
    "new_usage_type",
    "creep",
    # Found by AWS Cost Anomaly Detection and not by us.
    "aws_detected",
]
Detector = Literal["fleetcast", "aws_cost_anomaly_detection"]
RecommendationKind = Literal[
    "use_spot",
    "fastfile_input_mode",
    "right_size_instance",
    "heterogeneous_cluster",
    "warm_pool_keepalive",
    "cheaper_gpu_family",
]
Source = Literal[
    "cost_explorer", "cost_anomaly_detection", "training_jobs", "cloudwatch", "state", "ses"
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DailyUsage(_Frozen):
    """One usage type's cost on one day, as Cost Explorer reported it."""

    usage_type: str
    day: dt.date
    cost_usd: float
    quantity: float = 0.0
    unit: str = ""
    estimated: bool = False


class UsageHistory(_Frozen):
    """Daily SageMaker cost by usage type over ``[start, end)``; missing days cost 0."""

    start: dt.date
    end: dt.date
    usage: tuple[DailyUsage, ...] = ()

    @property
    def days(self) -> list[dt.date]:
        return [self.start + dt.timedelta(days=i) for i in range((self.end - self.start).days)]

    def costs_by_usage_type(self) -> dict[str, list[float]]:
        """Aligned daily costs per usage type, in first-seen order."""
        index = {day: i for i, day in enumerate(self.days)}
        costs: dict[str, list[float]] = {}
        for row in self.usage:
            if row.day not in index:
                continue
            series = costs.setdefault(row.usage_type, [0.0] * len(index))
            series[index[row.day]] += row.cost_usd
        return costs

    def estimated_days(self) -> set[dt.date]:
        return {row.day for row in self.usage if row.estimated}


class Anomaly(_Frozen):
    usage_type: str
    date: dt.date
    actual: float
    expected: float
    impact: float = Field(description="actual - expected, in USD")
    kind: AnomalyKind
    detected_by: tuple[Detector, ...] = ("fleetcast",)
    aws_anomaly_id: str | None = None
    estimated: bool = Field(
        default=False, description="Cost Explorer still marks the day estimated"
    )

    @property
    def key(self) -> tuple[str, dt.date]:
        return (self.usage_type, self.date)


class AwsAnomaly(_Frozen):
    """One root cause of an AWS Cost Anomaly Detection anomaly within SageMaker."""

    anomaly_id: str
    usage_type: str
    start: dt.date
    end: dt.date | None
    actual: float
    expected: float
    impact: float
    max_score: float = 0.0


class Utilisation(_Frozen):
    """CloudWatch utilisation of a training job's first host, per instance: CPU and GPU
    are divided by the vCPU and GPU counts so 100 means every core busy."""

    cpu_mean: float | None = None
    cpu_p90: float | None = None
    memory_mean: float | None = None
    memory_max: float | None = None
    gpu_mean: float | None = None
    gpu_p90: float | None = None


class TrainingJob(_Frozen):
    """The cost-relevant facts of one DescribeTrainingJob answer."""

    name: str
    created: dt.datetime
    status: str = "Completed"
    instance_type: str
    instance_count: int = 1
    spot: bool = False
    training_seconds: int = 0
    billable_seconds: int = 0
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    input_mode: str = "File"
    keep_alive_seconds: int = 0
    warm_pool_status: str | None = None
    warm_pool_billed_seconds: int = 0
    warm_pool_reused_by: str | None = None
    utilisation: Utilisation | None = None


class Recommendation(_Frozen):
    kind: RecommendationKind
    evidence: str
    monthly_saving_usd: float
    instance_type: str
    action: str
    job_names: tuple[str, ...] = ()


class SourceProblem(_Frozen):
    """A source that failed or had nothing to say, and what to do about it."""

    source: Source
    message: str
    severity: Literal["error", "info"] = "error"


class CostAnalysis(_Frozen):
    """Everything the report says; the e-mail and ``--json`` are renderings of it."""

    report_date: dt.date
    start: dt.date
    end: dt.date
    total_cost_usd: float
    anomalies: tuple[Anomaly, ...] = ()
    recommendations: tuple[Recommendation, ...] = ()
    monthly_saving_usd: float = Field(
        default=0.0, description="Sum over jobs of each job's best saving: overlaps counted once"
    )
    training_jobs_analysed: int = 0
    problems: tuple[SourceProblem, ...] = ()
    prices_as_of: str = ""
    history: UsageHistory = Field(exclude=True)


class ReportOutcome(_Frozen):
    """What one scheduled run did."""

    report_date: dt.date
    anomalies_found: int
    anomalies_reported: int
    digest: bool
    sent: bool
    subject: str | None = None
    message_id: str | None = None
    outbox_files: tuple[str, ...] = ()
    problems: tuple[SourceProblem, ...] = ()
    monthly_saving_usd: float = 0.0
