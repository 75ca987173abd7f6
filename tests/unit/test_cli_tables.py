"""Tables read whole when piped or narrow (issue 40): `fleetcast status | cat` showed
`q000…` and `sour…`, so a run id could not be copied; `cost-report` piped showed `$72.…`;
the `up` banner cut the outbox path. A table that cannot hold its ids, paths and amounts
whole is printed as one block per row, each value whole on its line."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
from typing import Any

import pytest
from rich.console import Console

from fleetcast import cli, up_cli
from fleetcast.cost_cli import print_analysis
from fleetcast.embedded.info import StackInfo
from fleetcast.status import RunStatus, StageJob, TrainingFailure
from fleetcast.status_table import print_status
from fleetcast.terminal import print_table
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_cost.models import Anomaly, CostAnalysis, Recommendation, UsageHistory

RUN_ID = "q0000000042-20240131t235959"
BUCKET = "fleetcast-artifacts-123456789012-us-east-1"
REPORT = f"s3://{BUCKET}/runs/{RUN_ID}/report/rejected.csv"


def _run(**fields: Any) -> RunStatus:
    jobs = {
        PROCESSING.name: StageJob(name=f"fleetcast-processing-{RUN_ID}", status="Completed"),
        TRAINING.name: StageJob(name=f"fleetcast-training-{RUN_ID}", status="Completed"),
    }
    completed: dict[str, Any] = {
        "run_id": RUN_ID,
        "source": "readings-of-the-whole-fleet-2024.csv.gz",
        "jobs": jobs,
        "rows_read": 240,
        "rows_rejected": 120,
        "rejected_by_reason": {"invalid_consumption": 100, "invalid_timestamp": 15, "x": 5},
        "rejected_report": REPORT,
        "customers_processed": 10,
        "customers_trained": 10,
        "customers_failed": 0,
        "customers_registered": 10,
        "registered": True,
        "chunks_done": 1,
        "chunks_total": 1,
    }
    return RunStatus(**{**completed, **fields})


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_piped_status_at_60_columns_keeps_the_run_id_and_the_s3_path_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run with rejected rows, and `fleetcast status` piped at 60 columns
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(cli, "_names", lambda args: {})
    monkeypatch.setattr(cli, "_statuses", lambda names, summaries: [_run()])
    monkeypatch.setattr(cli, "_accuracy_summary", lambda names, run: None)
    # When it prints
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    # Then the run id and the report's S3 path are each whole on a line, not cut or folded
    assert any(RUN_ID in line for line in out.splitlines()), out
    assert any(REPORT in line for line in out.splitlines()), out
    assert "…" not in out
    # And the top reasons stand beside the counts
    assert "rejected: 100 invalid_consumption, 15 invalid_timestamp, 5 x" in out


def test_a_wide_console_gets_the_table() -> None:
    out = Console(file=io.StringIO(), width=400)
    print_status(out, [_run()])
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "┃ order" in text and RUN_ID in text and REPORT in text


def test_status_table_falls_back_to_one_block_per_run_when_narrow() -> None:
    out = Console(file=io.StringIO(), width=60)
    print_status(out, [_run(), _run(run_id="q0000000043-20240201t000000")])
    lines = _lines(out.file.getvalue())  # type: ignore[attr-defined]
    assert f"run: {RUN_ID}" in lines
    assert "run: q0000000043-20240201t000000" in lines
    assert "source: readings-of-the-whole-fleet-2024.csv.gz" in lines


def _stack_info(state_dir: str) -> StackInfo:
    return StackInfo(
        endpoint_url="http://127.0.0.1:4599",
        stack_name="fleetcast-local",
        raw_bucket="fleetcast-raw-123456789012-us-east-1",
        artifacts_bucket=BUCKET,
        registry_table="fleetcast-local-ModelRegistryTable-0123456789AB",
        job_name_prefix="fleetcast",
        state_dir=state_dir,
        extra={
            "FLEETCAST_API_URL": "http://127.0.0.1:3000/v1",
            "FLEETCAST_OUTBOX": f"{state_dir}/outbox/cost-report",
        },
    )


def test_the_up_banner_keeps_every_path_whole_at_60_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a stack whose state folder is deep (the banner cut the outbox path)
    state_dir = "/home/someone/projects/fleetcast-checkout/.fleetcast"
    info = _stack_info(state_dir)
    out = Console(file=io.StringIO(), width=60)
    monkeypatch.setattr(up_cli, "console", out)
    # When `fleetcast up` prints where everything is, piped at 60 columns
    up_cli._print_stack(info, as_json=False)
    lines = _lines(out.file.getvalue())  # type: ignore[attr-defined]
    # Then each name and path is whole on its line, after its label
    assert f"cost-report outbox: {state_dir}/outbox/cost-report" in lines, lines
    assert f"artifacts bucket: {BUCKET}" in lines, lines
    assert f"function logs: {state_dir}/logs" in lines, lines
    assert not any("…" in line for line in lines), lines


def test_up_json_is_one_line_with_what_the_banner_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    state_dir = "/home/someone/projects/fleetcast-checkout/.fleetcast"
    up_cli._print_stack(_stack_info(state_dir), as_json=True)
    (line,) = capsys.readouterr().out.splitlines()
    where = json.loads(line)
    assert where["outbox"] == f"{state_dir}/outbox/cost-report"
    assert where["artifacts_bucket"] == BUCKET
    assert where["api_url"] == "http://127.0.0.1:3000/v1"
    assert where["job_logs"] == f"{state_dir}/jobs"


def test_cost_report_amounts_are_never_cut() -> None:
    # Given an analysis with an anomaly and a recommendation of large amounts
    day = dt.date(2024, 3, 5)
    analysis = CostAnalysis(
        report_date=day,
        start=day - dt.timedelta(days=30),
        end=day,
        total_cost_usd=1_234_567.89,
        anomalies=(
            Anomaly(
                usage_type="USE1-Train:ml.c5.xlarge",
                date=day - dt.timedelta(days=2),
                actual=72_345.67,
                expected=1_234.5,
                impact=71_111.17,
                kind="spike",
            ),
        ),
        recommendations=(
            Recommendation(
                kind="use_spot",
                evidence="on demand all month",
                monthly_saving_usd=65_432.1,
                instance_type="ml.c5.xlarge",
                action="use managed spot training",
            ),
        ),
        monthly_saving_usd=65_432.1,
        history=UsageHistory(start=day - dt.timedelta(days=30), end=day),
    )
    # When `cost-report` prints it piped at 60 columns
    out = Console(file=io.StringIO(), width=60)
    print_analysis(out, analysis, "a saved file")
    text = out.file.getvalue()  # type: ignore[attr-defined]
    # Then every amount and the usage type are whole
    for whole in ("$72,345.67", "$1,234.50", "$65,432.10", "USE1-Train:ml.c5.xlarge"):
        assert whole in text, text
    assert "…" not in text, text


def test_every_command_that_prints_a_table_has_json() -> None:
    (subparsers,) = (
        action
        for action in cli.build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    for name in ("status", "rejected", "forecast", "cost-report", "up", "demo"):
        assert "--json" in subparsers.choices[name].format_help(), name


@pytest.mark.parametrize(
    ("run", "code", "said"),
    [
        (_run(), 0, None),
        (
            _run(
                jobs={
                    PROCESSING.name: StageJob(
                        status="Failed", failure="AlgorithmError: the upload is empty"
                    )
                }
            ),
            1,
            f"run {RUN_ID} failed: AlgorithmError: the upload is empty",
        ),
        (
            _run(
                customers_failed=2,
                failures=[
                    TrainingFailure(customer_id="short-a", kind="too_few_rows", reason="has 20"),
                    TrainingFailure(customer_id="short-b", kind="too_few_rows", reason="has 20"),
                ],
            ),
            1,
            f"run {RUN_ID} left 2 customers failed (first short-a: has 20)",
        ),
    ],
    ids=["completed", "failed", "customers-failed"],
)
def test_status_wait_exits_non_zero_when_a_run_failed_and_says_which(
    run: RunStatus,
    code: int,
    said: str | None,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a run that has finished as the case says
    monkeypatch.setattr(cli, "_names", lambda args: {})
    monkeypatch.setattr(cli, "_statuses", lambda names, summaries: [run])
    monkeypatch.setattr(cli, "_accuracy_summary", lambda names, run_id: None)
    assert run.done
    # When `fleetcast status --wait` has waited for it
    assert cli.main(["status", "--wait", "5", "--json"]) == code
    # Then its exit status says whether it failed, and standard error which run and why
    err = capsys.readouterr().err
    if said is None:
        assert err == ""
    else:
        assert said in err, err


def test_status_wait_does_not_fail_for_a_run_that_had_failed_before_it_waited(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an old failed run, and a new one still training when the wait starts
    old = _run(
        run_id="q0000000041-20240130t000000",
        jobs={PROCESSING.name: StageJob(status="Failed", failure="AlgorithmError: empty")},
    )
    training = {
        PROCESSING.name: StageJob(status="Completed"),
        TRAINING.name: StageJob(status="InProgress"),
    }
    polls = iter([[old, _run(jobs=training, registered=False)], [old, _run()]])
    monkeypatch.setattr(cli, "_names", lambda args: {})
    monkeypatch.setattr(cli, "_statuses", lambda names, summaries: next(polls))
    monkeypatch.setattr(cli, "_accuracy_summary", lambda names, run_id: None)
    monkeypatch.setattr(cli.time, "sleep", lambda seconds: None)
    # When `status --wait` waits for the new one, which completes
    assert cli.main(["status", "--wait", "60", "--json"]) == 0
    # Then the old failure, not waited for, fails nothing and is not reported
    assert capsys.readouterr().err == ""


def test_a_forecast_table_keeps_every_value_whole_when_narrow() -> None:
    from fleetcast.serving_cli import forecast_table

    forecast = {
        "quantiles": [0.1, 0.5, 0.9],
        "forecast": [
            {
                "ds": "2024-01-01",
                "yhat": 123456.7,
                "yhat_lower": 120000.1,
                "yhat_upper": 130000.9,
                "quantiles": {"0.1": 121000.0, "0.5": 123400.5, "0.9": 129999.9},
            }
        ],
    }
    out = Console(file=io.StringIO(), width=40)
    print_table(out, forecast_table(forecast))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    for whole in ("2024-01-01", "123,456.7", "120,000.1", "130,000.9", "129,999.9"):
        assert whole in text, text
    assert "…" not in text
