"""The e-mail's chart: daily SageMaker cost by usage type, anomalies marked.

Two panels: the whole lookback (stacked areas) for the usual level and weekly rhythm,
and the last weeks as stacked daily bars, where the anomalies a report is about sit:
over 90 days a day is ten pixels wide, too narrow to point at or label.

matplotlib's object API (``Figure`` + the Agg canvas), not pyplot: no global figure
state, no display needed, safe in a warm Lambda that renders again and again.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Collection, Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure

from fleetcast_cost.mail import CHART_SIZE
from fleetcast_cost.models import Anomaly, UsageHistory

TOP_USAGE_TYPES = 6
OTHER = "other"
# The close-up: at least two weeks, more when an e-mailed anomaly is older.
DETAIL_DAYS = 14
MAX_DETAIL_DAYS = 31
# Colour-blind-safe (Okabe-Ito), then a grey for "other".
_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#56B4E9", "#CC79A7", "#F0E442", "#999999")
_ANOMALY_COLOUR = "#D55E00"
_WINDOW_SHADE = "#EEEEEE"


def series_for_chart(history: UsageHistory, top: int = TOP_USAGE_TYPES) -> dict[str, list[float]]:
    """The ``top`` usage types by total cost, largest first, the rest summed as "other"."""
    costs = history.costs_by_usage_type()
    ranked = sorted(costs, key=lambda usage_type: -sum(costs[usage_type]))
    shown = {usage_type: costs[usage_type] for usage_type in ranked[:top]}
    rest = ranked[top:]
    if rest:
        shown[OTHER] = [sum(costs[u][i] for u in rest) for i in range(len(history.days))]
    return shown


def detail_start(days: Sequence[dt.date], highlighted: Collection[tuple[str, dt.date]]) -> int:
    """Index of the close-up's first day: two weeks back, or the oldest highlighted
    anomaly's week, at most :data:`MAX_DETAIL_DAYS` back."""
    if not days:
        return 0
    first = len(days) - DETAIL_DAYS
    index = {day: i for i, day in enumerate(days)}
    for _, day in highlighted:
        if day in index:
            first = min(first, index[day] - 3)
    return max(0, first, len(days) - MAX_DETAIL_DAYS)


