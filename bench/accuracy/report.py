"""make accuracy's outputs: the tables on the terminal, the JSON of every figure, the chart
and the README's "Accuracy" section, with issue 26's targets marked met or not."""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.accuracy.datasets import MIN_FIT_DAYS, DataSet
from bench.accuracy.metrics import Summary
from bench.measure import Machine

README_HEADING = "## Accuracy"
FLEETCAST = "fleetcast"
PROPHET = "stock Prophet()"
NAIVE = "seasonal naive"
MEDIAN = "median of the statsforecast models"
# Issue 26's bar for the share of customers fleetcast beats seasonal naive on (WAPE).
BEATS_NAIVE_TARGET = 0.85
PACKAGES = ("prophet", "statsforecast", "numpy", "pandas", "cmdstanpy")


@dataclass(frozen=True)
class MethodResult:
    name: str
    wape: dict[str, float]
    mase: dict[str, float]
    summary: Summary
    cpu_ms_per_customer: float
    forecasts: int

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
    fleetcast_training_cpu_seconds: float
    fleetcast_processing_cpu_seconds: float
    fleetcast_trained: int
    fleetcast_failed: dict[str, str]
    fleetcast_incomplete: list[str]
    fleetcast_hyperparameters: dict[str, str]
    fleetcast_instances: int
    fit_days: list[int]
    # The held-back days most customers share, e.g. "2013-12-02 to 2013-12-31 (95 of 97 customers)".
    horizon_dates: str
    seconds: float

    @property
    def peers(self) -> list[MethodResult]:
        return [m for name, m in self.methods.items() if name != FLEETCAST]

    @property
    def beats_naive_share(self) -> float:
        return self.beats_naive / self.beats_naive_of if self.beats_naive_of else math.nan

    def targets(self) -> dict[str, bool]:
        ours = self.methods[FLEETCAST].summary
        best_median = min(p.summary.median_wape for p in self.peers)
        best_mean = min(p.summary.mean_wape for p in self.peers)
        return {
            "median WAPE lower than every peer's": ours.median_wape < best_median,
            "mean WAPE lower than every peer's": ours.mean_wape < best_mean,
            f"beats seasonal naive on at least {BEATS_NAIVE_TARGET:.0%} of customers": (
                self.beats_naive_share >= BEATS_NAIVE_TARGET
            ),
        }


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
    # statsforecast lives in .venv-peers, not here: its pin is requirements/peers.in's.
    peers_in = Path(__file__).resolve().parents[2] / "requirements" / "peers.in"
    for line in peers_in.read_text().splitlines():
        if line.startswith("statsforecast=="):
            found["statsforecast"] = line.split("==", 1)[1]
    return found


def _git(*arguments: str) -> str:
    completed = subprocess.run(
        ["git", *arguments], capture_output=True, text=True, cwd=Path(__file__).resolve().parent
    )
    return completed.stdout.strip() if completed.returncode == 0 else "-"


def _n(value: float, digits: int = 3) -> str:
    return "-" if not math.isfinite(value) else f"{value:.{digits}f}"


def _cpu(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.2g} ms"


