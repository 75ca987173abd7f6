"""A run's accuracy, fleet-wide: the summary ``fleetcast status`` prints and the
self-contained HTML report ``fleetcast report`` writes.

Both come from the run's accuracy table (one row per customer of every instance's shard,
:mod:`fleetcast_training.run_exports`) and the registry's decision on each model, read by
the CLI; no Lambda function reads either.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from pydantic import BaseModel

from fleetcast.terminal import escape_controls
from fleetcast_common.registry import ModelRegistry, ModelStatus
from fleetcast_contracts.frequency import Frequency
from fleetcast_training.run_exports import MEASURES, SCORED_KINDS

# The measure a user reads first: the one the quality gate compares (its backtest MAE
# against seasonal naive's on the same points is its WAPE against naive's, the same sum
# of actuals dividing both), the others beside it.
HEADLINE = "wape"
REPORTED = (HEADLINE, *(name for name in MEASURES if name != HEADLINE))
NAMES = {"wape": "WAPE", "smape": "sMAPE", "mase": "MASE", "rmse": "RMSE", "mae": "MAE"}
# How registration's refusals read, in the gate's measure (fleetcast_contracts.quality_gate:
# a backtest MAE over naive's by more than EQUAL_ERROR_SHARE of the level is a WAPE over
# naive's by more than that many points).
GATE = "quality gate (backtest WAPE above seasonal-naive's)"


class Spread(BaseModel):
    """p10, median and p90 of one measure over the customers where it is defined."""

    customers: int
    p10: float | None = None
    median: float | None = None
    p90: float | None = None

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Spread:
        defined = np.array([v for v in values if v is not None and math.isfinite(v)])
        if not defined.size:
            return cls(customers=0)
        p10, median, p90 = np.percentile(defined, [10, 50, 90])
        return cls(customers=int(defined.size), p10=p10, median=median, p90=p90)


class RunAccuracy(BaseModel):
    run_id: str
    customers: int
    scored: int
    # Per measure name (smape, wape, mase, rmse, mae): the model's and seasonal-naive's.
    model: dict[str, Spread]
    naive: dict[str, Spread]
    # The model's backtest error is below seasonal-naive's (the accuracy table's beats_naive:
    # its MAE, so its WAPE; the holdout's sMAPE for models from before backtests).
    beat_naive: int
    # What became of the customers' models in the registry.
    live: int
    rejected: int  # the quality gate: clearly worse than seasonal-naive
    superseded: int  # a newer run's model had already gone live
    failed: int  # training failed: no model
    undecided: int  # trained, not (yet) decided by registration
    # Customers whose model has no exported forecast, and the first reason.
    not_exported: int
    first_export_error: str | None = None
    # How many trained customers each family's model serves (chosen by backtest), and
    # each candidate family's backtest WAPE over the customers it was scored for.
    served: dict[str, int] = {}
    family_wape: dict[str, Spread] = {}
    # Customers with a level shift at the end of their history (members that cannot
    # follow it left out: fleetcast_training.level_shift).
    level_shifts: int = 0
    # The run's models' frequency (a run trains at one): what their errors were measured on.
    frequency: Frequency = Frequency.DAILY

    @property
    def not_live(self) -> int:
        return self.rejected + self.superseded + self.failed + self.undecided

    @property
    def naive_rule(self) -> str:
        """What seasonal-naive forecasts, at the run's frequency."""
        frequency = self.frequency
        return f"the last {frequency.periods(frequency.season_periods)} repeated"

    @property
    def measured_on(self) -> str:
        """ "daily models, errors over days" and the like: the unit of every error here."""
        return f"{self.frequency.adjective} models, errors over {self.frequency.units}"


