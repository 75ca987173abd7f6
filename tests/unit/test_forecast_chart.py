"""`fleetcast forecast --plot`'s chart (issue 40): the unit on the axis, the axis from zero
(an axis from the lowest value made weekend dips look deeper than they are), the family
that served the customer in the title; and the report's family box plot with labels that
do not run together."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pyarrow as pa

from fleetcast.run_report import RunAccuracy, Spread, family_chart_png
from fleetcast.serving_cli import forecast_figure


def _forecast() -> dict[str, object]:
    return {
        "customer_id": "7",
        "model_version": 3,
        "run_id": "q0000000042-20240131t235959",
        "trained_at": "2024-01-31T23:59:59Z",
        "data_end": "2023-12-31",
        "period": 7,
        "forecast": [
            {"ds": f"2024-01-0{day}", "yhat": 600.0 + day, "yhat_lower": 550.0, "yhat_upper": 650.0}
            for day in range(1, 8)
        ],
    }


def _history() -> pd.DataFrame:
    days = pd.date_range("2023-10-01", "2023-12-31", freq="D")
    return pd.DataFrame({"ds": days, "y": [500.0 + (day.day_of_week < 5) * 100 for day in days]})


def test_the_chart_names_its_unit_starts_at_zero_and_names_the_family() -> None:
    # When a forecast served by the combination is drawn, in MWh
    figure = forecast_figure(_forecast(), _history(), unit="MWh", family="combination")
    try:
        (axes, *_) = figure.axes
        # Then the axis says what it counts, in which unit
        assert axes.get_ylabel() == "daily consumption (MWh)"
        # And it starts at zero, though every value is above 500
        assert axes.get_ylim()[0] == 0
        # And the title names the family that served the customer
        assert "7-day forecast by combination (model v3" in axes.get_title()
    finally:
        plt.close(figure)


def test_the_unit_defaults_to_kwh_and_no_family_is_no_guess() -> None:
    figure = forecast_figure(_forecast(), None)
    try:
        (axes, *_) = figure.axes
        assert axes.get_ylabel() == "daily consumption (kWh)"
        assert " by " not in axes.get_title()
    finally:
        plt.close(figure)


def test_the_family_box_plot_labels_are_apart(monkeypatch) -> None:
    # Given two families with long names side by side
    kinds = ["seasonal_naive", "seasonal_median"]
    spread = Spread.of([0.1, 0.2])
    summary = RunAccuracy(
        run_id="q0000000042-20240131t235959",
        customers=2,
        scored=2,
        model={},
        naive={},
        beat_naive=0,
        live=2,
        rejected=0,
        superseded=0,
        failed=0,
        undecided=0,
        not_exported=0,
        served={"seasonal_naive": 1, "seasonal_median": 1},
        family_wape=dict.fromkeys(kinds, spread),
    )
    accuracy = pa.table({f"backtest_wape_{kind}": [0.1, 0.2] for kind in kinds})
    drawn = []
    original = plt.Figure.savefig

    def keep(figure, *args, **kwargs):  # the figure as it is saved
        drawn.append(figure)
        return original(figure, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", keep)
    # When the report draws them
    assert family_chart_png(summary, accuracy).startswith(b"\x89PNG")
    (axes,) = drawn[0].axes
    labels = axes.get_xticklabels()
    # Then each label is split at its words and turned, the axis from zero
    assert [label.get_text() for label in labels] == [
        "seasonal naive\n(serves 1)",
        "seasonal median\n(serves 1)",
    ]
    assert all(label.get_rotation() == 30 for label in labels)
    assert axes.get_ylim()[0] == 0
