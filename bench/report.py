"""The suite's outputs: the table on the terminal, results.json, the chart, the README section."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.measure import Machine, Row

README_HEADING = "## Measured"


def _number(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.2f}x"


def _measured(row: Row) -> str:
    """What a target was held against: the ratio, or fleetcast's own figure."""
    if row.target_kind == "ratio_at_least":
        return _ratio(row)
    return f"{_number(row.fleetcast)} {row.unit}"


def _met(row: Row) -> str:
    return {True: "yes", False: "NO", None: "-"}[row.met]


def _spread(row: Row) -> str:
    return "-" if row.spread is None else f"{row.spread:.0%}"


def print_table(rows: Sequence[Row], machine: Machine, console: Console | None = None) -> None:
    table = Table(title="fleetcast vs the public AWS sample's approach", header_style="bold")
    for column, justify in (
        ("row", "left"),
        ("unit", "left"),
        ("fleetcast", "right"),
        ("baseline", "right"),
        ("ratio", "right"),
        ("target", "left"),
        ("met", "center"),
        ("reps", "right"),
        ("spread", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        style = "red" if row.met is False else None
        table.add_row(
            row.name,
            row.unit,
            _number(row.fleetcast),
            _number(row.baseline),
            _ratio(row),
            row.target or "",
            _met(row),
            str(row.repetitions),
            _spread(row),
            style=style,
        )
    (console or Console()).print(table)
    (console or Console()).print(f"[dim]{machine.summary()}[/]")


def write_results(rows: Sequence[Row], path: Path) -> None:
    path.write_text(
        json.dumps([row.as_json() for row in rows], indent=1, ensure_ascii=False) + "\n"
    )


def read_results(path: Path) -> list[Row]:
    return [Row.from_json(document) for document in json.loads(path.read_text())]


def draw_chart(rows: Sequence[Row], machine: Machine, path: Path) -> None:
    """Left: how many times better than the baseline, with the ratio targets. Right: each
    absolute target as the share of it that fleetcast uses (under 1 is met)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    compared = [row for row in rows if row.ratio is not None and math.isfinite(row.ratio)]
    bounded = [
        row
        for row in rows
        if row.target_kind in ("at_most", "at_least") and row.fleetcast and row.target_value
    ]
    figure, (left, right) = plt.subplots(
        1,
        2,
        figsize=(14, 0.42 * max(len(compared), len(bounded)) + 2.2),
        gridspec_kw={"width_ratios": [3, 2]},
    )
    labels = [row.name for row in compared]
    ratios = [row.ratio or 1.0 for row in compared]
    colours = ["#c0392b" if row.met is False else "#2e86c1" for row in compared]
    positions = range(len(compared))
    left.barh(positions, ratios, color=colours)
    left.set_xscale("log")
    left.axvline(1, color="black", linewidth=0.8)
    for position, row in zip(positions, compared, strict=True):
        if row.target_kind == "ratio_at_least" and row.target_value:
            left.plot(
                [row.target_value] * 2, [position - 0.4, position + 0.4], color="black", linewidth=2
            )
        left.text(row.ratio or 1.0, position, f" {row.ratio:.1f}x", va="center", fontsize=8)
    left.set_yticks(list(positions), labels, fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("times better than the baseline (log scale; black tick: target)")
    left.set_title("fleetcast vs the public sample's approach", fontsize=10)

    shares = [_share_of_target(row) for row in bounded]
    right.barh(
        range(len(bounded)),
        shares,
        color=["#c0392b" if row.met is False else "#27ae60" for row in bounded],
    )
    right.axvline(1, color="black", linewidth=0.8)
    right.set_xscale("log")
    right.set_yticks(
        list(range(len(bounded))), [f"{row.name} ({row.target})" for row in bounded], fontsize=8
    )
    right.invert_yaxis()
    right.set_xlabel("share of the target (< 1: met)")
    right.set_title("absolute targets", fontsize=10)
    figure.suptitle(machine.summary(), fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _share_of_target(row: Row) -> float:
    assert row.fleetcast is not None and row.target_value is not None
    if row.target_kind == "at_least":
        return row.target_value / row.fleetcast
    return row.fleetcast / row.target_value


def markdown_table(rows: Sequence[Row]) -> str:
    lines = [
        "| row | unit | fleetcast | baseline | ratio | target | met | reps | spread |",
        "| --- | --- | ---: | ---: | ---: | --- | :---: | ---: | ---: |",
    ]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "-"}[row.met]
        lines.append(
            f"| {row.name} | {row.unit} | {_number(row.fleetcast)} | {_number(row.baseline)} | "
            f"{_ratio(row)} | {row.target or '-'} | {met} | {row.repetitions} | {_spread(row)} |"
        )
    return "\n".join(lines)


def readme_section(rows: Sequence[Row], machine: Machine, chart: str, results: str) -> str:
    details = "\n".join(
        f"- **{row.name}**: {row.detail.rstrip('.')}."
        + (f" Check: {row.check}." if row.check else "")
        for row in rows
        if row.detail or row.check
    )
    unmet = [row for row in rows if row.met is False]
    verdict = (
        "Targets not met in this run: "
        + "; ".join(f"{row.name} ({_measured(row)} against {row.target})" for row in unmet)
        + "."
        if unmet
        else "Every target was met in this run."
    )
    return f"""{README_HEADING}

`make bench` on {machine.summary()}. Every row is fleetcast against a baseline written in
`bench/baselines.py` that does what the public AWS sample does (pandas group-by split,
sequential per-customer Prophet loop, a handler calling `Prophet.predict` per request),
measured in the same process on the same data, taking turns. `ratio` is how many times
better fleetcast is (> 1 is better; for times and memory, baseline ÷ fleetcast), the
median of the per-repetition ratios; `spread` is (max - min) ÷ median of the
per-repetition ratio (or of fleetcast's figure where there is no baseline). Rows 4 and 5
have no baseline: the sample publishes no stage timings and has no API. Row 2 compares
the same work: fleetcast's training fits twice per customer (a scored holdout fit and a
full-history refit), and the baseline loop does exactly that with identical Prophet
settings, where the sample itself fits once with seasonalities off. The machine is
shared, so absolute figures move between runs; ratios much less, except where one side
uses more cores than the other (row 2: other work on the machine takes cores from
fleetcast's worker processes, not from the one-core loop; its CPU-time row is the part
that does not depend on that).

{markdown_table(rows)}

{verdict}

Raw figures: [`{results}`]({results}); chart: [`{chart}`]({chart}); what this costs on
SageMaker at 1k, 10k and 100k customers: [`docs/scale.md`](docs/scale.md).

![fleetcast vs the public sample's approach]({chart})

<details><summary>What each row measured, and the checks its outputs passed</summary>

{details}

</details>
"""


def update_readme(readme: Path, section: str) -> None:
    """Replace the ``## Measured`` section (up to the next ``## `` heading)."""
    text = readme.read_text()
    pattern = re.compile(rf"^{re.escape(README_HEADING)}\n.*?(?=^## )", re.MULTILINE | re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{readme} has no '{README_HEADING}' section followed by another")
    readme.write_text(pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1))