def _rows(result: DataSetResult) -> list[list[str]]:
    rows = []
    for method in result.methods.values():
        s = method.summary
        beats = (
            f"{result.beats_naive}/{result.beats_naive_of} ({result.beats_naive_share:.0%})"
            if method.name == FLEETCAST
            else ""
        )
        rows.append(
            [
                method.name,
                _n(s.median_wape),
                _n(s.mean_wape),
                _n(s.median_mase),
                _n(s.mean_mase),
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
    "beats naive (WAPE)",
    "CPU per customer",
)


def print_tables(results: list[DataSetResult], machine: Machine, console: Console) -> None:
    for result in results:
        table = Table(
            title=f"{result.data_set.title}: {len(result.customers)} customers, "
            f"{result.horizon} days held back",
            header_style="bold",
        )
        for index, column in enumerate(HEADERS):
            table.add_column(column, justify="left" if index == 0 else "right")
        for row in _rows(result):
            table.add_row(*row, style="bold" if row[0] == FLEETCAST else None)
        console.print(table)
        for target, met in result.targets().items():
            console.print(f"  {target}: {'met' if met else '[red]NOT met[/]'}")
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
) -> None:
    document = {
        "machine": asdict(machine),
        "versions": package_versions,
        "seconds": seconds,
        "data_sets": [
            {
                "key": r.data_set.key,
                "title": r.data_set.title,
                "description": r.data_set.description,
                "file": f"shared/accuracy-data/{r.data_set.file}",
                "readings": r.readings,
                "horizon_days": r.horizon,
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
                "beats_naive": {
                    "customers": r.beats_naive,
                    "of": r.beats_naive_of,
                    "share": r.beats_naive_share,
                },
                "fleetcast_run": {
                    "training_cpu_seconds": r.fleetcast_training_cpu_seconds,
                    "processing_cpu_seconds": r.fleetcast_processing_cpu_seconds,
                    "trained": r.fleetcast_trained,
                    "failed": r.fleetcast_failed,
                    "incomplete_forecasts": r.fleetcast_incomplete,
                    "hyperparameters": r.fleetcast_hyperparameters,
                    "instances": r.fleetcast_instances,
                },
                "methods": {
                    name: {
                        "summary": asdict(m.summary),
                        "cpu_ms_per_customer": m.cpu_ms_per_customer,
                        "forecasts": m.forecasts,
                        "wape": m.wape,
                        "mase": m.mase,
                    }
                    for name, m in r.methods.items()
                },
                "seconds": r.seconds,
            }
            for r in results
        ],
    }
    path.write_text(json.dumps(_clean(document), indent=1, ensure_ascii=False) + "\n")


def draw_chart(results: list[DataSetResult], machine: Machine, path: Path) -> None:
    """Per data set, each method's per-customer WAPE as a box (median line, quartile box,
    whiskers to 1.5 IQR) with the customers as dots; fleetcast's box in colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    figure, axes = plt.subplots(len(results), 1, figsize=(10, 3.6 * len(results)), squeeze=False)
    for axis, result in zip(axes[:, 0], results, strict=True):
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
                s=6,
                color="#34495e",
                alpha=0.45,
                zorder=3,
            )
        for position, name in enumerate(names, start=1):
            mean = result.methods[name].summary.mean_wape
            if math.isfinite(mean):
                axis.plot(mean, position, marker="D", color="#c0392b", markersize=5, zorder=4)
        ours = result.methods[FLEETCAST].summary.median_wape
        if math.isfinite(ours):
            axis.axvline(ours, color="#e67e22", linestyle="--", linewidth=1, zorder=1)
        axis.set_yticks(range(1, len(names) + 1), names)
        axis.invert_yaxis()
        upper = max(np.percentile(v, 95) for v in data if v)
        axis.set_xlim(0, upper * 1.1)
        hidden = sum(w > upper * 1.1 for values in data for w in values)
        axis.set_xlabel(f"WAPE per customer ({hidden} beyond the axis's end not drawn)", fontsize=9)
        axis.set_title(
            f"{result.data_set.title}\n{len(result.customers)} customers, last {result.horizon} days held back",
            fontsize=10,
        )
    figure.suptitle(f"make accuracy: {machine.summary()}", fontsize=8)
    figure.text(
        0.5,
        0.01,
        "Box: quartiles, whiskers to 1.5 IQR; dots: customers; red diamond: mean; "
        "dashed line: fleetcast's median.",
        ha="center",
        fontsize=8,
    )
    figure.tight_layout(rect=(0, 0.02, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _markdown_table(result: DataSetResult) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "| --- |" + " ---: |" * (len(HEADERS) - 1)]
    for row in _rows(result):
        cells = [f"**{c}**" if row[0] == FLEETCAST and c else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def readme_section(
    results: list[DataSetResult],
    machine: Machine,
    chart: str,
    figures: str,
    seconds: float,
    peers_cached: bool = False,
) -> str:
    """The README's Accuracy section; ``peers_cached``: the peers' forecasts and CPU
    figures were read from ``--peers-cache`` (an earlier full run on the same inputs)."""
    parts = []
    for result in results:
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
            **{c: "its export ends before the horizon does" for c in result.fleetcast_incomplete},
            **{c: f"training failed ({r})" for c, r in result.fleetcast_failed.items()},
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
        parts.append(
            f"**{result.data_set.title}**: {result.data_set.description}; "
            f"{len(result.customers)} customers{left_out}, {history} days of history before "
            "the horizon; held back: "
            f"{result.horizon_dates}.{failed}\n\n"
            f"{_markdown_table(result)}\n\nIssue 26's targets on this set: {verdicts}.\n"
        )
    members = ", ".join(results[0].median_members) if results else ""
    horizon = results[0].horizon if results else 0
    code = versions()
    engine = (
        f"fleetcast at commit `{code['fleetcast commit'][:12]}` (branch "
        f"`{code['fleetcast branch']}`)"
    )
    cached = (
        "; the peers' forecasts and CPU figures from an earlier full run on the same inputs, "
        "read from `--peers-cache`"
        if peers_cached
        else ""
    )
    return f"""{README_HEADING}

