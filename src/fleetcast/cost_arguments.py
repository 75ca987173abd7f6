"""``fleetcast cost-report``'s options, apart from the command (fleetcast.cost_cli), which
imports boto3 and the cost watch: ``fleetcast --help`` reads only this."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from fleetcast.terminal import command

DESCRIPTION = """\
The cost watch from the command line, against the running local stack (its stack.json,
or `eval "$(fleetcast env)"`) or an AWS account (the standard AWS_* variables and
credentials):

* without --send: SageMaker's cost, its anomalies and the savings to be had, as tables,
  or --json;
* with --send: the scheduled report itself, in this process with the function's settings
  (COST_*, which `fleetcast env` exports for the local stack): the e-mail through SES,
  remembered anomalies, the outbox when configured;
* --ce-results FILE: saved GetCostAndUsage responses instead of Cost Explorer.
"""


def add_cost_commands(commands: Any) -> None:
    """Register ``cost-report`` on the ``fleetcast`` parser's subparsers."""
    report = commands.add_parser(
        "cost-report",
        help="SageMaker cost anomalies and savings (--send e-mails them)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "--send",
        action="store_true",
        help="run the scheduled report: e-mail what is new through SES (and the outbox)",
    )
    report.add_argument("--json", action="store_true", help="print JSON instead of tables")
    report.add_argument(
        "--ce-results",
        type=Path,
        metavar="FILE",
        help="a JSON list of GetCostAndUsage responses to analyse instead of Cost Explorer",
    )
    report.add_argument(
        "--date",
        type=_day,
        metavar="YYYY-MM-DD",
        help="report as of this day (default: today, UTC); its cost ends the day before",
    )
    report.set_defaults(run=command("fleetcast.cost_cli:cmd_cost_report"))


def _day(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {value!r}") from error
