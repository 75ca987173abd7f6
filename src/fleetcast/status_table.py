"""``fleetcast status`` as a table: one row per upload, from its run's status (one block
per upload where the table would not fit whole)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from fleetcast.status import RunStatus, StageJob
from fleetcast.terminal import print_table, shown
from fleetcast_contracts.stages import PIPELINE, PROCESSING


def _job_cell(job: StageJob) -> str:
    cell = shown(job.status or "-") + (
        f" ({shown(job.secondary_status)})"
        if job.secondary_status and job.status == "InProgress"
        else ""
    )
    return cell + (f"\n{shown(job.failure)}" if job.failure else "")


def status_table(runs: list[RunStatus]) -> Table:
    table = Table(title="fleetcast runs", header_style="bold")
    later_stages = PIPELINE[1:]
    for column in (
        "order",
        "run",
        "source",
        PROCESSING.name,
        "rows (rejected)",
        *(stage.name for stage in later_stages),
        "customers",
        "trained",
        "failed",
        "live",
    ):
        # Ids and file names are never cut: a table that cannot hold them whole is printed
        # as blocks (fleetcast.terminal.print_table).
        table.add_column(column, no_wrap=column in ("run", "source"))
    for run in runs:
        processing = _job_cell(run.job(PROCESSING))
        if run.not_processed_reason:
            # An upload that got no run: which run took its place, and why.
            by = f" by {shown(run.superseded_by)}" if run.superseded_by else ""
            processing += f"{by}\n{shown(run.not_processed_reason)}"
        table.add_row(
            f"#{run.upload_order}" if run.upload_order is not None else "-",
            shown(run.run_id),
            shown(run.source or "-")
            + (
                f"\n{shown(run.source_key)}\nversion {shown(run.source_version or '-')}"
                if run.not_processed_reason and run.source_key
                else ""
            ),
            processing,
            _rows_cell(run),
            *(_job_cell(run.job(stage)) for stage in later_stages),
            str(run.customers_processed if run.customers_processed is not None else "-"),
            str(
                run.customers_trained
                if run.customers_trained is not None
                else run.customers_checkpointed
            ),
            "\n".join(
                [
                    str(run.customers_failed if run.customers_failed is not None else "-"),
                    *map(shown, run.failure_summary()),
                ]
            )
            + (f"\n{run.customers_lost} lost" if run.customers_lost else "")
            # (the first is named when the run's record names it: chunks' are in the log)
            + (f": {shown(run.first_lost)}" if run.customers_lost and run.first_lost else ""),
            str(run.customers_registered)
            + (f"\n{run.registration}" if run.chunks_total is not None else "")
            + "".join(
                f"\nchunk {shown(chunk.chunk_id)} "
                + ("dead-lettered" if chunk.dead_lettered else "failing")
                + f" after {chunk.deliveries} deliveries: {shown(chunk.reason)}"
                for chunk in run.failed_chunks
            )
            + (
                f"\nre-drive once fixed: {shown(run.failed_chunks[0].redrive)}"
                if any(chunk.dead_lettered for chunk in run.failed_chunks)
                else ""
            ),
        )
    return table


def print_status(out: Console, runs: list[RunStatus]) -> None:
    """The table (or its blocks), then where each run's rejected rows are listed, a line
    each, never wrapped: an S3 URI to copy."""
    print_table(out, status_table(runs))
    for run in runs:
        if run.rejected_report:
            out.print(
                f"run {run.run_id}: {run.rows_rejected} rejected rows listed in "
                f"{run.rejected_report} (`fleetcast rejected {run.run_id}`)",
                soft_wrap=True,
                highlight=False,
            )


def _rows_cell(run: RunStatus) -> str:
    """The rows read (rejected), the rejections, the readings replaced and the periods
    left out of fitting."""
    return (
        f"{run.rows_read if run.rows_read is not None else '-'} ({run.rows_rejected if run.rows_rejected is not None else '-'})"
        + (f"\nrejected: {run.top_rejections()}" if run.rejected_by_reason else "")
        + (
            f"\n{run.readings_replaced} stored readings replaced, "
            f"{run.readings_changed or 0} changed (changed.csv)"
            if run.readings_replaced
            else ""
        )
        + (
            f"\nnot fitted: {run.periods_incomplete or 0} incomplete, "
            f"{run.periods_inactive or 0} inactive periods"
            if run.periods_incomplete or run.periods_inactive
            else ""
        )
        + (
            f"\nnot fitted: {run.periods_implausible} implausible (a meter's glitch; "
            "the training log names them)"
            if run.periods_implausible
            else ""
        )
    )
