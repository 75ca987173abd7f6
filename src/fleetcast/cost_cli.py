"""``fleetcast cost-report``: the cost watch from the command line.

Against the running local stack (its ``stack.json``, or ``eval "$(fleetcast env)"``) or
an AWS account (the standard ``AWS_*`` variables and credentials):

* without ``--send``: the analysis (:func:`gather_analysis`) as tables, or ``--json``;
* with ``--send``: the scheduled run itself (:func:`run_cost_report`), in this process
  with the function's settings (``COST_*``, which ``fleetcast env`` exports for the local
  stack): the e-mail through SES, remembered anomalies, the outbox when configured;
* ``--ce-results FILE``: saved ``GetCostAndUsage`` responses instead of Cost Explorer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
import botocore.session
from botocore.validate import ParamValidator
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from fleetcast.terminal import UsageError, console, err, print_table, shown
from fleetcast_cost import delivery, sources
from fleetcast_cost.models import CostAnalysis, ReportOutcome, SourceProblem
from fleetcast_cost.prices import bundled_prices
from fleetcast_cost.report import (
    CostClients,
    analyse,
    gather_analysis,
    run_cost_report,
)
from fleetcast_cost.settings import CostAnalysisSettings, CostReportSettings

if TYPE_CHECKING:
    from fleetcast.embedded.stack import EmbeddedStack, StackInfo

# Any of these set means "use the environment as it is" (AWS, or `fleetcast env`).
_EXPLICIT_AWS = ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID")


class CostUsageError(ValueError):
    """A mistake the user can fix (the CLI prints it without a traceback)."""


# -- where the report reads from ------------------------------------------------------------


@dataclass(frozen=True)
class CostTarget:
    """The account the report reads: its description, the variables its settings come
    from, and its clients (None when there is neither a local stack nor AWS)."""

    description: str
    environment: Mapping[str, str]
    clients: CostClients | None


def resolve_target(state_dir: Path | None) -> CostTarget:
    """The environment if it names an endpoint or credentials, else the running local
    stack, else whatever credentials boto3 finds (a profile, SSO, an instance role)."""
    from fleetcast.embedded.stack import StackInfo

    environ = dict(os.environ)
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    if any(environ.get(name) for name in _EXPLICIT_AWS):
        endpoint = environ.get("AWS_ENDPOINT_URL")
        return CostTarget(
            f"the stack at {endpoint}" if endpoint else f"AWS ({region})",
            {"AWS_REGION": region, **environ},
            CostClients.create(region),
        )
    try:
        info = StackInfo.load(state_dir)
    except FileNotFoundError:
        info = None
    if info is not None:
        # The stack's settings, except for COST_* variables set here (a test's, say).
        overrides = {k: v for k, v in environ.items() if k.startswith("COST_")}
        return CostTarget(
            f"the local stack at {info.endpoint_url}",
            {**info.environment(), **overrides},
            stack_clients(info),
        )
    if boto3.session.Session().get_credentials() is not None:
        return CostTarget(
            f"AWS ({region})", {"AWS_REGION": region, **environ}, CostClients.create(region)
        )
    return CostTarget("nowhere", {"AWS_REGION": region, **environ}, None)


def stack_clients(info: StackInfo) -> CostClients:
    """Clients for a local stack without touching this process's environment."""
    session = boto3.session.Session(
        aws_access_key_id=info.environment()["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=info.environment()["AWS_SECRET_ACCESS_KEY"],
    )

    return CostClients.create(info.region, session, info.endpoint_url)


# -- --ce-results ---------------------------------------------------------------------------


def load_usage_pages(path: Path) -> list[dict[str, Any]]:
    """Saved ``GetCostAndUsage`` responses: a JSON list of them (one response alone, as
    ``aws ce get-cost-and-usage`` prints it, is taken too), checked against Cost
    Explorer's own response shape and for the daily usage-type grouping the report needs.
    """
    try:
        text = path.read_text()
    except OSError as error:
        raise CostUsageError(f"--ce-results {path}: {error.strerror}") from error
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as error:
        raise CostUsageError(f"--ce-results {path} is not JSON: {error}") from error
    pages = [loaded] if isinstance(loaded, dict) else loaded
    if not isinstance(pages, list) or not pages:
        raise CostUsageError(
            f"--ce-results {path} must hold a JSON list of GetCostAndUsage responses "
            '([{"ResultsByTime": [...], ...}, ...]), not '
            f"{'an empty list' if pages == [] else type(loaded).__name__}"
        )
    shape = (
        botocore.session.get_session()
        .get_service_model("ce")
        .operation_model("GetCostAndUsage")
        .output_shape
    )
    checked = []
    for number, page in enumerate(pages, start=1):
        where = f"--ce-results {path}, response {number} of {len(pages)}"
        if not isinstance(page, dict):
            raise CostUsageError(f"{where} is a {type(page).__name__}, not a response object")
        # boto3 responses carry it; Cost Explorer's own do not.
        page = {k: v for k, v in page.items() if k != "ResponseMetadata"}
        report = ParamValidator().validate(page, shape)
        if report.has_errors():
            problems = report.generate_report().replace("Parameter validation failed:\n", "")
            raise CostUsageError(
                f"{where} is not a GetCostAndUsage response: {problems.replace(chr(10), '; ')}"
            )
        if "ResultsByTime" not in page:
            raise CostUsageError(f"{where} has no ResultsByTime")
        grouping = [g.get("Key") for g in page.get("GroupDefinitions", [])]
        if grouping and grouping != ["USAGE_TYPE"]:
            raise CostUsageError(
                f"{where} is grouped by {', '.join(map(str, grouping))}: the report needs "
                "GroupBy=[{Type: DIMENSION, Key: USAGE_TYPE}]"
            )
        for result in page["ResultsByTime"]:
            for group in result.get("Groups", []):
                if "UnblendedCost" not in group.get("Metrics", {}):
                    raise CostUsageError(
                        f"{where}: the group {group.get('Keys')} on "
                        f"{result['TimePeriod']['Start']} has no UnblendedCost metric "
                        "(request Metrics=[UnblendedCost, UsageQuantity])"
                    )
        checked.append(page)
    return checked


# -- the command ----------------------------------------------------------------------------


def cmd_cost_report(args: argparse.Namespace) -> int:
    try:
        return _cost_report(args, console)
    except CostUsageError as error:
        raise UsageError(str(error)) from error
    except delivery.DeliveryFailed as error:
        err.print(f"[red]the report was not sent:[/] {shown(error)}")
        return 1


def _cost_report(args: argparse.Namespace, console: Console) -> int:
    if args.send and args.ce_results:
        raise CostUsageError(
            "--ce-results is for the analysis only: --send reads Cost Explorer, as the "
            "scheduled function does"
        )
    pages = load_usage_pages(args.ce_results) if args.ce_results else None
    target = resolve_target(args.state_dir)
    now = dt.datetime.now(dt.UTC)
    if args.date:
        now = dt.datetime.combine(args.date, now.timetz())
    if target.clients is None and pages is None:
        raise CostUsageError(
            "no local stack is running (start one with `fleetcast up`) and no AWS "
            "credentials are configured (AWS_PROFILE, AWS_ACCESS_KEY_ID, or "
            '`eval "$(fleetcast env)"` for a local stack)'
        )
    if args.send:
        assert target.clients is not None
        settings = _settings(CostReportSettings, target.environment)
        outcome = run_cost_report(now, settings, target.clients)
        if args.json:
            print(json.dumps(outcome.model_dump(mode="json"), indent=2))
        else:
            _print_outcome(console, outcome, settings, target.description)
        return 0
    analysis_settings = _settings(CostAnalysisSettings, target.environment)
    if target.clients is None:
        assert pages is not None
        analysis = _offline_analysis(now, analysis_settings, pages)
    else:
        analysis = gather_analysis(now, analysis_settings, target.clients, usage_pages=pages)
    if args.json:
        print(json.dumps(analysis.model_dump(mode="json"), indent=2))
    else:
        source = str(args.ce_results) if pages is not None else target.description
        print_analysis(console, analysis, source)
    return 0


_Settings = TypeVar("_Settings", bound=CostAnalysisSettings)


def _settings(model: type[_Settings], environment: Mapping[str, str]) -> _Settings:
    try:
        settings: _Settings = model.from_env(dict(environment))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise CostUsageError(
            f"the cost report's settings are incomplete or wrong ({problems}); for a "
            'local stack `eval "$(fleetcast env)"` sets them, for AWS export the values '
            "of the deployed CostReportFunction"
        ) from error
    return settings


def _offline_analysis(
    now: dt.datetime, settings: CostAnalysisSettings, pages: Sequence[Mapping[str, Any]]
) -> CostAnalysis:
    """The file alone: no local stack or AWS to read training jobs from."""
    problems = [
        SourceProblem(
            source="training_jobs",
            severity="info",
            message="No local stack or AWS account to read training jobs from: no job recommendations.",
        )
    ]
    try:
        history = sources.parse_usage_pages(pages)
    except ValueError as error:
        raise CostUsageError(f"--ce-results: {error}") from error
    return analyse(history, [], [], problems, settings, now.date(), bundled_prices())


# -- output ---------------------------------------------------------------------------------


def print_analysis(console: Console, analysis: CostAnalysis, source: str) -> None:
    last_day = analysis.end - dt.timedelta(days=1)
    console.print(
        f"[bold]SageMaker cost {analysis.start} to {last_day}[/]: "
        f"${analysis.total_cost_usd:,.2f} (from {source}); "
        f"{_count(len(analysis.anomalies), 'anomaly', 'anomalies')}, "
        f"{_count(analysis.training_jobs_analysed, 'training job')} analysed"
    )
    if analysis.anomalies:
        table = Table(title="Anomalies", header_style="bold", title_justify="left")
        table.add_column("usage type", no_wrap=True)
        table.add_column("day", no_wrap=True)
        for column in ("actual", "expected", "impact"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("kind")
        table.add_column("found by")
        for a in analysis.anomalies:
            table.add_row(
                shown(a.usage_type),
                a.date.isoformat(),
                f"${a.actual:,.2f}",
                f"${a.expected:,.2f}",
                f"[red]+${a.impact:,.2f}[/]",
                a.kind.replace("_", " ") + (" (estimated)" if a.estimated else ""),
                " + ".join(_DETECTORS[d] for d in a.detected_by),
            )
        print_table(console, table)
    if analysis.recommendations:
        table = Table(
            title=f"Recommendations: save up to ${analysis.monthly_saving_usd:,.2f}/month",
            header_style="bold",
            title_justify="left",
            show_lines=True,
        )
        table.add_column("#", justify="right")
        table.add_column("saving/month", justify="right", no_wrap=True)
        table.add_column("change")
        table.add_column("evidence and action", ratio=1)
        for number, r in enumerate(analysis.recommendations, start=1):
            table.add_row(
                str(number),
                f"${r.monthly_saving_usd:,.2f}",
                r.kind.replace("_", " "),
                f"{r.evidence}\n[bold]{r.action}[/]",
            )
        print_table(console, table)
    for problem in analysis.problems:
        colour = "yellow" if problem.severity == "error" else "dim"
        console.print(f"[{colour}]{shown(problem.source)}: {shown(problem.message)}[/]")


_DETECTORS = {"fleetcast": "fleetcast", "aws_cost_anomaly_detection": "AWS"}


def _count(number: int, singular: str, plural: str | None = None) -> str:
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


def _print_outcome(
    console: Console, outcome: ReportOutcome, settings: CostReportSettings, target: str
) -> None:
    if outcome.sent:
        console.print(
            f"[bold]sent[/] to {', '.join(settings.recipients)} through SES ({target}): "
            f"{outcome.subject}"
        )
        console.print(
            f"{outcome.anomalies_reported} new or grown of "
            f"{_count(outcome.anomalies_found, 'anomaly', 'anomalies')} in the last "
            f"{settings.report_window_days} days" + (" (weekly digest)" if outcome.digest else "")
        )
        if outcome.outbox_files:
            console.print(f"outbox: {', '.join(outcome.outbox_files[:2])}")
            console.print("preview: make email-preview")
    else:
        window = f"in the last {settings.report_window_days} days"
        console.print(
            "nothing new to report: "
            + (
                f"{_count(outcome.anomalies_found, 'anomaly', 'anomalies')} {window}, all "
                "e-mailed before"
                if outcome.anomalies_found
                else f"no anomalies {window}"
            )
            + f", and {outcome.report_date:%A} is not the digest day; no e-mail sent"
        )
    for problem in outcome.problems:
        colour = "yellow" if problem.severity == "error" else "dim"
        console.print(f"[{colour}]{shown(problem.source)}: {shown(problem.message)}[/]")


# -- fleetcast demo -------------------------------------------------------------------------


def cost_report_for_demo(stack: EmbeddedStack, console: Console) -> Path:
    """The scheduled cost report on the demo's stack (the function itself, invoked as
    its schedule would): prints what was sent and returns the outbox folder."""
    assert stack.costs is not None, "the local stack is not started"
    with console.status("cost watch: reading the SageMaker bill, e-mailing the report"):
        outcome = stack.costs.run_scheduled_report()
    if outcome["sent"]:
        console.print(f"cost report e-mailed: [bold]{outcome['subject']}[/]")
        html = [f for f in outcome["outbox_files"] if f.endswith(".html")]
        console.print(
            f"outbox: {stack.costs.outbox} ({Path(html[0]).name if html else 'no html'}); "
            "`make email-preview` renders the latest to a PNG"
        )
    else:
        console.print("cost report: nothing new to e-mail")
    return stack.costs.outbox
