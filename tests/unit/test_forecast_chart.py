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


def _hourly_forecast(hours: int = 48) -> dict[str, object]:
    start = pd.Timestamp("2024-01-01T00:00:00Z")
    return {
        "customer_id": "h1",
        "model_version": 2,
        "run_id": "q0000000042-20240131t235959",
        "trained_at": "2024-01-01T01:00:00Z",
        "data_end": "2023-12-31",
        "frequency": "H",
        "period_unit": "hour",
        "period": hours,
        "forecast": [
            {
                "ds": f"{start + pd.Timedelta(hours=hour):%Y-%m-%dT%H:%M:%SZ}",
                "yhat": 5.0 + (hour % 24 > 17),
                "yhat_lower": 4.0,
                "yhat_upper": 7.0,
            }
            for hour in range(hours)
        ],
    }


def _hourly_history(days: int = 180) -> pd.DataFrame:
    hours = pd.date_range(end="2023-12-31T23:00", periods=days * 24, freq="h")
    return pd.DataFrame({"ds": hours, "y": [4.0 + (hour.hour > 17) for hour in hours]})


def test_an_hourly_chart_speaks_of_hours_and_shows_weeks_not_months() -> None:
    # When a 48-hour forecast of an hourly model is drawn over half a year of hourly history
    figure = forecast_figure(_hourly_forecast(48), _hourly_history(), family="mstl")
    try:
        (axes, *_) = figure.axes
        # Then the title says hours, the family and that the model is hourly
        title = axes.get_title()
        assert "48-hour forecast by mstl (hourly model v2" in title, title
        assert "day forecast" not in title
        # And the axes say hourly consumption in its unit, and time in UTC hours
        assert axes.get_ylabel() == "hourly consumption (kWh)"
        assert axes.get_xlabel() == "time (UTC), one point per hour"
        # And the end of data is the last hour, not a day
        labels = axes.get_legend_handles_labels()[1]
        assert "last hour of data (2023-12-31 23:00 UTC)" in labels, labels
        # And of the half year of history, two weeks show (48 hours x 4 is less), so the
        # forecast is not a sliver beside it
        history = next(line for line in axes.get_lines() if line.get_label() == "history")
        shown = pd.to_datetime(history.get_xdata())
        assert pd.Timedelta(days=13) < shown.max() - shown.min() <= pd.Timedelta(days=14)
        # And the ticks carry the hour
        figure.canvas.draw()
        ticks = [label.get_text() for label in axes.get_xticklabels() if label.get_text()]
        assert ticks and all(":" in tick for tick in ticks), ticks
    finally:
        plt.close(figure)


def test_a_720_hour_chart_shows_four_weeks_of_history() -> None:
    figure = forecast_figure(_hourly_forecast(720), _hourly_history())
    try:
        (axes, *_) = figure.axes
        assert "720-hour forecast (hourly model v2" in axes.get_title()
        history = next(line for line in axes.get_lines() if line.get_label() == "history")
        shown = pd.to_datetime(history.get_xdata())
        assert shown.max() - shown.min() <= pd.Timedelta(days=28)
        assert shown.max() - shown.min() > pd.Timedelta(days=27)
    finally:
        plt.close(figure)


def test_a_daily_chart_stays_as_it_was() -> None:
    # (an answer that names its frequency D draws as one from before it did)
    forecast = _forecast() | {"frequency": "D", "period_unit": "day"}
    figure = forecast_figure(forecast, _history(), family="ets")
    try:
        (axes, *_) = figure.axes
        assert axes.get_ylabel() == "daily consumption (kWh)"
        assert "7-day forecast by ets (model v3" in axes.get_title()
        assert "last day of data (2023-12-31)" in axes.get_legend_handles_labels()[1]
    finally:
        plt.close(figure)
