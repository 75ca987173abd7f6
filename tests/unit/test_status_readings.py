"""``fleetcast status`` says what a run's processing did with the history: readings it
replaced (and changed), and periods sent to training but left out of fitting."""

from __future__ import annotations

from rich.console import Console

from fleetcast.status import RunStatus, StageJob
from fleetcast.status_table import status_table
from fleetcast_contracts.stages import PIPELINE, PROCESSING, TRAINING


def _rendered(run: RunStatus) -> str:
    console = Console(width=400, record=True)
    console.print(status_table([run]))
    return console.export_text()


def test_status_shows_replaced_readings_and_periods_left_out_of_fitting() -> None:
    run = RunStatus(
        run_id="q0000000001-20261203t120000",
        jobs={PROCESSING.name: StageJob(name="job", status="Completed")},
        rows_read=120,
        rows_rejected=0,
        readings_replaced=24,
        readings_changed=2,
        periods_incomplete=3,
        periods_inactive=30,
        periods_implausible=2,
    )
    shown = _rendered(run)
    assert "24 stored readings replaced, 2 changed (changed.csv)" in shown
    assert "not fitted: 3 incomplete, 30 inactive periods" in shown
    assert "not fitted: 2 implausible (a meter's glitch; the training log names them)" in shown


def test_status_says_nothing_of_them_when_there_are_none() -> None:
    run = RunStatus(
        run_id="q0000000001-20261203t120000",
        jobs={PROCESSING.name: StageJob(name="job", status="Completed")},
        rows_read=120,
        rows_rejected=0,
        readings_replaced=0,
        readings_changed=0,
        periods_incomplete=0,
        periods_inactive=0,
        periods_implausible=0,
    )
    shown = _rendered(run)
    assert "replaced" not in shown and "not fitted" not in shown


def test_the_table_shows_each_stage_of_the_pipeline_in_order_with_its_job() -> None:
    run = RunStatus(
        run_id="q0000000001-20261203t120000",
        jobs={
            PROCESSING.name: StageJob(name="p", status="Completed"),
            TRAINING.name: StageJob(name="t", status="Failed", failure="killed by SIGKILL"),
        },
    )
    table = status_table([run])
    headers = [column.header for column in table.columns]
    assert [h for h in headers if h in {s.name for s in PIPELINE}] == [s.name for s in PIPELINE]
    shown = _rendered(run)
    assert "Failed" in shown and "killed by SIGKILL" in shown
    # And the run's failure is its first failed job's, and it did not complete
    assert (run.failure, run.completed) == ("killed by SIGKILL", False)
    assert run.job(TRAINING).status == "Failed"


def test_a_stage_not_started_has_no_job() -> None:
    run = RunStatus(
        run_id="q0000000001-20261203t120000",
        jobs={PROCESSING.name: StageJob(name="p", status="InProgress")},
    )
    assert run.job(TRAINING) == StageJob() and not run.completed and not run.done