def summarise(accuracy: pa.Table, run_id: str, registry: ModelRegistry) -> RunAccuracy:
    rows = accuracy.to_pylist()
    scored = [row for row in rows if row["smape"] is not None]
    states = registry.states([row["customer_id"] for row in rows], run_id)
    decisions = [states[row["customer_id"]].decided for row in rows if row["outcome"] != "failed"]
    statuses = [decided.status for decided in decisions if decided is not None]
    not_exported = [row for row in rows if row["outcome"] != "failed" and not row["forecast_rows"]]
    trained = [row for row in rows if row["outcome"] != "failed"]
    kinds = [row["model_kind"] for row in trained]
    return RunAccuracy(
        frequency=_run_frequency(trained, run_id, registry),
        served={
            kind: kinds.count(kind) for kind in sorted(set(kinds), key=kinds.count, reverse=True)
        },
        family_wape={
            kind: Spread.of([row.get(f"backtest_wape_{kind}") for row in trained])
            for kind in SCORED_KINDS
            if any(row.get(f"backtest_wape_{kind}") is not None for row in trained)
        },
        level_shifts=sum(1 for row in trained if row.get("level_shift_days") is not None),
        run_id=run_id,
        customers=len(rows),
        scored=len(scored),
        model={name: Spread.of([row[name] for row in scored]) for name in MEASURES},
        naive={name: Spread.of([row[f"naive_{name}"] for row in scored]) for name in MEASURES},
        beat_naive=sum(1 for row in scored if row["beats_naive"]),
        live=statuses.count(ModelStatus.LIVE),
        rejected=statuses.count(ModelStatus.REJECTED),
        superseded=statuses.count(ModelStatus.SUPERSEDED),
        failed=sum(1 for row in rows if row["outcome"] == "failed"),
        undecided=sum(1 for decided in decisions if decided is None),
        not_exported=len(not_exported),
        first_export_error=(
            f"{not_exported[0]['customer_id']}: {not_exported[0]['export_error']}"
            if not_exported
            else None
        ),
    )


def _run_frequency(
    trained: list[dict[str, object]], run_id: str, registry: ModelRegistry
) -> Frequency:
    """The frequency of the run's models, from one of its registry records (a run trains
    at one frequency); daily when it has none."""
    for row in trained:
        record = registry.model(str(row["customer_id"]), run_id)
        if record is not None:
            return record.frequency
    return Frequency.DAILY


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def summary_lines(summary: RunAccuracy) -> list[str]:
    """The few lines ``fleetcast status`` prints under its table: WAPE first, as the quality
    gate decides by it, the other measures beside it."""
    wape, naive_wape = summary.model[HEADLINE], summary.naive[HEADLINE]
    beside = ", ".join(
        f"{NAMES[name]} {_number(name, summary.model[name].median)} "
        f"(naive {_number(name, summary.naive[name].median)})"
        for name in REPORTED[1:]
        if name in summary.model
    )
    lines = [
        f"accuracy of run {summary.run_id} ({summary.scored} of {summary.customers} "
        f"customers scored on their holdout; {summary.measured_on}):",
        f"  WAPE median {_percent(wape.median)} (p10 {_percent(wape.p10)}, "
        f"p90 {_percent(wape.p90)}) over {wape.customers} customers; seasonal-naive median "
        f"{_percent(naive_wape.median)} ({summary.naive_rule}): the measure the quality gate "
        "compares",
        f"  beside it, medians: {beside}",
        f"  {summary.beat_naive} of {summary.scored} beat seasonal-naive (lower backtest WAPE, "
        "or the holdout's sMAPE for models from before backtests)",
    ]
    if summary.served:
        lines.append(
            "  served by family (each customer's choice on its backtest): "
            + ", ".join(f"{kind} {count}" for kind, count in summary.served.items())
        )
    if summary.level_shifts:
        lines.append(
            f"  {summary.level_shifts} with a level shift at the end of their history, "
            "served only by members that follow it"
        )
    if summary.family_wape:
        lines.append(
            "  backtest WAPE median by candidate: "
            + ", ".join(
                f"{kind} {_percent(spread.median)}" for kind, spread in summary.family_wape.items()
            )
        )
    lines += [
        f"  made live {summary.live}; not made live {summary.not_live}: "
        f"{summary.rejected} {GATE}, "
        f"{summary.superseded} superseded, {summary.failed} failed"
        + (f", {summary.undecided} not decided yet" if summary.undecided else ""),
    ]
    if summary.not_exported:
        lines.append(
            f"  {summary.not_exported} trained without an exported forecast "
            f"(first: {summary.first_export_error})"
        )
    return lines


