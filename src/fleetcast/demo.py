"""``fleetcast demo``: the whole chain on the embedded local stack, followed live."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from fleetcast.cost_cli import cost_report_for_demo
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.serving_cli import demo_forecast
from fleetcast.status import RunStatus, follow_run, run_ids, wait_for_new_run
from fleetcast.terminal import print_table, shown
from fleetcast_contracts.stages import PROCESSING, TRAINING

TIMEOUT_SECONDS = 900


def follow_with_progress(
    stack: EmbeddedStack,
    run_id: str,
    console: Console,
    expected_customers: int,
    timeout: float = TIMEOUT_SECONDS,
) -> RunStatus:
    """Follow the run with a progress bar per stage until nothing more will happen to it."""
    assert stack.info is not None
    info = stack.info
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        processing = progress.add_task("processing", total=1)
        training = progress.add_task("training", total=expected_customers, start=False)
        registering = progress.add_task("registering", total=expected_customers, start=False)

        def show(status: RunStatus) -> None:
            if status.job(PROCESSING).status != "InProgress":
                progress.update(processing, completed=1)
            if status.customers_processed:
                progress.update(training, total=status.customers_processed)
                progress.update(registering, total=status.customers_processed)
            if status.job(TRAINING).name:
                progress.start_task(training)
                progress.update(
                    training,
                    completed=status.customers_trained
                    if status.customers_trained is not None
                    else status.customers_checkpointed,
                )
            if status.job(TRAINING).status == "Completed":
                progress.start_task(registering)
                if status.customers_trained is not None:
                    progress.update(registering, total=status.customers_trained)
                progress.update(registering, completed=status.customers_decided)

        return follow_run(
            run_id,
            info.job_name_prefix,
            info.artifacts_bucket,
            stack.client("sagemaker"),
            stack.client("s3"),
            stack.resource("dynamodb").Table(info.registry_table),
            timeout,
            on_status=show,
        )


def run_demo(
    customers: int,
    instances: int,
    days: int,
    state_dir: Path | None,
    console: Console,
    as_json: bool = False,
) -> int:
    """The whole pipeline on a local stack of its own; with ``as_json``, what it printed
    as one line of JSON on stdout (``console`` then stderr's)."""
    from fleetcast import datagen

    stages: list[tuple[str, float, str]] = []
    began = time.perf_counter()
    with console.status("starting the local stack (moto server, functions, SageMaker runner)"):
        stack = EmbeddedStack(
            state_dir=state_dir, port=0, parameters={"TrainingInstanceCount": str(instances)}
        )
        info = stack.start()
    stages.append(("start local stack", time.perf_counter() - began, info.endpoint_url))
    try:
        os.environ.update(stack.client_environment())
        data = Path(info.state_dir) / "demo" / "readings.csv.gz"
        data.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with console.status(f"generating {customers:,} customers x {days} days"):
            rows = datagen.write_readings(data, customers=customers, days=days)
        stages.append(
            (
                "generate data",
                time.perf_counter() - started,
                f"{rows:,} readings, {data.stat().st_size / 1e6:.1f} MB",
            )
        )

        started = time.perf_counter()
        key = f"incoming/{data.name}"
        sagemaker = stack.client("sagemaker")
        known = run_ids(info.job_name_prefix, sagemaker)
        stack.client("s3").upload_file(str(data), info.raw_bucket, key)
        stages.append(("upload", time.perf_counter() - started, f"s3://{info.raw_bucket}/{key}"))

        run_id = wait_for_new_run(info.job_name_prefix, sagemaker, known)
        status = follow_with_progress(stack, run_id, console, expected_customers=customers)
        stages += _run_stages(status)
        stages.append(("total", time.perf_counter() - began, ""))
        _print_stages(stages, console)
        result: dict[str, object] = {
            "run_id": run_id,
            "completed": status.completed,
            "failure": status.failure,
            "stages": [
                {"stage": name, "seconds": round(seconds, 3), "detail": detail}
                for name, seconds, detail in stages
            ],
            "logs": str(Path(info.state_dir) / "logs"),
            "job_logs": str(Path(info.state_dir) / "jobs"),
        }
        if not status.completed:
            console.print(f"[red]the run did not complete:[/] {shown(status.failure)}")
            _print_json(result, as_json)
            return 1
        console.print(
            f"logs: {Path(info.state_dir) / 'logs'} (functions), {Path(info.state_dir) / 'jobs'} (SageMaker jobs)"
        )
        plot = demo_forecast(info, stack.client("s3"), console)
        email = cost_report_for_demo(stack, console)
        result |= {"forecast_chart": plot and str(plot), "cost_report_outbox": str(email)}
        _print_json(result, as_json)
        return 0
    finally:
        with console.status("stopping the local stack"):
            stack.stop()


def _run_stages(status: RunStatus) -> list[tuple[str, float, str]]:
    """The run's stages as the demo's table shows them: each job's seconds and figures."""
    return [
        (
            "processing",
            status.job(PROCESSING).seconds or 0.0,
            f"{status.rows_read or 0:,} rows, {status.rows_rejected or 0} rejected, {status.customers_processed or 0} customers",
        ),
        (
            "training",
            status.job(TRAINING).seconds or 0.0,
            f"{status.job(TRAINING).instances} instances, {status.customers_trained or 0} trained, {status.customers_failed or 0} failed",
        ),
        (
            "registration",
            _since(status.job(TRAINING).ended_at),
            f"{status.customers_registered} live",
        ),
    ]


def _print_stages(stages: list[tuple[str, float, str]], console: Console) -> None:
    table = Table(title="fleetcast demo", header_style="bold")
    table.add_column("stage", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("detail")
    for name, seconds, detail in stages:
        table.add_row(name, f"{seconds:.1f}", detail)
    print_table(console, table)


def _print_json(result: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)


def _since(moment: datetime | None) -> float:
    return 0.0 if moment is None else (datetime.now(UTC) - moment).total_seconds()
