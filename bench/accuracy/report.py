"""make accuracy's outputs: the tables on the terminal, the JSON of every figure, the chart
and the README's "Accuracy" section, with issue 39's targets (daily) and issue 42's
(hourly) marked met or not."""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from bench.accuracy import peers
from bench.accuracy.datasets import (
    DAILY,
    HOURLY,
    MIN_FIT_DAYS,
    ROLLING_EVERY_DAYS,
    DataSet,
    window_title,
)
from bench.accuracy.metrics import Summary
from bench.measure import Machine

if TYPE_CHECKING:
    from bench.accuracy.fleetcast_run import FleetcastRun

README_HEADING = "## Accuracy"
# The hourly part's subsection, the last of the Accuracy section.
HOURLY_HEADING = "### Hourly: day-ahead and 30 days of hours"
FLEETCAST = "fleetcast"
PROPHET = "stock Prophet()"
NAIVE = "seasonal naive"
MEDIAN = "median of the statsforecast models"
MLFORECAST = "mlforecast LightGBM"
AUTOGLUON_ENSEMBLE = "AutoGluon ensemble"
# The hourly part's two seasonal naives: the last day repeated, the last week repeated.
NAIVE_DAY = "seasonal naive 24 h"
NAIVE_WEEK = "seasonal naive 168 h"
NAIVES = (NAIVE, NAIVE_DAY, NAIVE_WEEK)
# Issue 39's bars: fleetcast's median WAPE, mean WAPE and mean wQL each at least 5% below
# the best peer's; its 80% interval covering 77-83% of held-back days; beating seasonal
# naive (WAPE) on at least 90% of customers.
MARGIN = 0.05
COVERAGE_TARGET = (0.77, 0.83)
BEATS_NAIVE_TARGET = 0.90
# Issue 39: fleetcast's CPU per customer at least this many times less than AutoGluon's
# medium_quality (its ensemble's row: the whole fit, every base model, and its predict).
AUTOGLUON_CPU_RATIO_TARGET = 20.0
PACKAGES = ("prophet", "statsforecast", "numpy", "pandas", "cmdstanpy")
# The peers' own environments: their pins are these requirements files'.
PEER_PINS = {
    "statsforecast": "peers.in",
    "mlforecast": "peers.in",
    "lightgbm": "peers.in",
    "autogluon.timeseries": "autogluon.in",
}


@dataclass(frozen=True)
class MethodResult:
    name: str
    wape: dict[str, float]
    mase: dict[str, float]
    summary: Summary
    cpu_ms_per_customer: float
    forecasts: int
    # Customers whose WAPE is below seasonal naive's, of those both have one.
    beats_naive: tuple[int, int] = (0, 0)
    # Per customer, mean wQL (NaN without quantiles).
    wql: dict[str, float] | None = None

    @property
    def beats_naive_share(self) -> float:
        wins, total = self.beats_naive
        return wins / total if total else math.nan

    def wapes_list(self, customers: list[Any]) -> list[float]:
        return [self.wape[c.customer_id] for c in customers]