def family_chart_png(summary: RunAccuracy, accuracy: pa.Table) -> bytes:
    """Box plot of every candidate family's backtest WAPE across the customers, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    kinds = list(summary.family_wape)
    values = [
        [100 * v for v in accuracy.column(f"backtest_wape_{kind}").to_pylist() if v is not None]
        for kind in kinds
    ]
    # Wide enough for every family's label, each on lines of its own and turned, so that
    # long names side by side do not run together ("seasonal_naiveseasonal_median").
    figure, axes = plt.subplots(figsize=(max(9.0, 1.3 * len(kinds)), 4.8), dpi=100)
    try:
        axes.boxplot(values, showfliers=False)
        axes.set_xticks(
            range(1, len(kinds) + 1),
            [f"{kind.replace('_', ' ')}\n(serves {summary.served.get(kind, 0)})" for kind in kinds],
            rotation=30,
            ha="right",
            rotation_mode="anchor",
        )
        axes.set_ylim(bottom=0)
        axes.set_ylabel(f"backtest WAPE over the held-back {summary.frequency.units} (%)")
        axes.set_title(
            f"Each candidate family's backtest error, per customer ({summary.frequency.adjective} "
            "models)"
        )
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return buffer.getvalue()


def error_chart_png(accuracy: pa.Table, summary: RunAccuracy) -> bytes:
    """Histogram of the backtest WAPE of the models and of seasonal-naive, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    model = [v for v in accuracy.column(HEADLINE).to_pylist() if v is not None]
    naive = [v for v in accuracy.column(f"naive_{HEADLINE}").to_pylist() if v is not None]
    figure, axes = plt.subplots(figsize=(9, 4), dpi=100)
    try:
        upper = max([*model, *naive, 0.01])
        bins = np.linspace(0, upper * 100, 31).tolist()
        naive_label = f"seasonal-naive ({summary.naive_rule})"
        axes.hist([100 * v for v in naive], bins=bins, alpha=0.55, label=naive_label)
        axes.hist([100 * v for v in model], bins=bins, alpha=0.75, label="served model")
        axes.set_xlabel(
            f"backtest WAPE over the held-back {summary.frequency.units} (%): the quality "
            "gate's measure"
        )
        axes.set_ylabel("customers")
        axes.set_title(
            f"Error distribution of the {summary.frequency.adjective} models: model vs "
            "seasonal-naive"
        )
        axes.legend()
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
    finally:
        plt.close(figure)
    return buffer.getvalue()


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 960px; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #bbb; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eee; }
"""


def _number(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    return _percent(value) if name in ("smape", "wape") else f"{value:,.3f}"


def _escaped(text: object) -> str:
    return html.escape(escape_controls(text))


def _families_section(summary: RunAccuracy, accuracy: pa.Table) -> str:
    """Each family's customers served and backtest WAPE, and their chart; nothing when no
    family was scored."""
    family_rows = "".join(
        f"<tr><td>{_escaped(kind)}</td><td>{summary.served.get(kind, 0)}</td>"
        + "".join(f"<td>{_percent(getattr(spread, f))}</td>" for f in ("p10", "median", "p90"))
        + f"<td>{spread.customers}</td></tr>"
        for kind, spread in summary.family_wape.items()
    )
    return (
        '<h2>Model families</h2><table id="families"><tr><th>family</th><th>serves</th>'
        "<th>backtest WAPE p10</th><th>median</th><th>p90</th><th>customers scored</th></tr>"
        f"{family_rows}</table>"
        '<img id="family-chart" alt="Backtest WAPE per candidate family" '
        f'src="data:image/png;base64,{base64.b64encode(family_chart_png(summary, accuracy)).decode()}">'
        if summary.family_wape
        else ""
    )


def render_html(summary: RunAccuracy, accuracy: pa.Table, worst: int = 10) -> str:
    """The run report: one HTML file, its chart embedded as a data URI."""
    e = _escaped
    chart = base64.b64encode(error_chart_png(accuracy, summary)).decode()
    measure_rows = "".join(
        f"<tr><td>{NAMES[name]}{' (quality gate)' if name == HEADLINE else ''}</td>"
        + "".join(
            f"<td>{_number(name, getattr(spread, field))}</td>"
            for spread in (summary.model[name], summary.naive[name])
            for field in ("p10", "median", "p90")
        )
        + f"<td>{summary.model[name].customers}</td></tr>"
        for name in REPORTED
    )
    scored = sorted(
        (row for row in accuracy.to_pylist() if row[HEADLINE] is not None),
        key=lambda row: -row[HEADLINE],
    )[:worst]
    worst_rows = "".join(
        f"<tr><td>{e(row['customer_id'])}</td><td>{_percent(row['wape'])}</td>"
        f"<td>{_percent(row['naive_wape'])}</td><td>{_percent(row['smape'])}</td>"
        f"<td>{_number('mase', row['mase'])}</td></tr>"
        for row in scored
    )
    families = _families_section(summary, accuracy)
    failures = [row for row in accuracy.to_pylist() if row["outcome"] == "failed"][:worst]
    failure_rows = "".join(
        f"<tr><td>{e(row['customer_id'])}</td><td>{e(row['failure_reason'] or '')}</td></tr>"
        for row in failures
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>fleetcast run {e(summary.run_id)}: accuracy</title><style>{_STYLE}</style></head>
<body>
<h1>Run {e(summary.run_id)}: accuracy</h1>
<p id="frequency">{summary.frequency.adjective.capitalize()} models: each period one
{summary.frequency.unit} (UTC); errors measured over {summary.frequency.units}, seasonal-naive
is {summary.naive_rule}.</p>
<p>{summary.scored} of {summary.customers} customers scored on their holdout;
<strong>{summary.beat_naive}</strong> beat seasonal-naive (lower backtest WAPE, the measure
the quality gate compares; sMAPE, MASE and RMSE beside it below). Generated {generated}.</p>
<h2>What became of the models</h2>
<table id="decisions"><tr><th>outcome</th><th>customers</th></tr>
<tr><td>made live</td><td>{summary.live}</td></tr>
<tr><td>not made live: {GATE}</td><td>{summary.rejected}</td></tr>
<tr><td>not made live: superseded by a newer run</td><td>{summary.superseded}</td></tr>
<tr><td>not made live: training failed</td><td>{summary.failed}</td></tr>
<tr><td>not decided yet</td><td>{summary.undecided}</td></tr>
<tr><td>no exported forecast</td><td>{summary.not_exported}</td></tr>
</table>
{families}
<h2>Backtest error of the served models across the fleet</h2>
<table id="measures"><tr><th rowspan="2">measure</th><th colspan="3">model</th>
<th colspan="3">seasonal-naive</th><th rowspan="2">customers</th></tr>
<tr><th>p10</th><th>median</th><th>p90</th><th>p10</th><th>median</th><th>p90</th></tr>
{measure_rows}</table>
<p>MASE scales the MAE by the in-sample MAE of seasonal-naive on the fitted window; it and
WAPE are left out where undefined (a flat history, an all-zero holdout).</p>
<img id="chart" alt="Histogram of backtest WAPE, model vs seasonal-naive"
 src="data:image/png;base64,{chart}">
<h2>Highest model WAPE</h2>
<table id="worst"><tr><th>customer</th><th>WAPE</th><th>naive WAPE</th><th>sMAPE</th><th>MASE</th></tr>
{worst_rows}</table>
<h2>Failed customers{" (first " + str(worst) + ")" if summary.failed > worst else ""}</h2>
<table id="failed"><tr><th>customer</th><th>reason</th></tr>{failure_rows}</table>
</body></html>
"""
