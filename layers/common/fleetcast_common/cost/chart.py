"""The e-mail's chart: daily SageMaker cost by usage type, anomalies marked.

matplotlib's object API (``Figure`` + the Agg canvas), not pyplot: no global figure
state, no display needed, safe in a warm Lambda that renders again and again.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter, date2num
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

from fleetcast_common.cost.models import Anomaly, UsageHistory

TOP_USAGE_TYPES = 6
OTHER = "other"
# Colour-blind-safe (Okabe-Ito), then a grey for "other".
_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#56B4E9", "#CC79A7", "#F0E442", "#999999")
_ANOMALY_COLOUR = "#D55E00"


def series_for_chart(history: UsageHistory, top: int = TOP_USAGE_TYPES) -> dict[str, list[float]]:
    """The ``top`` usage types by total cost, largest first, the rest summed as "other"."""
    costs = history.costs_by_usage_type()
    ranked = sorted(costs, key=lambda usage_type: -sum(costs[usage_type]))
    shown = {usage_type: costs[usage_type] for usage_type in ranked[:top]}
    rest = ranked[top:]
    if rest:
        shown[OTHER] = [sum(costs[u][i] for u in rest) for i in range(len(history.days))]
    return shown


def render_cost_chart(
    history: UsageHistory,
    anomalies: Sequence[Anomaly],
    highlighted: Collection[tuple[str, object]] = (),
    top: int = TOP_USAGE_TYPES,
) -> bytes:
    """A PNG (900 x 420 px) of the stacked daily cost, with a marker on every anomaly
    and a label on the ``highlighted`` ones (the keys this e-mail reports)."""
    days = history.days
    series = series_for_chart(history, top)
    figure = Figure(figsize=(9, 4.2), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if days and series:
        x = [float(date2num(day)) for day in days]
        axes.stackplot(
            x,
            *series.values(),
            labels=[_short(name) for name in series],
            colors=_COLOURS[: len(series)],
            alpha=0.85,
        )
        index = {day: i for i, day in enumerate(days)}
        names = list(series)
        labelled = 0
        for anomaly in anomalies:
            i = index.get(anomaly.date)
            if i is None:
                continue
            layer = (
                names.index(anomaly.usage_type) if anomaly.usage_type in names else len(names) - 1
            )
            top_of_layer = sum(series[name][i] for name in names[: layer + 1])
            label = anomaly.key in highlighted
            axes.plot(
                [x[i]],
                [top_of_layer],
                marker="v",
                markersize=9 if label else 6,
                color=_ANOMALY_COLOUR,
                markeredgecolor="black" if label else _ANOMALY_COLOUR,
                linestyle="none",
            )
            if label:
                # Labels sit above the day's total, staggered so neighbours stay readable.
                total = sum(values[i] for values in series.values())
                rise = 12 * (labelled % 3)
                labelled += 1
                axes.annotate(
                    f"+${anomaly.impact:,.0f}",
                    xy=(x[i], top_of_layer),
                    xytext=(x[i], total),
                    textcoords=offset_copy(
                        axes.transData, fig=figure, x=0, y=10 + rise, units="points"
                    ),
                    ha="center",
                    fontsize=8,
                    color=_ANOMALY_COLOUR,
                    fontweight="bold",
                    arrowprops={"arrowstyle": "-", "color": _ANOMALY_COLOUR, "lw": 0.6},
                )
    axes.set_title("Daily SageMaker cost by usage type (\u25bc anomaly)", fontsize=11, loc="left")
    axes.set_ylabel("USD per day")
    axes.margins(x=0.01)
    peak = max((sum(day) for day in zip(*series.values(), strict=True)), default=0.0)
    # Headroom for the staggered labels above the tallest day.
    axes.set_ylim(0, peak * 1.3 if peak > 0 else 1)
    axes.grid(axis="y", alpha=0.3)
    locator = AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    if series:
        figure.legend(loc="outside lower center", fontsize=8, ncols=4, frameon=False)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _short(usage_type: str) -> str:
    """``"USE1-Train:ml.c5.xlarge"`` -> ``"Train:ml.c5.xlarge"``: the region prefix is the
    same for every line."""
    head, _, tail = usage_type.partition("-")
    return tail if tail and head.isalnum() and head.isupper() else usage_type