@dataclass(frozen=True)
class DataSetResult:
    data_set: DataSet
    customers: list[str]
    # The customers every method forecast the whole horizon for: the summaries' customers.
    scored: list[str]
    too_short: list[str]
    readings: int
    horizon: int
    methods: dict[str, MethodResult]
    beats_naive: int
    beats_naive_of: int
    median_members: list[str]
    # fleetcast's jobs: their CPU, the customers trained, failed and incomplete, settings.
    fleetcast_run: FleetcastRun
    fit_days: list[int]
    # The held-back days most customers share, e.g. "2013-12-02 to 2013-12-31 (95 of 97 customers)".
    horizon_dates: str
    seconds: float
    # 0: the last horizon's days; 1: the horizon's days before those (datasets.WINDOWS).
    window: int = 0
    # AutoGluon's leaderboard and fit CPU (autogluon_peers' JSON), or why it did not run.
    autogluon: dict[str, Any] | None = None
    # ModelFrequency of fleetcast's models and the periods of every series: D or H.
    frequency: str = DAILY.model_frequency
    # The hourly part's horizon, e.g. "day-ahead (the first 24 hours)"; "" for daily.
    horizon_title: str = ""
    # The window's days when ``horizon`` counts fewer periods than it holds (day-ahead).
    held_back_days: int = 0

    @property
    def hourly(self) -> bool:
        return self.frequency == HOURLY.model_frequency

    @property
    def unit(self) -> str:
        return HOURLY.unit if self.hourly else DAILY.unit

    @property
    def window_title(self) -> str:
        if self.hourly:
            days = window_title(self.window, self.horizon_days)
            return f"{days}, {self.horizon_title}"
        return window_title(self.window, self.horizon)

    @property
    def horizon_days(self) -> int:
        """The held-back days (the hourly part's whole window, whichever its horizon)."""
        return self.held_back_days or self.horizon

    @property
    def peers(self) -> list[MethodResult]:
        return [m for name, m in self.methods.items() if name != FLEETCAST]

    @property
    def beats_naive_share(self) -> float:
        return self.beats_naive / self.beats_naive_of if self.beats_naive_of else math.nan

    def best_peer(self, measure: str) -> MethodResult | None:
        """The peer with the lowest ``measure`` (a Summary field), among those with one."""
        found = [p for p in self.peers if math.isfinite(getattr(p.summary, measure))]
        return min(found, key=lambda p: getattr(p.summary, measure)) if found else None

    def targets(self) -> dict[str, bool]:
        """Issue 39's targets on a daily set and window, issue 42's on an hourly one: met
        or not."""
        ours = self.methods[FLEETCAST].summary
        verdicts: dict[str, bool] = {}
        for measure, label in (
            ("median_wape", "median WAPE"),
            ("mean_wape", "mean WAPE"),
            ("mean_wql", "mean wQL"),
        ):
            best = self.best_peer(measure)
            mine = getattr(ours, measure)
            theirs = getattr(best.summary, measure) if best else math.nan
            name = f"{best.name} {theirs:.3f}" if best else "none"
            if self.hourly:
                target = f"{label} {_n(mine)} below every peer's (the best: {name})"
                verdicts[target] = bool(math.isfinite(mine) and mine < theirs)
                continue
            target = f"{label} {_n(mine)} at least {MARGIN:.0%} below the best peer's ({name})"
            verdicts[target] = bool(math.isfinite(mine) and mine <= theirs * (1 - MARGIN))
        low, high = COVERAGE_TARGET
        verdicts[
            f"80% interval covers {low:.0%}-{high:.0%} of {self.unit}s ({_pct(ours.coverage_80)})"
        ] = low <= ours.coverage_80 <= high
        if not self.hourly:
            verdicts[
                f"beats seasonal naive on at least {BEATS_NAIVE_TARGET:.0%} of customers "
                f"({_pct(self.beats_naive_share)})"
            ] = self.beats_naive_share >= BEATS_NAIVE_TARGET
            verdicts.update(self._cpu_target())
        return verdicts

    def autogluon_cpu_ratio(self) -> float:
        """AutoGluon medium_quality's CPU per customer over fleetcast's, on these customers
        (NaN without AutoGluon's run)."""
        theirs = self.methods.get(AUTOGLUON_ENSEMBLE)
        ours = self.methods[FLEETCAST].cpu_ms_per_customer
        if theirs is None or not ours > 0:
            return math.nan
        return theirs.cpu_ms_per_customer / ours

    def _cpu_target(self) -> dict[str, bool]:
        ratio = self.autogluon_cpu_ratio()
        if not math.isfinite(ratio):
            return {}
        ours = self.methods[FLEETCAST].cpu_ms_per_customer
        theirs = self.methods[AUTOGLUON_ENSEMBLE].cpu_ms_per_customer
        target = (
            f"CPU per customer at least {AUTOGLUON_CPU_RATIO_TARGET:.0f}x less than AutoGluon "
            f"medium_quality's ({ours:,.0f} ms against {theirs:,.0f} ms: {ratio:.1f}x)"
        )
        return {target: ratio >= AUTOGLUON_CPU_RATIO_TARGET}

    @property
    def issue(self) -> int:
        """The issue whose targets :meth:`targets` checks."""
        return 42 if self.hourly else 39


