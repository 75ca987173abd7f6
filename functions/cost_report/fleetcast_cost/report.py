"""The cost watch, end to end: gather the sources, analyse, decide, e-mail.

* :func:`analyse` is pure: usage history, AWS's anomalies and training jobs in, a
  :class:`CostAnalysis` out.
* :func:`gather_analysis` fetches the sources (each failure isolated into a
  :class:`SourceProblem`) and analyses them: what ``fleetcast cost-report --json`` prints.
* :func:`run_cost_report` is the scheduled run: it also remembers what was reported and
  sends the e-mail when there is news, or on the digest weekday.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import boto3

from fleetcast_common.aws import RETRY_CONFIG
from fleetcast_cost import delivery, mail, sources
from fleetcast_cost.detection import Thresholds, detect_anomalies
from fleetcast_cost.models import (
    Anomaly,
    AwsAnomaly,
    CostAnalysis,
    ReportOutcome,
    SourceProblem,
    TrainingJob,
    UsageHistory,
)
from fleetcast_cost.prices import PriceTable, bundled_prices
from fleetcast_cost.recommendations import recommend
from fleetcast_cost.settings import CostAnalysisSettings, CostReportSettings
from fleetcast_cost.state import Claim, ReportedAnomalies, StateUnavailable

log = logging.getLogger(__name__)

# Cost Explorer has one endpoint, in us-east-1, whatever region the function runs in.
COST_EXPLORER_REGION = "us-east-1"


@dataclass(frozen=True)
class CostClients:
    """The boto3 clients the report uses, created once and passed in (tests pass their
    own; the endpoint comes from ``AWS_ENDPOINT_URL`` like everywhere else)."""

    ce: Any
    sagemaker: Any
    cloudwatch: Any
    dynamodb: Any
    ses: Any

    @classmethod
    def create(
        cls,
        region: str,
        session: boto3.session.Session | None = None,
        endpoint_url: str | None = None,
    ) -> CostClients:
        """The report's clients in ``region`` (Cost Explorer's in its one region), from
        ``session`` (a new default one when None); ``endpoint_url`` a local stack's, else
        ``AWS_ENDPOINT_URL`` as boto3 reads it."""
        session = session or boto3.session.Session()

        def client(service: str, region_name: str = region) -> Any:
            return session.client(
                service, region_name=region_name, endpoint_url=endpoint_url, config=RETRY_CONFIG
            )

        return cls(
            ce=client("ce", COST_EXPLORER_REGION),
            sagemaker=client("sagemaker"),
            cloudwatch=client("cloudwatch"),
            dynamodb=client("dynamodb"),
            ses=client("ses"),
        )


def analyse(
    history: UsageHistory,
    aws_anomalies: Sequence[AwsAnomaly],
    jobs: Sequence[TrainingJob],
    problems: Sequence[SourceProblem],
    settings: CostAnalysisSettings,
    report_date: dt.date,
    prices: PriceTable,
) -> CostAnalysis:
    thresholds = Thresholds(settings.relative_threshold, settings.absolute_threshold_usd)
    anomalies = merge_anomalies(
        detect_anomalies(history, thresholds), aws_anomalies, history.start, history.end
    )
    advice = recommend(jobs, report_date, settings.lookback_days, prices)
    return CostAnalysis(
        report_date=report_date,
        start=history.start,
        end=history.end,
        total_cost_usd=round(sum(row.cost_usd for row in history.usage), 2),
        anomalies=tuple(anomalies),
        recommendations=tuple(advice.ranked),
        monthly_saving_usd=advice.monthly_saving_usd,
        training_jobs_analysed=len(jobs),
        problems=tuple(problems),
        prices_as_of=prices.as_of,
        history=history,
    )


def merge_anomalies(
    ours: Iterable[Anomaly], theirs: Iterable[AwsAnomaly], start: dt.date, end: dt.date
) -> list[Anomaly]:
    """Ours plus AWS's, one per (usage type, day): where both found it, ours (with its
    expected value) is kept and credited to both."""
    merged = {anomaly.key: anomaly for anomaly in ours}
    for aws in sorted(theirs, key=lambda a: -a.impact):
        if not start <= aws.start < end:
            continue
        key = (aws.usage_type, aws.start)
        existing = merged.get(key)
        if existing is None:
            merged[key] = Anomaly(
                usage_type=aws.usage_type,
                date=aws.start,
                actual=aws.actual,
                expected=aws.expected,
                impact=aws.impact,
                kind="aws_detected",
                detected_by=("aws_cost_anomaly_detection",),
                aws_anomaly_id=aws.anomaly_id,
            )
        elif "aws_cost_anomaly_detection" not in existing.detected_by:
            merged[key] = existing.model_copy(
                update={
                    "detected_by": (*existing.detected_by, "aws_cost_anomaly_detection"),
                    "aws_anomaly_id": aws.anomaly_id,
                }
            )
    return sorted(merged.values(), key=lambda a: (a.date, -a.impact, a.usage_type))


def gather_analysis(
    now: dt.datetime,
    settings: CostAnalysisSettings,
    clients: CostClients,
    usage_pages: Sequence[Mapping[str, Any]] | None = None,
    prices: PriceTable | None = None,
) -> CostAnalysis:
    """Fetch every source and analyse. ``usage_pages`` (saved GetCostAndUsage
    responses) stand in for Cost Explorer when given."""
    prices = prices or bundled_prices()
    report_date = now.astimezone(dt.UTC).date()
    start = report_date - dt.timedelta(days=settings.lookback_days)
    problems: list[SourceProblem] = []

    history = UsageHistory(start=start, end=report_date)
    try:
        if usage_pages is not None:
            history = sources.parse_usage_pages(usage_pages)
        else:
            history = sources.fetch_usage(clients.ce, start, report_date)
    except sources.SourceFailure as failure:
        problems.append(failure.problem)
    except ValueError as error:
        problems.append(SourceProblem(source="cost_explorer", message=f"{error}."))

    aws_anomalies: list[AwsAnomaly] = []
    if settings.anomaly_monitor_arn:
        try:
            aws_anomalies = sources.fetch_aws_anomalies(
                clients.ce, settings.anomaly_monitor_arn, start, report_date
            )
        except sources.SourceFailure as failure:
            problems.append(failure.problem)

    jobs: list[TrainingJob] = []
    try:
        since = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
        jobs, job_problems = sources.fetch_training_jobs(
            clients.sagemaker, clients.cloudwatch, since, now, prices
        )
        problems.extend(job_problems)
        if not jobs:
            problems.append(
                SourceProblem(
                    source="training_jobs",
                    severity="info",
                    message=(
                        f"No SageMaker training jobs were created in the last "
                        f"{settings.lookback_days} days, so there are no job recommendations."
                    ),
                )
            )
    except sources.SourceFailure as failure:
        problems.append(failure.problem)

    for problem in problems:
        log.warning("cost source %s: %s", problem.source, problem.message)
    return analyse(history, aws_anomalies, jobs, problems, settings, report_date, prices)


def run_cost_report(
    now: dt.datetime,
    settings: CostReportSettings,
    clients: CostClients,
    prices: PriceTable | None = None,
) -> ReportOutcome:
    """The scheduled run. Raises :class:`delivery.DeliveryFailed` when SES refuses the
    e-mail (after writing the outbox and releasing this run's claims)."""
    analysis = gather_analysis(now, settings, clients, prices=prices)
    report_date = analysis.report_date
    window_start = report_date - dt.timedelta(days=settings.report_window_days)
    recent = [a for a in analysis.anomalies if a.date >= window_start]
    digest = report_date.weekday() == settings.digest_weekday
    run_id = f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}"

    reported = ReportedAnomalies(clients.dynamodb, settings.state_table)
    problems = list(analysis.problems)
    claims: list[Claim] = []
    try:
        claims = reported.claim(recent, run_id, now)
        news = [claim.anomaly for claim in claims]
    except StateUnavailable as error:
        # Better a repeated e-mail than a silent one.
        problems.append(SourceProblem(source="state", message=str(error)))
        news = recent
    analysis = analysis.model_copy(update={"problems": tuple(problems)})
    outcome = ReportOutcome(
        report_date=report_date,
        anomalies_found=len(recent),
        anomalies_reported=len(news),
        digest=digest,
        sent=False,
        problems=analysis.problems,
        monthly_saving_usd=analysis.monthly_saving_usd,
    )
    if not news and not digest:
        log.info("nothing new to report and %s is not the digest day", report_date)
        return outcome

    rows = recent if digest else news
    new_keys = {a.key for a in news}
    from fleetcast_cost.chart import render_cost_chart  # matplotlib: this path only

    chart = render_cost_chart(analysis.history, analysis.anomalies, new_keys)
    email = mail.compose(
        analysis, rows, new_keys, digest, settings.sender, settings.recipients, now, chart
    )
    files: list[str] = []
    if settings.outbox_dir is not None:
        files = [str(p) for p in delivery.write_outbox(settings.outbox_dir, email, chart, now)]
    try:
        message_id = delivery.send(
            clients.ses, email, settings.sender, settings.recipients, settings.region
        )
    except delivery.DeliveryFailed:
        try:
            reported.release(claims, run_id)
        except StateUnavailable:
            log.exception("could not release the claims of run %s", run_id)
        raise
    return outcome.model_copy(
        update={
            "sent": True,
            "subject": email.subject,
            "message_id": message_id,
            "outbox_files": tuple(files),
        }
    )
