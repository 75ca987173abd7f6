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
from typing import Any

import boto3

from fleetcast import images
from fleetcast.cost_cli import add_cost_commands
from fleetcast.embedded.stack import (
    StackInfo,
    default_state_dir,
)
from fleetcast.exports import (
    OUTPUT_FORMATS,
    SCHEMAS,
    ExportNotFoundError,
    latest_registered_run,
    read_run_table,
    with_live_column,
    write_table,
)
from fleetcast.run_report import RunAccuracy, render_html, summarise, summary_lines
from fleetcast.serving_cli import add_serving_commands
from fleetcast.status import RunStatus, pipeline_status
from fleetcast.status_table import status_table
from fleetcast.terminal import ControlsEscaped, UsageError, console, err, shown
from fleetcast.up_cli import add_up_command
from fleetcast_common.chunk_queue import redrive_failed_chunks
from fleetcast_common.registry import ModelRegistry
from fleetcast_common.upload_queue import UploadQueue
from fleetcast_contracts import layout
from fleetcast_contracts.ids import is_valid_run_id
from fleetcast_training.run_exports import ACCURACY, FORECASTS

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


def _statuses(names: dict[str, str]) -> list[RunStatus]:
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
    names = _names(args)
    runs = _statuses(names)
    if args.wait is not None:
        # Until there is a run and nothing more will happen to any of them.
        deadline = time.monotonic() + args.wait
        with console.status("waiting for the runs to finish"):
            while not (runs and all(run.done for run in runs)):
                if time.monotonic() > deadline:
                    err.print(f"[red]still running after {args.wait:.0f} s[/]")
                    console.print(status_table(runs))
                    return 1
                time.sleep(1)
                runs = _statuses(names)
    if args.json:
        print(json.dumps([run.model_dump(mode="json") for run in runs], indent=2))
    elif not runs:
        console.print("no uploads yet: `fleetcast upload FILE`")
    else:
        console.print(status_table(runs))
        summary = _accuracy_summary(names, None)
        if summary is not None:
            for line in summary_lines(summary):
                console.print(shown(line), highlight=False)
    return 0


def _run_to_read(args: argparse.Namespace, s3: Any, bucket: str, registry: ModelRegistry) -> str:
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
    names = _names(args)
    s3 = boto3.client("s3")
    bucket = names["artifacts_bucket"]
    registry = ModelRegistry(boto3.resource("dynamodb").Table(names["registry_table"]))
    if args.output.suffix not in OUTPUT_FORMATS:
        raise UsageError(f"-o {args.output}: the file must end in {' or '.join(OUTPUT_FORMATS)}")
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
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_html(summary, accuracy))
    for line in summary_lines(summary):
        console.print(shown(line), highlight=False)
    console.print(f"report -> {shown(output)}")
    return 0


def cmd_redrive_chunks(args: argparse.Namespace) -> int:
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
        console=console,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fleetcast", description=__doc__)
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

    generate = commands.add_parser("generate", help="write synthetic meter readings")
    generate.add_argument("-o", "--output", type=Path, default=Path("readings.csv.gz"))
    generate.add_argument("--customers", type=int, default=1000)
    generate.add_argument("--days", type=int, default=730)
    generate.add_argument("--start", default="2022-01-01")
    generate.add_argument("--readings-per-day", type=int, default=1)
    generate.add_argument("--customer-offset", type=int, default=0, help="first customer id")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument(
        "--holidays",
        metavar="COUNTRY[-SUBDIVISION]",
        help="lower use 20-40%% on this calendar's public holidays, e.g. US or DE-BY",
    )
    generate.set_defaults(run=cmd_generate)

    upload = commands.add_parser("upload", help="drop files into the raw bucket")
    upload.add_argument("files", nargs="+", type=Path)
    upload.add_argument(
        "--prefix",
        default=layout.INCOMING_PREFIX,
        help=f"key prefix, under {layout.INCOMING_PREFIX} (the only one processed); "
        f"{layout.INCOMING_METADATA_PREFIX} for customer metadata files",
    )
    upload.set_defaults(run=cmd_upload)

    status = commands.add_parser("status", help="each upload's jobs and customer counts")
    status.add_argument("--json", action="store_true")
    status.add_argument(
        "--wait",
        type=float,
        metavar="SECONDS",
        help="first wait, up to SECONDS, until there is a run and every run has finished",
    )
    status.set_defaults(run=cmd_status)

    export = commands.add_parser(
        "export",
        help="fetch a run's forecast export (or accuracy table), with a live column",
        description="Every trained customer's forecast from one run, as the training job "
        "exported it, and whether that run's model is the customer's live one now.",
    )
    export.add_argument("--run", dest="run_id", help="run id (default: the latest registered run)")
    export.add_argument(
        "--table", choices=sorted(SCHEMAS), default=FORECASTS, help="default: forecasts"
    )
    export.add_argument(
        "-o", "--output", type=Path, default=Path("forecasts.parquet"), help="*.parquet or *.csv"
    )
    export.set_defaults(run=cmd_export)

    report = commands.add_parser("report", help="write a run's accuracy report as one HTML file")
    report.add_argument("--run", dest="run_id", help="run id (default: the latest registered run)")
    report.add_argument("-o", "--output", type=Path, help="default: report-<run>.html")
    report.set_defaults(run=cmd_report)

    redrive = commands.add_parser(
        "redrive-chunks",
        help="send a run's failed registration chunks again, once their cause is fixed",
        description="A chunk whose every delivery failed is dead-lettered, and nothing sends "
        "it again (not a restart either) until this command: `fleetcast status` lists such "
        "chunks with why they failed.",
    )
    redrive.add_argument("run_id", metavar="RUN")
    redrive.set_defaults(run=cmd_redrive_chunks)

    demo = commands.add_parser(
        "demo", help="start the stack, generate, upload, follow the chain, stop"
    )
    demo.add_argument("--customers", type=int, default=1000)
    demo.add_argument("--instances", type=int, default=2)
    demo.add_argument("--days", type=int, default=730)
    demo.set_defaults(run=cmd_demo)

    images_command = commands.add_parser(
        "images",
        help="build the images, push them to ECR, write their URIs to samconfig.toml",
        description=images.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    images.add_arguments(images_command)
    images_command.set_defaults(run=images.run)

    add_serving_commands(commands)
    add_cost_commands(commands)
    return parser


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
        err.print(f"[red]error:[/] {shown(error)}")
        return 2
    except KeyboardInterrupt:
        return 130
    return result


if __name__ == "__main__":
    sys.exit(main())