def versions() -> dict[str, str]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "-"
    # The code measured: the commit of this checkout (fleetcast's engine included).
    found["fleetcast commit"] = _git("rev-parse", "HEAD")
    found["fleetcast branch"] = _git("rev-parse", "--abbrev-ref", "HEAD")
    changed = _git("status", "--porcelain", "--", "containers", "layers", "src", "template.yaml")
    found["fleetcast engine changed since that commit"] = "yes" if changed else "no"
    # The peers live in their own environments, not here: their pins are their files'.
    requirements = Path(__file__).resolve().parents[2] / "requirements"
    for package, file in PEER_PINS.items():
        for line in (requirements / file).read_text().splitlines():
            if line.startswith(f"{package}=="):
                found[package] = line.split("==", 1)[1]
    return found


def _git(*arguments: str) -> str:
    completed = subprocess.run(
        ["git", *arguments], capture_output=True, text=True, cwd=Path(__file__).resolve().parent
    )
    return completed.stdout.strip() if completed.returncode == 0 else "-"


def _n(value: float, digits: int = 3) -> str:
    if not math.isfinite(value):
        return "-"
    # An interval that explodes (AutoETS' on some hourly series) gives a wQL of 1e60.
    return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.1e}"


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:.0%}"


def _cpu(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.2g} ms"


def _rows(result: DataSetResult) -> list[list[str]]:
    rows = []
    for method in result.methods.values():
        s = method.summary
        wins, total = method.beats_naive
        beats = (
            f"{wins}/{total} ({method.beats_naive_share:.0%})"
            if total and method.name not in NAIVES
            else ""
        )
        rows.append(
            [
                method.name,
                _n(s.median_wape),
                _n(s.mean_wape),
                _n(s.median_mase),
                _n(s.mean_mase),
                _n(s.mean_wql),
                _pct(s.coverage_80),
                beats,
                _cpu(method.cpu_ms_per_customer),
            ]
        )
    return rows


HEADERS = (
    "method",
    "median WAPE",
    "mean WAPE",
    "median MASE",
    "mean MASE",
    "mean wQL",
    "80% coverage",
    "beats naive (WAPE)",
    "CPU per customer",
)


def print_tables(results: list[DataSetResult], machine: Machine, console: Console) -> None:
    for result in results:
        table = Table(
            title=f"{result.data_set.title}, {result.window_title}: "
            f"{len(result.customers)} customers, {result.horizon} {result.unit}s scored",
            header_style="bold",
        )
        for index, column in enumerate(HEADERS):
            table.add_column(column, justify="left" if index == 0 else "right")
        for row in _rows(result):
            table.add_row(*row, style="bold" if row[0] == FLEETCAST else None)
        console.print(table)
        for target, met in result.targets().items():
            console.print(
                f"  issue {result.issue}: {target}: {'met' if met else '[red]NOT met[/]'}"
            )
    console.print(f"[dim]{machine.summary()}[/]")


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def write_results(
    results: list[DataSetResult],
    machine: Machine,
    package_versions: dict[str, str],
    seconds: float,
    path: Path,
    hourly_seconds: float = math.nan,
) -> None:
    """Every figure of ``results`` as JSON (``seconds``: the daily part's time,
    ``hourly_seconds`` the hourly part's). A run without daily (or hourly) results keeps
    the daily (or hourly) ones ``path`` already holds, and the run that measured them: the
    hourly part is run alone (``--hourly-only``) without losing the daily figures."""
    run = {"machine": asdict(machine), "versions": package_versions, "seconds": seconds}
    frequencies = {r.frequency for r in results}
    kept: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    document: dict[str, Any] = {**run, "data_sets": []}
    if DAILY.model_frequency not in frequencies and kept:
        document.update({key: kept[key] for key in run if key in kept})
    if HOURLY.model_frequency in frequencies:
        document["hourly_run"] = {**run, "seconds": hourly_seconds}
    elif "hourly_run" in kept:
        document["hourly_run"] = kept["hourly_run"]
    document["data_sets"] = [
        entry
        for entry in kept.get("data_sets", [])
        if entry.get("frequency", DAILY.model_frequency) not in frequencies
    ] + [_result_json(r) for r in results]
    path.write_text(json.dumps(_clean(document), indent=1, ensure_ascii=False) + "\n")


