"""Scheduled (EventBridge) -> SageMaker cost anomalies and savings, e-mailed through SES.

The run is dated by the schedule event's ``time``, not the clock, so a retried or
replayed event reports the same day.
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from fleetcast_common.settings import read_on_first_use
from fleetcast_cost.models import ReportOutcome
from fleetcast_cost.report import CostClients, run_cost_report
from fleetcast_cost.settings import CostReportSettings

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(CostReportSettings)


@functools.cache
def _clients() -> CostClients:
    return CostClients.create(settings().region)


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
@event_parser(model=EventBridgeModel)
def lambda_handler(event: EventBridgeModel, context: LambdaContext) -> dict[str, Any]:
    return _published(run_cost_report(event.time, settings(), _clients()))


def _published(outcome: ReportOutcome) -> dict[str, Any]:
    metrics.add_metric(name="AnomaliesFound", unit=MetricUnit.Count, value=outcome.anomalies_found)
    metrics.add_metric(
        name="AnomaliesReported", unit=MetricUnit.Count, value=outcome.anomalies_reported
    )
    metrics.add_metric(
        name="SourceProblems",
        unit=MetricUnit.Count,
        value=sum(p.severity == "error" for p in outcome.problems),
    )
    metrics.add_metric(name="ReportsSent", unit=MetricUnit.Count, value=int(outcome.sent))
    logger.info(
        "cost report %s",
        "sent" if outcome.sent else "not sent",
        extra=outcome.model_dump(mode="json"),
    )
    return outcome.model_dump(mode="json")
