"""``fleetcast up``: the embedded local stack in the foreground, with the template
parameters a ``sam deploy`` would take (``--parameter-overrides``, ``--config-env``)."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from typing import Any

from rich.table import Table

from fleetcast.embedded.info import DEFAULT_API_PORT, DEFAULT_PORT, StackInfo, repo_root
from fleetcast.embedded.parameters import ParameterError, parse_overrides, samconfig_overrides
from fleetcast.terminal import UsageError, console, print_table, shown


def cmd_up(args: argparse.Namespace) -> int:
    # Here, not at the top: `fleetcast --help` and the other commands never load the stack.
    from fleetcast.embedded import keeping, lease, persistence
    from fleetcast.embedded.gateway import PortTakenError
    from fleetcast.embedded.serving import ServingOptions
    from fleetcast.embedded.stack import EmbeddedStack

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    with console.status("starting the local stack"):
        try:
            stack = EmbeddedStack(
                state_dir=args.state_dir,
                port=args.port,
                parameters=up_parameters(args),
                serving=ServingOptions(api_port=args.api_port),
                keep_state=True,
                iam=not args.no_iam,
            )
        except ParameterError as error:
            raise UsageError(f"{error} (the stack was not started)") from None
        if args.fresh:
            try:  # never the folder of a stack that runs
                lease.refuse_if_held(stack.state_dir)
            except RuntimeError as error:
                console.print(f"[red]{error}[/]")
                return 1
            aside = persistence.set_aside(
                stack.snapshot_path, stack.state_dir / keeping.OBJECTS_FOLDER
            )
            if aside:
                console.print(
                    f"starting empty; the last state is in {aside} (its objects' files "
                    f"beside it, in {keeping.OBJECTS_FOLDER}.{aside.suffix.lstrip('.')})"
                )
        try:
            info = stack.start()
        except (RuntimeError, PortTakenError) as error:
            console.print(f"[red]{error}[/]")
            return 1
    try:
        _print_stack(info, args.json)
        for notice in stack.notices:
            console.print(shown(notice))
        console.print(
            'In another shell: [bold]eval "$(fleetcast env)"[/] then use the AWS CLI or boto3. Ctrl-C stops.'
        )
        # Ctrl-C stops it even where it started with SIGINT ignored, as a shell without
        # job control starts `fleetcast up &` (Python then raises no KeyboardInterrupt).
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        while not stopping.wait(0.5):
            pass
    finally:
        with console.status("stopping"):
            stack.notices.clear()
            stack.stop()
    for notice in stack.notices:
        console.print(shown(notice))
    console.print("local stack stopped")
    return 0


def _print_stack(info: StackInfo, as_json: bool) -> None:
    """Where the stack's endpoints, buckets, table and logs are: a table, or one JSON line."""
    # (label, key in --json, value)
    rows = [
        ("AWS APIs (moto + SageMaker runner)", "endpoint_url", info.endpoint_url),
        ("raw bucket (drop CSVs under incoming/)", "raw_bucket", info.raw_bucket),
        ("artifacts bucket", "artifacts_bucket", info.artifacts_bucket),
        ("model registry table", "registry_table", info.registry_table),
    ]
    for label, key, variable in (
        ("forecast API (x-api-key: $FLEETCAST_API_KEY)", "api_url", "FLEETCAST_API_URL"),
        ("multi-model endpoint", "endpoint_name", "FLEETCAST_ENDPOINT_NAME"),
        ("cost-report outbox", "outbox", "FLEETCAST_OUTBOX"),
    ):
        if variable in info.extra:
            rows.append((label, key, info.extra[variable]))
    rows.append(("function logs", "function_logs", str(Path(info.state_dir) / "logs")))
    rows.append(("job logs", "job_logs", str(Path(info.state_dir) / "jobs")))
    if as_json:
        print(json.dumps({key: value for _, key, value in rows}), flush=True)
    else:
        table = Table(title="fleetcast local stack (127.0.0.1 only)", show_header=False)
        # Names and paths whole, to copy: as label and value lines where they do not fit.
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        for label, _, value in rows:
            table.add_row(label, value)
        print_table(console, table)


def up_parameters(args: argparse.Namespace) -> dict[str, str]:
    """The template parameters ``fleetcast up`` gives the stack, as ``sam deploy`` takes
    them: ``--config-env``'s samconfig.toml overrides, then ``--parameter-overrides``
    (later wins), then ``--instances`` when given."""
    values: dict[str, str] = {}
    if args.config_env:
        values.update(
            samconfig_overrides(args.samconfig or repo_root() / "samconfig.toml", args.config_env)
        )
    values.update(parse_overrides(args.parameter_overrides or []))
    if args.instances is not None:
        values["TrainingInstanceCount"] = str(args.instances)
    elif "TrainingInstanceCount" not in values:
        # The local stack's own default: two instances exercise sharding on two cores.
        values["TrainingInstanceCount"] = "2"
    return values


def add_up_command(commands: Any) -> None:
    up = commands.add_parser("up", help="start the embedded local stack in the foreground")
    up.add_argument(
        "--port",
        type=int,
        help=f"AWS APIs' port (default {DEFAULT_PORT}, or a free one if taken; 0: any free)",
    )
    up.add_argument(
        "--api-port",
        type=int,
        help=f"forecast API's port (default {DEFAULT_API_PORT}, or a free one if taken; 0: any free)",
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="start empty: set the kept buckets, tables and jobs aside (renamed, not deleted)",
    )
    up.add_argument(
        "--instances",
        type=int,
        help="training instances per job (TrainingInstanceCount; default 2, or --config-env's)",
    )
    up.add_argument(
        "--parameter-overrides",
        nargs="+",
        metavar="KEY=VALUE",
        help="template parameters, as `sam deploy --parameter-overrides` takes them; each is "
        "checked against the template's AllowedValues, AllowedPattern and bounds",
    )
    up.add_argument(
        "--config-env",
        metavar="NAME",
        help="start from this samconfig.toml environment's parameter_overrides (e.g. prod); "
        "--parameter-overrides go on top",
    )
    up.add_argument(
        "--no-iam", action="store_true", help="allow every call (template.yaml's IAM is enforced)"
    )
    up.add_argument(
        "--json",
        action="store_true",
        help="print where everything is as one line of JSON, not a table",
    )
    up.add_argument("--samconfig", type=Path, default=None, help=argparse.SUPPRESS)
    up.set_defaults(run=cmd_up)
