"""Text that comes from data (S3 keys, ids, reasons) is shown with its control characters
written out, in every command's output and in the HTML report: an uploader chooses the
keys, and must not be able to recolour, retitle or rewrite a reader's terminal."""

from __future__ import annotations

import io
import logging

import pyarrow as pa
from rich.console import Console

from fleetcast.run_report import RunAccuracy, Spread, render_html
from fleetcast.status import RunStatus, StageJob, TrainingFailure
from fleetcast.status_table import status_table
from fleetcast.terminal import ControlsEscaped, escape_controls, shown
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_training.run_exports import MEASURES

HOSTILE = "incoming/\x1b[31mred\x1b]0;owned\x07\x9b2J\u202eevil[bold]x[/bold].csv"


def _terminal_output(renderable: object) -> str:
    """What a terminal receives: rich's own styles included (force_terminal)."""
    output = io.StringIO()
    Console(file=output, force_terminal=True, width=400, color_system="standard").print(renderable)
    return output.getvalue()


def test_every_control_character_is_written_out() -> None:
    escaped = escape_controls(HOSTILE)
    assert escaped == (
        "incoming/\\x1b[31mred\\x1b]0;owned\\x07\\x9b2J\\u202eevil[bold]x[/bold].csv"
    )
    assert escape_controls("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert escape_controls("one\n\x1b[2Jtwo", keep_newlines=True) == "one\n\\x1b[2Jtwo"
    # and for a rich console rich's markup too, shown as written
    assert shown("[red]x[/red]") == "\\[red]x\\[/red]"


def test_status_shows_a_hostile_key_reason_and_customer_id_escaped() -> None:
    # Given a run whose upload key, failure reasons and customer ids hold escape sequences
    run = RunStatus(
        run_id="q0000000001-20261203t120000",
        source="\x1b]0;title\x07a.csv",
        source_key=HOSTILE,
        source_version="v\x1b[2J",
        jobs={
            PROCESSING.name: StageJob(name="p", status="Replaced"),
            TRAINING.name: StageJob(name="t", status="Failed", failure="bad \x1b[31mrecord"),
        },
        not_processed_reason=f"not processed: the upload {HOSTILE} was gone",
        customers_failed=1,
        failures=[TrainingFailure(customer_id="c\x1b[8m", kind="too_few_rows", reason="r\x07")],
        failures_by_kind={"too_few_rows": 1},
        customers_lost=1,
        first_lost="lost\x1bc",
    )
    # When `fleetcast status` prints it on a terminal
    output = _terminal_output(status_table([run]))
    # Then no byte of the data reaches the terminal as a control: the only escape
    # sequences are rich's own colours (CSI ... m), and no BEL, OSC, C1 or bidi override
    assert "\x07" not in output and "\x1b]" not in output and "\x9b" not in output
    assert "\u202e" not in output and "\x1bc" not in output
    assert "\x1b[2J" not in output and "\x1b[8m" not in output
    plain = Console(width=400, record=True, file=io.StringIO())
    plain.print(status_table([run]))
    text = plain.export_text()
    assert "\\x1b]0;owned\\x07" in text and "\\u202eevil[bold]x[/bold]" in text
    assert "bad \\x1b[31mrecord" in text and "c\\x1b[8m: r\\x07" in text


def test_the_up_consoles_log_lines_are_escaped_and_keep_their_tracebacks() -> None:
    record = logging.LogRecord(
        "fleetcast", logging.ERROR, __file__, 1, "failed on %s", (HOSTILE,), None
    )
    line = ControlsEscaped("%(message)s").format(record)
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;owned" in line


def test_the_html_report_escapes_controls_and_html() -> None:
    # Given a run's accuracy with a failed customer whose id and reason are hostile
    accuracy = pa.Table.from_pylist(
        [
            {
                "customer_id": "<script>\x1b[31m",
                "outcome": "failed",
                "failure_reason": "reason \x1b]0;t\x07 & <b>",
                "smape": None,
                "naive_smape": None,
                "wape": None,
                "naive_wape": None,
                "mase": None,
            }
        ]
    )
    empty = Spread(customers=0)
    summary = RunAccuracy(
        run_id="q0000000001-20261203t120000",
        customers=1,
        scored=0,
        model=dict.fromkeys(MEASURES, empty),
        naive=dict.fromkeys(MEASURES, empty),
        beat_naive=0,
        live=0,
        rejected=0,
        superseded=0,
        failed=1,
        undecided=0,
        not_exported=0,
    )
    # When the report is written
    page = render_html(summary, accuracy)
    # Then the data is in it escaped for HTML and with its controls written out
    assert "\x1b" not in page and "\x07" not in page and "<script>" not in page
    assert "&lt;script&gt;\\x1b[31m" in page
    assert "reason \\x1b]0;t\\x07 &amp; &lt;b&gt;" in page