def render_cost_chart(
    history: UsageHistory,
    anomalies: Sequence[Anomaly],
    highlighted: Collection[tuple[str, dt.date]] = (),
    top: int = TOP_USAGE_TYPES,
) -> bytes:
    """A PNG (:data:`CHART_SIZE`) of the stacked daily cost, with a marker on every
    anomaly and, in the close-up, the ``highlighted`` ones (the keys this e-mail
    reports) labelled with their impact."""
    days = history.days
    series = series_for_chart(history, top)
    width, height = CHART_SIZE
    figure = Figure(figsize=(width / 100, height / 100), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    overview, detail = figure.subplots(2, 1, height_ratios=(1, 1.5))
    if not days or not series:
        for axes in (overview, detail):
            axes.text(0.5, 0.5, "No SageMaker cost in the period", ha="center", va="center")
            axes.set_axis_off()
    else:
        first = detail_start(days, highlighted)
        _overview(overview, days, series, anomalies, first)
        _detail(detail, days[first:], series, first, anomalies, highlighted)
        figure.legend(
            *overview.get_legend_handles_labels(),
            loc="outside lower center",
            fontsize=8,
            ncols=min(4, len(series)),
            frameon=False,
        )
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _layer_top(series: dict[str, list[float]], usage_type: str, i: int) -> float:
    """The top of ``usage_type``'s layer on day ``i`` (its folded "other" if not shown)."""
    names = list(series)
    layer = names.index(usage_type) if usage_type in names else len(names) - 1
    return sum(series[name][i] for name in names[: layer + 1])


def _overview(
    axes: Axes,
    days: list[dt.date],
    series: dict[str, list[float]],
    anomalies: Sequence[Anomaly],
    detail_from: int,
) -> None:
    x = [float(date2num(day)) for day in days]
    axes.stackplot(
        x,
        *series.values(),
        labels=[_short(name) for name in series],
        colors=_COLOURS[: len(series)],
        alpha=0.85,
    )
    index = {day: i for i, day in enumerate(days)}
    marked = [
        (x[index[a.date]], _layer_top(series, a.usage_type, index[a.date]))
        for a in anomalies
        if a.date in index
    ]
    if marked:
        axes.plot(*zip(*marked, strict=True), "v", color=_ANOMALY_COLOUR, markersize=5)
    # The close-up's days, shaded here so the eye can find them.
    axes.axvspan(x[detail_from] - 0.5, x[-1] + 0.5, color=_WINDOW_SHADE, zorder=0)
    last = days[-1]
    axes.set_title(
        f"Daily SageMaker cost by usage type, {days[0]:%d %b} to {last:%d %b %Y}"
        " (\u25bc anomaly; shaded: close-up below)",
        fontsize=10,
        loc="left",
    )
    axes.set_ylabel("USD per day", fontsize=8)
    axes.margins(x=0.005)
    peak = max(sum(day) for day in zip(*series.values(), strict=True))
    axes.set_ylim(0, peak * 1.1 if peak > 0 else 1)
    axes.grid(axis="y", alpha=0.3)
    axes.tick_params(labelsize=8)
    locator = AutoDateLocator()
    formatter = ConciseDateFormatter(locator, show_offset=False)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(formatter)


def _detail(
    axes: Axes,
    days: list[dt.date],
    series: dict[str, list[float]],
    offset: int,
    anomalies: Sequence[Anomaly],
    highlighted: Collection[tuple[str, dt.date]],
) -> None:
    positions = list(range(len(days)))
    bottoms = [0.0] * len(days)
    for (name, values), colour in zip(series.items(), _COLOURS, strict=False):
        shown = values[offset:]
        axes.bar(positions, shown, bottom=bottoms, color=colour, width=0.8, label=_short(name))
        bottoms = [b + v for b, v in zip(bottoms, shown, strict=True)]
    index = {day: i for i, day in enumerate(days)}
    labels: dict[int, list[Anomaly]] = {}
    for anomaly in anomalies:
        i = index.get(anomaly.date)
        if i is None:
            continue
        reported = anomaly.key in highlighted
        axes.plot(
            [i],
            [_layer_top(series, anomaly.usage_type, offset + i)],
            marker="v",
            markersize=10 if reported else 7,
            color=_ANOMALY_COLOUR,
            markeredgecolor="black" if reported else _ANOMALY_COLOUR,
            linestyle="none",
        )
        if reported:
            labels.setdefault(i, []).append(anomaly)
    peak = max(bottoms) if bottoms else 0.0
    for i, found in labels.items():
        # One label per day above its bar: the impacts, largest first.
        text = "\n".join(f"+${a.impact:,.0f}" for a in sorted(found, key=lambda a: -a.impact))
        axes.annotate(
            text,
            xy=(i, bottoms[i]),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            fontweight="bold",
            color=_ANOMALY_COLOUR,
        )
    lines = max((len(found) for found in labels.values()), default=0)
    axes.set_ylim(0, (peak if peak > 0 else 1) * (1.18 + 0.1 * lines))
    axes.set_xlim(-0.6, len(days) - 0.4)
    axes.set_xticks(
        positions,
        [f"{day:%a}\n{day:%d %b}" if len(days) <= 16 else f"{day:%d}" for day in days],
    )
    for tick, day in zip(axes.get_xticklabels(), days, strict=True):
        if day.weekday() >= 5:
            tick.set_color("#777777")
    axes.tick_params(labelsize=8)
    axes.set_ylabel("USD per day", fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    axes.set_axisbelow(True)
    axes.set_title(
        f"Last {len(days)} days: labelled \u25bc = reported in this e-mail, with its impact "
        "over expected",
        fontsize=10,
        loc="left",
    )


def _short(usage_type: str) -> str:
    """``"USE1-Train:ml.c5.xlarge"`` -> ``"Train:ml.c5.xlarge"``: the region prefix is the
    same for every line."""
    head, _, tail = usage_type.partition("-")
    return tail if tail and head.isalnum() and head.isupper() else usage_type
