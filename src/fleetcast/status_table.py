"""``fleetcast status`` as a table: one row per upload, from its run's status."""

from __future__ import annotations

from rich.table import Table

from fleetcast.status import RunStatus


def status_table(runs: list[RunStatus]) -> Table:
    table = Table(title="fleetcast runs", header_style="bold")
    for column in (
        "order",
        "run",
        "source",
        "processing",
        "rows (rejected)",
        "training",
        "customers",
        "trained",
        "failed",
        "live",
    ):
        table.add_column(column)
    for run in runs:
        processing = run.processing_status + (
            f"\n{run.processing_failure}" if run.processing_failure else ""
        )
        if run.not_processed_reason:
            # An upload that got no run: which run took its place, and why.
            by = f" by {run.superseded_by}" if run.superseded_by else ""
            processing += f"{by}\n{run.not_processed_reason}"
        training = (run.training_status or "-") + (
            f" ({run.training_secondary_status})"
            if run.training_secondary_status and run.training_status == "InProgress"
            else ""
        )
        if run.training_failure:
            training += f"\n{run.training_failure}"
        table.add_row(
            f"#{run.upload_order}" if run.upload_order is not None else "-",
            run.run_id,
            (run.source or "-")
            + (
                f"\n{run.source_key}\nversion {run.source_version or '-'}"
                if run.not_processed_reason
                else ""
            ),
            processing,
            f"{run.rows_read if run.rows_read is not None else '-'} ({run.rows_rejected if run.rows_rejected is not None else '-'})"
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
            ),
            training,
            str(run.customers_processed if run.customers_processed is not None else "-"),
            str(
                run.customers_trained
                if run.customers_trained is not None
                else run.customers_checkpointed
            ),
            "\n".join(
                [
                    str(run.customers_failed if run.customers_failed is not None else "-"),
                    *run.failure_summary(),
                ]
            )
            + (f"\n{run.customers_lost} lost: {run.first_lost}" if run.customers_lost else ""),
            str(run.customers_registered)
            + (f"\n{run.registration}" if run.chunks_total is not None else ""),
        )
    return table