`make accuracy` ({seconds / 60:.0f} min{cached}) on {machine.summary()}; {engine}.

Real public meter readings, never generated data: sources, commits and licences in
[`bench/accuracy/data/README.md`](bench/accuracy/data/README.md). For every customer the
last {horizon} days are held back from every method ({horizon}: the forecast export's
horizon, `ForecastExportDays`' default). **fleetcast** is the forecast a customer is
served: its processing and training jobs run on the readings as uploaded, with the
settings a deployed stack gives them (the defaults, and `DefaultHolidayCountry` set to the
set's country, as a deployment there would set it: every family then learns each public
holiday's effect from the customer's history), and each forecast is read from the run's
forecast export. The peers get the same readings as daily totals (pandas' per-day sums, a
day without readings 0), without holidays: stock `Prophet()`, seasonal naive (last week repeated),
statsforecast's AutoETS, AutoTheta and AutoARIMA (season length 7), and the day-by-day
{MEDIAN} ({members}). One window per customer, its last {horizon} days: each set's dates
are below (a set that ends in December holds back December, holidays included; a rolling
origin over several windows would say more than one window does).

WAPE = sum |error| / sum actual over the held-back days; MASE = mean |error| / seasonal
naive's in-sample MAE on the fit window; both per customer, then the median and mean over
customers. "beats naive": customers whose WAPE is below seasonal naive's. CPU per
customer: fleetcast's training job (every worker process, all candidates, export and
archives) divided by its customers; Prophet's fit and predict with its CmdStan process;
statsforecast's fit and forecast on one core (after one untimed warm-up fit per model).

{chr(10).join(parts)}
Every figure, per customer too: [`{figures}`]({figures}); chart: [`{chart}`]({chart}).

![per-customer WAPE by method]({chart})
"""


def update_readme(readme: Path, section: str) -> None:
    """Replace the ``## Accuracy`` section (up to the next ``## `` heading), or put it
    before ``## Measured`` the first time."""
    text = readme.read_text()
    pattern = re.compile(rf"^{re.escape(README_HEADING)}\n.*?(?=^## )", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        anchor = re.search(r"^## Measured\n", text, re.MULTILINE)
        if anchor is None:
            raise ValueError(f"{readme} has neither '{README_HEADING}' nor '## Measured'")
        text = text[: anchor.start()] + section.rstrip("\n") + "\n\n" + text[anchor.start() :]
    readme.write_text(text)
