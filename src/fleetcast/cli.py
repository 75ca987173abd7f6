"""The ``fleetcast`` command: run the embedded local stack and use fleetcast with it (or
with a deployed stack: every command but ``up`` and ``demo`` only uses standard clients
configured by the usual AWS environment variables)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetcast import images
from fleetcast.cost_arguments import add_cost_commands
from fleetcast.embedded.info import StackInfo, default_state_dir
from fleetcast.serving_cli import add_serving_commands
from fleetcast.terminal import ControlsEscaped, UsageError, console, err, plain, shown
from fleetcast.up_cli import add_up_command
from fleetcast_contracts import layout
from fleetcast_contracts.ids import is_valid_run_id
from fleetcast_contracts.stages import PIPELINE

# What a command needs beyond the standard library it imports when it runs: `fleetcast
# --help` and `fleetcast env` never load boto3, pyarrow or the local stack
# (tests/unit/test_cli_help.py holds them to that).
if TYPE_CHECKING:
    from fleetcast.run_report import RunAccuracy
    from fleetcast.status import RunStatus
    from fleetcast_common.registry import ModelRegistry

# The tables `fleetcast export` fetches (fleetcast_training.run_exports' FORECASTS and
# ACCURACY, which import pyarrow), checked against its SCHEMAS when the command runs.
EXPORT_TABLES = ("forecasts", "accuracy")

# -- shared helpers ----------------------------------------------------------------------


# What a command needs to know of the stack, and the variable `fleetcast env` exports for it.
NAME_VARIABLES = {
    "raw_bucket": "FLEETCAST_RAW_BUCKET",
    "artifacts_bucket": "FLEETCAST_ARTIFACTS_BUCKET",
    "registry_table": "FLEETCAST_REGISTRY_TABLE",
    "job_name_prefix": "FLEETCAST_JOB_NAME_PREFIX",
}
UPLOAD_QUEUE_VARIABLE = "FLEETCAST_UPLOAD_QUEUE_TABLE"


def _names(args: argparse.Namespace) -> dict[str, str]:
    """Bucket/table names from the environment (``fleetcast env``), else the running stack."""
    if not all(os.environ.get(variable) for variable in NAME_VARIABLES.values()):
        try:
            info = StackInfo.load(args.state_dir)
        except FileNotFoundError as error:
            raise UsageError(
                f"{error}, or export the FLEETCAST_* names of a deployed stack"
            ) from error
        exported = info.environment()
        # The stack's names win; AWS settings the user has already chosen stay.
        os.environ.update(
            {
                k: v
                for k, v in exported.items()
                if k not in os.environ or k in NAME_VARIABLES.values()
            }
        )
    return {name: os.environ[variable] for name, variable in NAME_VARIABLES.items()}


def output_file(path: Path, option: str) -> Path:
    """A file a command is to write: its folder must exist (a typo in it is an error, not a
    new tree of folders wherever the path points)."""
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(f"{option} {path}: the folder {folder} {what} (nothing was written)")
    return path


def _statuses(names: dict[str, str], summaries: dict[str, Any] | None = None) -> list[RunStatus]:
    import boto3

    from fleetcast.status import pipeline_status
    from fleetcast_common.upload_queue import UploadQueue

    dynamodb = boto3.resource("dynamodb")
    # Optional: without it, uploads waiting for their processing job are not listed.
    queue_table = os.environ.get(UPLOAD_QUEUE_VARIABLE)
    return pipeline_status(
        names["job_name_prefix"],
        names["artifacts_bucket"],
        boto3.client("sagemaker"),
        boto3.client("s3"),
        dynamodb.Table(names["registry_table"]),
        UploadQueue(dynamodb.Table(queue_table)) if queue_table else None,
        summaries,
    )


# -- commands ----------------------------------------------------------------------------


def cmd_env(args: argparse.Namespace) -> int:
    try:
        info = StackInfo.load(args.state_dir)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from error
    for key, value in info.environment().items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from fleetcast import datagen

    output_file(args.output, "-o")
    started = time.perf_counter()
    try:
        rows = datagen.write_readings(
            args.output,
            customers=args.customers,
            days=args.days,
            start=args.start,
            readings_per_day=args.readings_per_day,
            seed=args.seed,
            customer_offset=args.customer_offset,
            holidays=args.holidays,
        )
    except ValueError as error:
        raise UsageError(f"{error} (nothing was written)") from None
    holidays = f", lower on {args.holidays} public holidays" if args.holidays else ""
    console.print(
        f"wrote {rows:,} readings for {args.customers:,} customers to {args.output}{holidays} "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return 0


def upload_files(files: Sequence[Path], bucket: str, prefix: str) -> list[str]:
    """Put each file at ``prefix`` + its name; every key is checked before any is put, so
    a refusal uploads nothing."""
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)} (nothing was uploaded)")
    keys = [f"{prefix}{path.name}" for path in files]
    for key in keys:
        problem = layout.upload_key_problem(key)
        if problem is not None:
            raise UsageError(f"--prefix {prefix!r}: {problem} (nothing was uploaded)")
    import boto3

    s3 = boto3.client("s3")
    for path, key in zip(files, keys, strict=True):
        s3.upload_file(str(path), bucket, key)
    return keys


def cmd_upload(args: argparse.Namespace) -> int:
    names = _names(args)
    for key in upload_files(args.files, names["raw_bucket"], args.prefix):
        console.print(f"uploaded s3://{shown(names['raw_bucket'])}/{shown(key)}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from fleetcast.status_table import print_status

    names = _names(args)
    # (the ended processing jobs' summaries, read once however long the wait)
    summaries: dict[str, Any] = {}
    runs = _statuses(names, summaries)
    # Runs that had ended before the wait: not waited for (an old failure stays in the list).
    ended_before = {run.run_id for run in runs if run.done}
    if args.wait is not None:
        # Until there is a run and nothing more will happen to any of them.
        deadline = time.monotonic() + args.wait
        with console.status("waiting for the runs to finish"):
            while not (runs and all(run.done for run in runs)):
                if time.monotonic() > deadline:
                    err.print(f"[red]still running after {args.wait:.0f} s[/]")
                    print_status(console, runs)
                    return 1
                time.sleep(1)
                runs = _statuses(names, summaries)
    if args.json:
        print(json.dumps([run.model_dump(mode="json") for run in runs], indent=2))
    elif not runs:
        console.print("no uploads yet: `fleetcast upload FILE`")
    else:
        print_status(console, runs)
        summary = _accuracy_summary(names, None)
        if summary is not None:
            from fleetcast.run_report import summary_lines

            for line in summary_lines(summary):
                console.print(shown(line), highlight=False, soft_wrap=True)
    if args.wait is not None:
        waited = [run for run in runs if run.run_id not in ended_before]
        # Every run had ended already (an upload's run can fail before the first look):
        # the newest is the one a script that has just uploaded waits for.
        return _waited_result(waited or runs[-1:])
    return 0


def _waited_result(runs: list[RunStatus]) -> int:
    """``status --wait``'s exit status: 1 when a run it waited for failed or left customers
    failed (saying which, on standard error), so a script can tell; else 0."""
    problems = []
    for run in runs:
        if run.failure or any(run.job(stage).status in ("Failed", "Stopped") for stage in PIPELINE):
            problems.append(f"run {run.run_id} failed: {run.failure or 'a job stopped'}")
        elif run.customers_failed:
            first = run.failures[0] if run.failures else None
            problems.append(
                f"run {run.run_id} left {run.customers_failed} customers failed"
                + (f" (first {first.customer_id}: {first.reason})" if first else "")
            )
        if run.customers_lost:
            problems.append(
                f"run {run.run_id} lost {run.customers_lost} customers (first {run.first_lost})"
            )
    for problem in problems:
        # (a failure reason is the job's own text: brackets in it are not markup)
        err.print(f"[red]{shown(problem)}[/]", soft_wrap=True, highlight=False)
    return 1 if problems else 0


def cmd_rejected(args: argparse.Namespace) -> int:
    import boto3
    from rich.table import Table
    from rich.text import Text

    from fleetcast.rejected import NoRejectedReportError, rejected_rows
    from fleetcast.terminal import print_table

    if not is_valid_run_id(args.run_id):
        raise UsageError(f"{args.run_id!r} is not a fleetcast run id (see `fleetcast status`)")
    names = _names(args)
    try:
        rejected = rejected_rows(boto3.client("s3"), names["artifacts_bucket"], args.run_id)
    except NoRejectedReportError as error:
        raise UsageError(str(error)) from None
    if args.json:
        print(json.dumps(rejected.model_dump(mode="json"), indent=2))
        return 0
    read = f" of {rejected.rows_read:,} read" if rejected.rows_read is not None else ""
    console.print(
        f"run {rejected.run_id}: {rejected.rows_rejected:,} rows rejected{read} "
        f"(listed in {rejected.report})",
        soft_wrap=True,
        highlight=False,
    )
    for reason in rejected.by_reason:
        console.print(
            f"  {reason.rows:,} {reason.reason}: {reason.message}", soft_wrap=True, highlight=False
        )
    if not rejected.rows:
        return 0
    shown = rejected.rows if args.limit == 0 else rejected.rows[: args.limit]
    columns = [c for c in rejected.rows[0] if c != "message"]
    table = Table(header_style="bold")
    for column in columns:
        # Values as the upload wrote them, whole: a table that cannot hold them is blocks.
        table.add_column(column, no_wrap=True, justify="right" if column == "line" else "left")
    for row in shown:
        # As the upload wrote them: a value with brackets is not markup.
        table.add_row(*(Text(row[column] or "") for column in columns))
    print_table(console, table)
    if len(shown) < len(rejected.rows):
        console.print(
            f"first {len(shown)} of the {len(rejected.rows):,} rows listed: --limit 0 for all, "
            "or --json",
            highlight=False,
        )
    return 0


def _run_to_read(args: argparse.Namespace, s3: Any, bucket: str, registry: ModelRegistry) -> str:
    from fleetcast.exports import latest_registered_run

    if args.run_id is None:
        return latest_registered_run(s3, bucket, registry)
    if not is_valid_run_id(args.run_id):
        raise UsageError(
            f"--run {args.run_id!r} is not a fleetcast run id (see `fleetcast status`)"
        )
    return str(args.run_id)


def _accuracy_summary(names: dict[str, str], run: str | None) -> RunAccuracy | None:
    """The accuracy of ``run``, else of the latest registered run with an export; None
    when no run has one yet."""
    import boto3

    from fleetcast.exports import ExportNotFoundError, latest_registered_run, read_run_table
    from fleetcast.run_report import summarise
    from fleetcast_common.registry import ModelRegistry
    from fleetcast_training.run_exports import ACCURACY

    s3 = boto3.client("s3")
    bucket = names["artifacts_bucket"]
    registry = ModelRegistry(boto3.resource("dynamodb").Table(names["registry_table"]))
    try:
        run_id = run or latest_registered_run(s3, bucket, registry)
        accuracy = read_run_table(s3, bucket, run_id, ACCURACY)
    except ExportNotFoundError:
        if run is None:
            return None
        raise
    return summarise(accuracy, run_id, registry)


def cmd_export(args: argparse.Namespace) -> int:
    import boto3

    from fleetcast.exports import (
        OUTPUT_FORMATS,
        SCHEMAS,
        ExportNotFoundError,
        read_run_table,
        with_live_column,
        write_table,
    )
    from fleetcast_common.registry import ModelRegistry

    assert set(EXPORT_TABLES) == set(SCHEMAS), "fleetcast export's --table choices"
    if args.output.suffix not in OUTPUT_FORMATS:
        raise UsageError(f"-o {args.output}: the file must end in {' or '.join(OUTPUT_FORMATS)}")
    output_file(args.output, "-o")
    names = _names(args)
    s3 = boto3.client("s3")
    bucket = names["artifacts_bucket"]
    registry = ModelRegistry(boto3.resource("dynamodb").Table(names["registry_table"]))
    try:
        run_id = _run_to_read(args, s3, bucket, registry)
        table = with_live_column(read_run_table(s3, bucket, run_id, args.table), run_id, registry)
    except ExportNotFoundError as error:
        raise UsageError(str(error)) from None
    write_table(table, args.output)
    customers = len(set(table.column("customer_id").to_pylist()))
    live = len(set(table.filter(table.column("live")).column("customer_id").to_pylist()))
    console.print(
        f"run {run_id}: {table.num_rows} {args.table} rows of {customers} customers "
        f"({live} live now) -> {args.output}"
    )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import boto3

    from fleetcast.exports import ExportNotFoundError, read_run_table
    from fleetcast.run_report import render_html, summarise, summary_lines
    from fleetcast_common.registry import ModelRegistry
    from fleetcast_training.run_exports import ACCURACY

    if args.output is not None:
        output_file(args.output, "-o")
    names = _names(args)
    s3 = boto3.client("s3")
    bucket = names["artifacts_bucket"]
    registry = ModelRegistry(boto3.resource("dynamodb").Table(names["registry_table"]))
    try:
        run_id = _run_to_read(args, s3, bucket, registry)
        accuracy = read_run_table(s3, bucket, run_id, ACCURACY)
    except ExportNotFoundError as error:
        raise UsageError(str(error)) from None
    summary = summarise(accuracy, run_id, registry)
    output = args.output or Path(f"report-{run_id}.html")
    output.write_text(render_html(summary, accuracy))
    for line in summary_lines(summary):
        console.print(shown(line), highlight=False, soft_wrap=True)
    console.print(f"report -> {shown(output)}")
    return 0


def cmd_redrive_chunks(args: argparse.Namespace) -> int:
    import boto3

    from fleetcast_common.chunk_queue import redrive_failed_chunks
    from fleetcast_common.registry import ModelRegistry

    names = _names(args)
    if not is_valid_run_id(args.run_id):
        raise UsageError(f"{args.run_id!r} is not a fleetcast run id (see `fleetcast status`)")
    registry = ModelRegistry(boto3.resource("dynamodb").Table(names["registry_table"]))
    sent = redrive_failed_chunks(
        args.run_id,
        names["artifacts_bucket"],
        names["job_name_prefix"],
        boto3.client("s3"),
        boto3.client("sqs"),
        registry,
    )
    if not sent:
        console.print(f"run {args.run_id}: no failed registration chunk to re-drive")
    else:
        console.print(
            f"run {args.run_id}: {len(sent)} registration chunks sent again "
            f"(numbers {', '.join(map(str, sent))}); follow them with `fleetcast status`"
        )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from fleetcast.demo import run_demo

    return run_demo(
        customers=args.customers,
        instances=args.instances,
        days=args.days,
        state_dir=args.state_dir,
        console=err if args.json else console,
        as_json=args.json,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetcast", description=plain(__doc__))
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"local stack state folder (default {default_state_dir()})",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what the local stack does"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    add_up_command(commands)
    env = commands.add_parser("env", help="print export lines for standard AWS clients")
    env.set_defaults(run=cmd_env)
    _add_readings_commands(commands)
    _add_run_commands(commands)
    _add_stack_commands(commands)
    add_serving_commands(commands)
    add_cost_commands(commands)
    return parser


def _add_readings_commands(commands: Any) -> None:
    """``generate`` and ``upload``: readings in."""
    generate = commands.add_parser("generate", help="write synthetic meter readings")
    generate.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("readings.csv.gz"),
        help="the file to write, .csv or .csv.gz, in a folder that exists (default: %(default)s)",
    )
    generate.add_argument(
        "--customers", type=int, default=1000, help="how many customers (default: %(default)s)"
    )
    generate.add_argument(
        "--days", type=int, default=730, help="days of readings each (default: %(default)s)"
    )
    generate.add_argument(
        "--start",
        default="2022-01-01",
        metavar="YYYY-MM-DD",
        help="the first day of readings (default: %(default)s)",
    )
    generate.add_argument(
        "--readings-per-day",
        type=int,
        default=1,
        help="readings a day and customer: 1 (daily totals), 24 (hourly), 48, 96 "
        "(default: %(default)s)",
    )
    generate.add_argument(
        "--customer-offset", type=int, default=0, help="first customer id (default: %(default)s)"
    )
    generate.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed: the same seed writes the same readings (default: %(default)s)",
    )
    generate.add_argument(
        "--holidays",
        metavar="COUNTRY[-SUBDIVISION]",
        help="lower use 20-40%% on this calendar's public holidays, e.g. US or DE-BY",
    )
    generate.set_defaults(run=cmd_generate)

    upload = commands.add_parser("upload", help="drop files into the raw bucket")
    upload.add_argument(
        "files", nargs="+", type=Path, metavar="FILE", help="CSV files (.csv or .csv.gz)"
    )
    upload.add_argument(
        "--prefix",
        default=layout.INCOMING_PREFIX,
        help=f"key prefix, under {layout.INCOMING_PREFIX} (the only one processed); "
        f"{layout.INCOMING_METADATA_PREFIX} for customer metadata files",
    )
    upload.set_defaults(run=cmd_upload)


def _add_run_commands(commands: Any) -> None:
    """``status``, ``rejected``, ``export``, ``report``, ``redrive-chunks``: what a run did."""
    status = commands.add_parser("status", help="each upload's jobs and customer counts")
    status.add_argument(
        "--json", action="store_true", help="print every run's status as JSON, not a table"
    )
    status.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="first wait, up to SECONDS, until there is a run and every run has finished; "
        "exit 1 if one failed or left customers failed",
    )
    status.set_defaults(run=cmd_status)

    rejected = commands.add_parser(
        "rejected",
        help="the rows a run's processing rejected: line numbers, reasons, counts per reason",
        description="Read from the run's report/rejected.csv in the artifacts bucket, which "
        "lists the first 1000 rows of each reason (the counts cover every row).",
    )
    rejected.add_argument("run_id", metavar="RUN", help="run id (see `fleetcast status`)")
    rejected.add_argument(
        "--limit",
        type=int,
        default=50,
        help="rows to print, 0 for every row listed (default: %(default)s)",
    )
    rejected.add_argument(
        "--json", action="store_true", help="print the counts and every row listed as JSON"
    )
    rejected.set_defaults(run=cmd_rejected)

    export = commands.add_parser(
        "export",
        help="fetch a run's forecast export (or accuracy table), with a live column",
        description="Every trained customer's forecast from one run, as the training job "
        "exported it, and whether that run's model is the customer's live one now.",
    )
    export.add_argument("--run", dest="run_id", help="run id (default: the latest registered run)")
    export.add_argument(
        "--table", choices=EXPORT_TABLES, default=EXPORT_TABLES[0], help="default: %(default)s"
    )
    export.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("forecasts.parquet"),
        help="*.parquet or *.csv, in a folder that exists (default: %(default)s)",
    )
    export.set_defaults(run=cmd_export)

    report = commands.add_parser("report", help="write a run's accuracy report as one HTML file")
    report.add_argument("--run", dest="run_id", help="run id (default: the latest registered run)")
    report.add_argument(
        "-o", "--output", type=Path, help="in a folder that exists (default: report-<run>.html)"
    )
    report.set_defaults(run=cmd_report)

    redrive = commands.add_parser(
        "redrive-chunks",
        help="send a run's failed registration chunks again, once their cause is fixed",
        description="A chunk whose every delivery failed is dead-lettered, and nothing sends "
        "it again (not a restart either) until this command: `fleetcast status` lists such "
        "chunks with why they failed.",
    )
    redrive.add_argument(
        "run_id", metavar="RUN", help="the run whose chunks to send again (see `fleetcast status`)"
    )
    redrive.set_defaults(run=cmd_redrive_chunks)


def _add_stack_commands(commands: Any) -> None:
    """``demo`` and ``images``: a whole local run, and a deploy's images."""
    demo = commands.add_parser(
        "demo", help="start the stack, generate, upload, follow the chain, stop"
    )
    demo.add_argument(
        "--customers", type=int, default=1000, help="customers to generate (default: %(default)s)"
    )
    demo.add_argument(
        "--instances",
        type=int,
        default=2,
        help="training instances the job shards the customers over (default: %(default)s)",
    )
    demo.add_argument(
        "--days", type=int, default=730, help="days of readings each (default: %(default)s)"
    )
    demo.add_argument(
        "--json",
        action="store_true",
        help="print the result as one line of JSON (stages, run, paths); progress to stderr",
    )
    demo.set_defaults(run=cmd_demo)

    images_command = commands.add_parser(
        "images",
        help="build the images, push them to ECR, write their URIs to samconfig.toml",
        description=plain(images.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    images.add_arguments(images_command)
    images_command.set_defaults(run=images.run)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # What the stack logs on `fleetcast up`'s console may quote data (a record, a key).
    console_log = logging.StreamHandler()
    console_log.setFormatter(ControlsEscaped("%(asctime)s %(name)s %(message)s"))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, handlers=[console_log]
    )
    try:
        result: int = args.run(args)
    except UsageError as error:
        err.print(f"[red]error:[/] {shown(error)}", soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