def _result_json(r: DataSetResult) -> dict[str, Any]:
    return {
        "key": r.data_set.key,
        "frequency": r.frequency,
        "window": r.window,
        "window_title": r.window_title,
        "title": r.data_set.title,
        "description": r.data_set.description,
        "file": f"shared/accuracy-data/{r.data_set.file}",
        "readings": r.readings,
        "horizon_days": r.horizon_days,
        "horizon_periods": r.horizon,
        "horizon_title": r.horizon_title,
        "held_back": r.horizon_dates,
        "min_fit_days": MIN_FIT_DAYS,
        "customers": len(r.customers),
        "scored_customers": len(r.scored),
        "left_out_too_short": r.too_short,
        "fit_days": {
            "min": min(r.fit_days),
            "median": sorted(r.fit_days)[len(r.fit_days) // 2],
            "max": max(r.fit_days),
        },
        "median_members": r.median_members,
        "targets": r.targets(),
        "autogluon": r.autogluon,
        "beats_naive": {
            "customers": r.beats_naive,
            "of": r.beats_naive_of,
            "share": r.beats_naive_share,
        },
        "fleetcast_run": {
            "training_cpu_seconds": r.fleetcast_run.training_cpu_seconds,
            "processing_cpu_seconds": r.fleetcast_run.processing_cpu_seconds,
            "trained": r.fleetcast_run.trained,
            "failed": r.fleetcast_run.failed,
            "incomplete_forecasts": r.fleetcast_run.incomplete,
            "hyperparameters": r.fleetcast_run.hyperparameters,
            "instances": r.fleetcast_run.instances,
        },
        "methods": {
            name: {
                "summary": asdict(m.summary),
                "cpu_ms_per_customer": m.cpu_ms_per_customer,
                "forecasts": m.forecasts,
                "beats_naive": {
                    "customers": m.beats_naive[0],
                    "of": m.beats_naive[1],
                    "share": m.beats_naive_share,
                },
                "wape": m.wape,
                "mase": m.mase,
                "wql": m.wql,
            }
            for name, m in r.methods.items()
        },
        "seconds": r.seconds,
    }


def draw_chart(results: list[DataSetResult], machine: Machine, path: Path) -> None:
    """A panel per data set (rows) and window (columns): each method's per-customer WAPE as
    a box (median line, quartile box, whiskers to 1.5 IQR) with the customers as dots, its
    mean WAPE and mean wQL as markers, its 80% interval's coverage in its label; fleetcast's
    box in colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys(r.data_set.key for r in results))
    windows = sorted({r.window for r in results})
    rows_of_panels = max(len(next(iter(results)).methods), 1) if results else 1
    figure, axes = plt.subplots(
        len(keys),
        len(windows),
        figsize=(9 * len(windows), (1.2 + 0.32 * rows_of_panels) * len(keys)),
        squeeze=False,
    )
    for result in results:
        _draw_panel(axes[keys.index(result.data_set.key), windows.index(result.window)], result)
    figure.suptitle(f"make accuracy: {machine.summary()}", fontsize=8)
    figure.text(
        0.5,
        0.005,
        "Box: quartiles, whiskers to 1.5 IQR; dots: customers; red diamond: mean WAPE; "
        "blue cross: mean wQL (0.1, 0.5, 0.9); in brackets: the 80% interval's coverage; "
        "dashed line: fleetcast's median WAPE.",
        ha="center",
        fontsize=8,
    )
    figure.tight_layout(rect=(0, 0.015, 1, 0.99))
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _draw_panel(axis: Any, result: DataSetResult) -> None:
    """One data set and window of :func:`draw_chart`."""
    import numpy as np

    names = list(result.methods)
    data = [
        [w for w in result.methods[n].wape.values() if w is not None and math.isfinite(w)]
        for n in names
    ]
    boxes = axis.boxplot(
        data,
        vert=False,
        showfliers=False,
        patch_artist=True,
        widths=0.6,
        medianprops={"color": "black"},
    )
    for patch, name in zip(boxes["boxes"], names, strict=True):
        patch.set_facecolor("#e67e22" if name == FLEETCAST else "#d5dbdb")
    rng = np.random.default_rng(0)
    for position, values in enumerate(data, start=1):
        axis.scatter(
            values,
            position + rng.uniform(-0.18, 0.18, len(values)),
            s=5,
            color="#34495e",
            alpha=0.4,
            zorder=3,
        )
    for position, name in enumerate(names, start=1):
        summary = result.methods[name].summary
        if math.isfinite(summary.mean_wape):
            axis.plot(summary.mean_wape, position, marker="D", color="#c0392b", ms=5, zorder=4)
        if math.isfinite(summary.mean_wql):
            axis.plot(summary.mean_wql, position, marker="X", color="#2471a3", ms=6, zorder=4)
    ours = result.methods[FLEETCAST].summary.median_wape
    if math.isfinite(ours):
        axis.axvline(ours, color="#e67e22", linestyle="--", linewidth=1, zorder=1)
    labels = [
        f"{n} ({_pct(result.methods[n].summary.coverage_80)})"
        if math.isfinite(result.methods[n].summary.coverage_80)
        else n
        for n in names
    ]
    axis.set_yticks(range(1, len(names) + 1), labels, fontsize=8)
    axis.invert_yaxis()
    upper = max(np.percentile(v, 95) for v in data if v)
    axis.set_xlim(0, upper * 1.1)
    hidden = sum(w > upper * 1.1 for values in data for w in values)
    axis.set_xlabel(f"WAPE per customer ({hidden} beyond the axis's end not drawn)", fontsize=8)
    axis.set_title(
        f"{result.data_set.title}, {result.window_title}\n{len(result.customers)} "
        f"customers, held back {result.horizon_dates}",
        fontsize=9,
    )


def _markdown_table(result: DataSetResult) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "| --- |" + " ---: |" * (len(HEADERS) - 1)]
    for row in _rows(result):
        cells = [f"**{c}**" if row[0] == FLEETCAST and c else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _result_paragraph(result: DataSetResult) -> str:
    """One set and window (or hourly horizon): who was measured, its table, its targets."""
    verdicts = "; ".join(
        f"{target}: {'**met**' if met else '**not met**'}"
        for target, met in result.targets().items()
    )
    left_out = (
        f" ({len(result.too_short)} left out: fewer than {MIN_FIT_DAYS} days before the horizon)"
        if result.too_short
        else ""
    )
    missing = sorted(set(result.customers) - set(result.scored))
    why = {
        **{c: "its export ends before the horizon does" for c in result.fleetcast_run.incomplete},
        **{c: f"training failed ({r})" for c, r in result.fleetcast_run.failed.items()},
    }
    failed = (
        f" Summaries over the {len(result.scored)} customers every method forecast the "
        "whole horizon for; left out of them, and counted as losses against naive: "
        + "; ".join(f"{c}, {why.get(c, 'no fleetcast forecast')}" for c in missing)
        + "."
        if missing
        else ""
    )
    shortest, longest = min(result.fit_days), max(result.fit_days)
    history = f"{shortest}" if shortest == longest else f"{shortest}-{longest}"
    no_interval = [
        f"{m.name} for {m.summary.customers - m.summary.customers_with_interval}"
        for m in result.methods.values()
        if 0 < m.summary.customers_with_interval < m.summary.customers
    ]
    intervals = (
        " No 80% interval (left out of that method's wQL and coverage): "
        + "; ".join(no_interval)
        + " customers."
        if no_interval
        else ""
    )
    heading = (
        f"**{result.data_set.title}**: {result.data_set.description}"
        if result.window == 0 and not result.hourly
        else f"**{result.data_set.title}**"
    )
    return (
        f"{heading}, **{result.window_title}**: "
        f"{len(result.customers)} customers{left_out}, {history} days of history before "
        "the horizon; held back: "
        f"{result.horizon_dates}.{failed}{intervals}\n\n"
        f"{_markdown_table(result)}\n\nIssue {result.issue}'s targets here: {verdicts}.\n"
    )


def _run_line(
    machine: Machine, seconds: float, what: str, notes: str = "", partial: str = ""
) -> str:
    """Which run measured the figures: ``what`` (the command), how long, where, what code."""
    code = versions()
    engine = (
        f"fleetcast at commit `{code['fleetcast commit'][:12]}` (branch "
        f"`{code['fleetcast branch']}`)"
    )
    return f"{what} ({seconds / 60:.0f} min{notes}){partial} on {machine.summary()}; {engine}."


def _autogluon_skipped(results: list[DataSetResult]) -> str:
    autogluon = next((r.autogluon for r in results if r.autogluon), None)
    if autogluon and "skipped" in autogluon:
        return f" AutoGluon did not run ({autogluon['skipped']})."
    return ""


def _partial(results: list[DataSetResult], planned: int | None) -> str:
    if planned and len(results) < planned:
        return (
            f" **Partial: {len(results)} of its {planned} sets and windows measured so far** "
            "(the run writes every output after each one)"
        )
    return ""


def readme_section(
    results: list[DataSetResult],
    machine: Machine,
    chart: str,
    figures: str,
    seconds: float,
    peers_cached: bool = False,
    planned: int | None = None,
    hourly: str = "",
) -> str:
    """The README's Accuracy section from the daily ``results``; ``peers_cached``: the peers'
    forecasts and CPU figures were read from ``--peers-cache`` (an earlier full run on the
    same inputs); ``hourly``: the hourly subsection (:func:`hourly_section`), put last."""
    members = ", ".join(results[0].median_members) if results else ""
    horizon = results[0].horizon if results else 0
    cached = _cached(peers_cached)
    skipped = _autogluon_skipped(results)
    run = _run_line(machine, seconds, "`make accuracy`", cached, _partial(results, planned))
    parts = "\n".join(_result_paragraph(r) for r in results)
    return f"""{README_HEADING}

{run}

Real public meter readings, never generated data: sources, commits and licences in
[`bench/accuracy/data/README.md`](bench/accuracy/data/README.md). Two windows per set, each
{horizon} days ({horizon}: the forecast export's horizon, `ForecastExportDays`' default):
the **last {horizon} days**, and **the {horizon} days before them**, each method fitted only
on the days before its window, so no figure rests on one month. **fleetcast** is the forecast
a customer is served: its processing and training jobs run on the readings as uploaded,
with the settings a deployed stack gives them (the defaults, and `DefaultHolidayCountry`
set to the set's country, as a deployment there would set it), and each forecast and its
80% interval (`yhat_lower`, `yhat_upper`) are read from the run's forecast export. The
peers get the same readings as daily totals (pandas' per-day sums, a day without readings
0), without holidays: seasonal naive (last week repeated; its interval from its own
in-sample errors k weeks apart), stock `Prophet()` (its default 80% interval),
statsforecast's AutoETS, AutoTheta and AutoARIMA (season length 7, `level=[80]`) and the
day-by-day {MEDIAN} ({members}; the median of their bounds too); **{MLFORECAST}**: one
LightGBM model across the set's customers as a user writes it in twenty lines (mlforecast,
lags of 7, 14 and 28 days, rolling means, day of week, day of year and month, each series
scaled by its own level; its interval mlforecast's conformal `PredictionIntervals` over two
windows); and **AutoGluon-TimeSeries** `presets="medium_quality"` (`eval_metric="WQL"`,
quantiles 0.1, 0.5 and 0.9): its **ensemble** and **each base model** it trained, as
`predictor.predict(model=...)` gives them. Its pretrained members (Chronos-2, Toto) cannot
download their weights here: with `HF_HUB_OFFLINE=1` AutoGluon skips them at once.{skipped}
`make accuracy` installs AutoGluon into `.venv-autogluon` the first time (torch with PyPI's
CUDA wheels, about 5.8 GB: PyPI has no CPU-only torch for Linux x86_64); `make test` and
`make accuracy-smoke` never do.

WAPE = sum |error| / sum actual over the held-back days; MASE = mean |error| / seasonal
naive's in-sample MAE on the fit window; **wQL** (Amazon Forecast's weighted quantile loss)
= 2 sum max(q (A - F_q), (q - 1)(A - F_q)) / sum |A|, the mean over q = 0.1, 0.5 and 0.9, the
80% interval's bounds as the 0.1 and 0.9 quantiles and the point forecast as the 0.5 where a
method has no median (fleetcast's export has none); all per customer, then the median and
mean over customers. **80% coverage**: the share of held-back days inside the 80% interval
(77-83% is honest). fleetcast's own figures move with the fleet trees' draw of samples: by
under 1% on most, by up to 3-4% on a few (three runs with the draws' seeds moved,
docs/model-families.md), so a lead or a lag smaller than that is a draw's as much as a
method's. "beats naive": customers whose WAPE is below seasonal naive's. CPU per
customer: fleetcast's training job (every worker process, all candidates, export and
archives) divided by its customers; Prophet's fit and predict with its CmdStan process;
statsforecast's fit and forecast on one core (after one untimed warm-up fit per model);
mlforecast's fits (the conformal windows' included) and forecast, divided by the customers;
AutoGluon's whole fit (every model, its validation and the ensemble) for the ensemble, and
for a base model its share of that fit in proportion to its fit time, plus its own
`predict` (where the local models fit each series), divided by the customers.

