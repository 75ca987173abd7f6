"""The accuracy summary ``fleetcast status`` prints under its table."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pyarrow as pa

from fleetcast.run_report import RunAccuracy, Spread, error_chart_png, render_html, summary_lines
from fleetcast_contracts.frequency import Frequency

MEASURES = ("smape", "wape", "mase", "rmse", "mae")


def run_accuracy(**fields: object) -> RunAccuracy:
    spread = Spread.of([0.1, 0.2, 0.3])
    base: dict[str, object] = {
        "run_id": "q0000000001-20260101t000000",
        "customers": 3,
        "scored": 3,
        "model": dict.fromkeys(MEASURES, spread),
        "naive": dict.fromkeys(MEASURES, spread),
        "beat_naive": 2,
        "live": 3,
        "rejected": 0,
        "superseded": 0,
        "failed": 0,
        "undecided": 0,
        "not_exported": 0,
        "served": {"combination": 2, "ets": 1},
    }
    return RunAccuracy.model_validate(base | fields)


def test_customers_with_a_level_shift_are_counted_under_the_families():
    lines = summary_lines(run_accuracy(level_shifts=2))
    served = next(i for i, line in enumerate(lines) if "served by family" in line)
    assert lines[served + 1] == (
        "  2 with a level shift at the end of their history, served only by members that follow it"
    )


def test_no_line_when_no_customer_had_a_level_shift():
    assert not any("level shift" in line for line in summary_lines(run_accuracy()))


def test_wape_leads_as_the_quality_gates_measure_and_the_others_stand_beside_it():
    lines = summary_lines(run_accuracy())
    # The first measure named is WAPE, said to be the gate's, with seasonal-naive's
    assert lines[1].startswith("  WAPE median 20.0% (p10 12.0%, p90 28.0%)")
    assert lines[1].endswith(
        "seasonal-naive median 20.0% (the last 7 days repeated): the measure the quality gate "
        "compares"
    )
    # And the others follow it, none before it
    assert lines[2].startswith("  beside it, medians: sMAPE 20.0% (naive 20.0%), MASE 0.200")
    assert "lower backtest WAPE" in lines[3]
    assert not any("sMAPE" in line for line in lines[:2])


def test_an_hourly_runs_summary_report_and_charts_speak_of_hours(monkeypatch) -> None:
    # Given the accuracy of a run of hourly models
    summary = run_accuracy(frequency=Frequency.HOURLY)
    # When it is summarised, then the lines say the models are hourly, naive a day of hours
    lines = summary_lines(summary)
    assert "hourly models, errors over hours" in lines[0]
    assert "(the last 168 hours repeated)" in lines[1]
    # And the report says so above its tables
    accuracy = pa.table(
        {
            "customer_id": ["a", "b"],
            "outcome": ["trained", "trained"],
            "failure_reason": [None, None],
            **{name: [0.1, 0.2] for name in MEASURES},
            **{f"naive_{name}": [0.2, 0.3] for name in MEASURES},
        }
    )
    page = render_html(summary, accuracy)
    assert "Hourly models: each period one\nhour (UTC)" in page
    # And the error chart's labels name the hours and the naive rule
    drawn = []
    original = plt.Figure.savefig

    def keep(figure, *args, **kwargs):
        drawn.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    error_chart_png(accuracy, summary)
    (axes,) = drawn[-1].axes
    assert axes.get_xlabel().startswith("backtest WAPE over the held-back hours (%)")
    assert "hourly models" in axes.get_title()
    assert "seasonal-naive (the last 168 hours repeated)" in axes.get_legend_handles_labels()[1]