{parts}
Every figure, per customer too: [`{figures}`]({figures}); chart: [`{chart}`]({chart}).

![per-customer WAPE by method]({chart})
{"" if not hourly else chr(10) + hourly}"""


def _cached(peers_cached: bool) -> str:
    """What the run line says of the peers' figures read from ``--peers-cache``."""
    if not peers_cached:
        return ""
    return (
        "; the peers' forecasts and CPU figures from an earlier full run on the same inputs, "
        "read from `--peers-cache`"
    )


def hourly_section(
    results: list[DataSetResult],
    machine: Machine,
    figures: str,
    seconds: float,
    planned: int | None = None,
    command: str = "`make accuracy-hourly`",
    peers_cached: bool = False,
) -> str:
    """The Accuracy section's hourly subsection (issue 42), from the hourly ``results``
    (``command``: the run that measured them)."""
    run = _run_line(machine, seconds, command, _cached(peers_cached), _partial(results, planned))
    autogluon = next((r.autogluon for r in results if r.autogluon), None)
    limit = (
        f"`time_limit={autogluon['time_limit_seconds']}` seconds for its fit on each set"
        if autogluon and autogluon.get("time_limit_seconds")
        else "no time limit"
    )
    skipped = _autogluon_skipped(results)
    parts = "\n".join(_result_paragraph(r) for r in results)
    days = results[0].horizon_days if results else 0
    return f"""{HOURLY_HEADING}

{run}

Issue 42's part: the same three sets, each customer's readings summed to hours (pandas'
per-hour sums of the readings as the source wrote them, local time; an hour without
readings 0), the last {days} days held back (one window: the daily part's
second window is not run hourly). **fleetcast** is run as above with `ModelFrequency=H`:
hourly models, and the forecast export's {days} days of hours ({days * 24}). Each
method is fitted once and forecasts the {days * 24} hours; **day-ahead** scores the first 24
of them, **{days} days** all {days * 24}. **Day-ahead from a rolling origin** is how an operator
uses it, every day the next 24 hours from the readings up to that day: every method is fitted
again at origins {ROLLING_EVERY_DAYS} days apart over the same window (its days 1, {1 + ROLLING_EVERY_DAYS},
..., each origin on another weekday), each time on every hour before the origin, and forecasts
the next 24 hours (fleetcast: its jobs on the readings up to the origin, as a daily upload
runs them; AutoGluon with `prediction_length` 24); a customer's origins' hours are scored
end to end as one horizon, and CPU per customer is one origin's (the mean over the origins;
fleetcast's jobs' CPU in the results file is all of them). The peers get the hourly totals: **{NAIVE_DAY}**
(the last day repeated) and **{NAIVE_WEEK}** (the last week), each with its interval from
its own in-sample errors; statsforecast's **MSTL** (seasons 24 and 168, its default
AutoETS trend), **AutoETS** and **AutoTheta** (season 24), `level=[80]`, each on the last
{peers.HOURLY_STATS_HISTORY} hours of a series ({peers.HOURLY_STATS_HISTORY // 168} weeks: on
12 weeks the three took 4 s of CPU a customer, on a year of hours about four times that),
and their hour-by-hour {MEDIAN}; **{MLFORECAST}** hourly (lags of 24, 48, 168 and 336
hours, rolling means of a day and a week, hour and day of week; conformal interval over
two {days * 24}-hour windows) on the whole history; **AutoGluon-TimeSeries** `medium_quality`
hourly (`freq="h"`, offline as above) on the whole history, with {limit}.{skipped}
MASE is scaled by seasonal naive 24's in-sample MAE on the hourly fit series; wQL and the
80% coverage as above, over hours; "beats naive": customers whose WAPE is below both
seasonal naives'. Issue 42's targets: fleetcast's median and mean WAPE and mean wQL below
every peer's, its interval covering 77-83% of held-back hours.

{parts}
Every figure, per customer too: [`{figures}`]({figures}) (`"frequency": "H"`).
"""


def update_readme(readme: Path, section: str) -> None:
    """Replace the ``## Accuracy`` section (up to the next ``## `` heading), or put it
    before ``## Measured`` the first time. A section without the hourly subsection keeps
    the one the README has (a run without the hourly part)."""
    text = readme.read_text()
    pattern = re.compile(rf"^{re.escape(README_HEADING)}\n.*?(?=^## )", re.MULTILINE | re.DOTALL)
    found = pattern.search(text)
    if found:
        if HOURLY_HEADING not in section and HOURLY_HEADING in found.group(0):
            kept = found.group(0)[found.group(0).index(HOURLY_HEADING) :]
            section = section.rstrip("\n") + "\n\n" + kept
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        anchor = re.search(r"^## Measured\n", text, re.MULTILINE)
        if anchor is None:
            raise ValueError(f"{readme} has neither '{README_HEADING}' nor '## Measured'")
        text = text[: anchor.start()] + section.rstrip("\n") + "\n\n" + text[anchor.start() :]
    readme.write_text(text)


def update_readme_hourly(readme: Path, subsection: str) -> None:
    """Replace the Accuracy section's hourly subsection (or add it at the section's end),
    leaving the rest of the section, the daily figures, as they are."""
    text = readme.read_text()
    section = re.search(
        rf"^{re.escape(README_HEADING)}\n.*?(?=^## )", text, re.MULTILINE | re.DOTALL
    )
    if section is None:
        raise ValueError(f"{readme} has no '{README_HEADING}' section to add the hourly part to")
    body = section.group(0)
    if HOURLY_HEADING in body:
        body = body[: body.index(HOURLY_HEADING)]
    body = body.rstrip("\n") + "\n\n" + subsection.rstrip("\n") + "\n\n"
    readme.write_text(text[: section.start()] + body + text[section.end() :])
