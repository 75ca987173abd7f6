"""The README's local tour, command by command, as a reader types it.

The blocks under "## The local stack" marked ``<!-- tour: up -->`` (the first shell) and
``<!-- tour -->`` (the second shell, in order) are read from README.md itself: the stack
is started with the first block's command, in the background and on a free port, and the
other blocks run in one bash, so variables and exports carry over as they would for a
reader. Each command must exit 0 and print what the tour promises (EXPECTED below); a
command the README gains without an expectation here fails the test, and so does an
expectation whose command the README lost.

The tour runs in a scratch folder that links the repository's virtual environments and
examples, so what it writes (readings, charts) stays out of the checkout; a reader's tour
writes them into tour/, which .gitignore covers.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from template_helpers import REPO_ROOT

pytestmark = pytest.mark.e2e

README = REPO_ROOT / "README.md"
# What the tour's commands use from the checkout.
LINKED = (".venv", ".venv-awscli", ".venv-sdk", "examples")
# Shell variables the tour sets, shown after every command so their values can be checked.
VARIABLES = (
    "AWS_ENDPOINT_URL",
    "FLEETCAST_RAW_BUCKET",
    "FLEETCAST_API_URL",
    "FLEETCAST_API_KEY",
    "TARGET_MODEL",
    "FLEET_RUN",
    "PATH",
)
CUSTOMERS = 20
RUN_ID = r"q\d{10}-\d{8}t\d{6}"
# The forecast export's horizon (the stack parameter ForecastExportDays' default).
EXPORT_DAYS = 30
TOUR_SECONDS = 900
START_SECONDS = 240


@dataclass
class Step:
    """One command as it ran: what it printed, its exit status, the variables after it."""

    command: str
    output: str
    exit_status: int
    variables: dict[str, str]
    folder: Path


def _forecast_json(period: int) -> Callable[[Step], bool]:
    def check(step: Step) -> bool:
        answer = json.loads(step.output)
        return bool(answer["customer_id"] == "7" and len(answer["forecast"]) == period)

    return check


def _quantile_forecast(step: Step) -> bool:
    answer = json.loads(step.output)
    points = answer["forecast"]
    return len(points) == 7 and all(
        set(point["quantiles"]) == {"0.1", "0.5", "0.9"}
        and point["quantiles"]["0.1"] < point["quantiles"]["0.5"] < point["quantiles"]["0.9"]
        for point in points
    )


def _table_rows(output: str) -> list[list[str]]:
    """The cells of each row of a box-drawn table (rich's or DuckDB's)."""
    return [
        [cell.strip() for cell in line.strip().strip("│").split("│")]
        for line in output.splitlines()
        if line.strip().startswith("│")
    ]


def _holiday_dip_forecast(step: Step) -> bool:
    """Customer 7's forecast from the model with US holidays: 14 days from New Year's Day
    2024, its quantiles in order, New Year's Day clearly below the Monday after (the same
    weekday, so the weekly pattern is no part of the difference), and the chart."""
    rows = [row for row in _table_rows(step.output) if re.fullmatch(r"\d{4}-\d\d-\d\d.*", row[0])]
    yhat = {row[0][:10]: float(row[1].replace(",", "")) for row in rows}
    quantiles = [[float(cell.replace(",", "")) for cell in row[4:7]] for row in rows]
    return (
        re.search(
            r"ds\s*┃\s*yhat\s*┃\s*lower\s*┃\s*upper\s*┃\s*q0\.1\s*┃\s*q0\.5\s*┃\s*q0\.9",
            step.output,
        )
        is not None
        and len(rows) == 14
        and min(yhat) == "2024-01-01"
        and yhat["2024-01-01"] < 0.93 * yhat["2024-01-08"]
        and all(low <= middle <= high for low, middle, high in quantiles)
        and "plot: tour/holidays-7.png" in step.output
        and (step.folder / "tour" / "holidays-7.png").read_bytes().startswith(b"\x89PNG")
    )


def _export_file(name: str, live: set[str], not_live: set[str]) -> Callable[[Step], bool]:
    """The export written to ``name``: every customer's rows through the same last day (the
    run's horizon), at least ``EXPORT_DAYS`` each (more for a customer whose last reading
    is earlier: a random missing day), the ``live`` customers' rows flagged live and the
    ``not_live`` ones' not."""

    def check(step: Step) -> bool:
        table = pq.read_table(step.folder / "tour" / name).to_pandas()
        days = table.groupby("customer_id").size()
        last_days = pd.to_datetime(table["ds"]).groupby(table["customer_id"]).max()
        flags = table.groupby("customer_id")["live"].agg(["all", "any"])
        return bool(
            (days >= EXPORT_DAYS).all()
            and last_days.nunique() == 1
            and set(days.index) == live | not_live
            and flags.loc[sorted(live), "all"].all()
            and not flags.loc[sorted(not_live), "any"].any()
            and table["run_id"].nunique() == 1
            and f" {len(table)} forecasts rows of {len(live | not_live)} customers" in step.output
        )

    return check


def _next_week_per_customer(step: Step) -> bool:
    """DuckDB's answer: every customer once, 7 days each, from its live model: customer
    7's from the metadata run, everyone else's from the first run."""
    rows = [row for row in _table_rows(step.output) if row and row[0].isdigit()]
    runs = {row[0]: row[1] for row in rows}
    fleet_run = step.variables["FLEET_RUN"]
    return (
        sorted(runs, key=int) == [str(index) for index in range(CUSTOMERS)]
        and len(rows) == CUSTOMERS
        and all(row[2] == "7" and float(row[3]) > 0 for row in rows)
        and all(run == fleet_run for customer, run in runs.items() if customer != "7")
        and re.fullmatch(RUN_ID, runs["7"]) is not None
        and runs["7"] > fleet_run
    )


# (pattern the command starts with, what must hold of it). A string is a regular
# expression searched in the output; a function is given the whole step.
EXPECTED: list[tuple[str, str | Callable[[Step], bool]]] = [
    (
        r'eval "\$\(\.venv/bin/fleetcast env\)"',
        lambda step: (
            step.variables["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
            and step.variables["FLEETCAST_API_KEY"] != ""
            and step.variables["FLEETCAST_RAW_BUCKET"] != ""
        ),
    ),
    (
        r'export PATH="\$PWD/\.venv-awscli/bin:\$PATH"',
        lambda step: step.variables["PATH"].startswith(f"{step.folder}/.venv-awscli/bin:"),
    ),
    (r"mkdir -p tour ", lambda step: (step.folder / "tour").is_dir()),
    (
        r"\.venv/bin/fleetcast generate ",
        rf"for {CUSTOMERS} customers to tour/readings\.csv\.gz",
    ),
    (
        r"aws s3 cp tour/readings\.csv\.gz ",
        r"upload: (\./)?tour/readings\.csv\.gz to s3://fleetcast-raw-\S+/incoming/readings\.csv\.gz",
    ),
    (
        r"\.venv/bin/fleetcast status --wait 600 +# each upload",
        # run, source, processing, rows (rejected), training, customers, trained, failed, live
        rf"{RUN_ID}\s*│\s*readings\.csv\.gz\s*│\s*Completed\s*│\s*[\d,]+ \(0\)\s*│\s*Completed\s*│"
        rf"\s*{CUSTOMERS}\s*│\s*{CUSTOMERS}\s*│\s*0\s*│\s*{CUSTOMERS}\s*│",
    ),
    (r"aws sagemaker list-training-jobs ", rf"fleetcast-t-{RUN_ID}\s+Completed"),
    (r'curl -s -H "x-api-key: \$FLEETCAST_API_KEY" "\S+/forecast\?period=7"', _forecast_json(7)),
    (
        r'curl -s -H "x-api-key: \$FLEETCAST_API_KEY" "\S+/model"',
        rf'"target_model":"{RUN_ID}/7\.tar\.gz"',
    ),
    (
        r"\.venv/bin/fleetcast forecast 7 --period 14 --plot ",
        lambda step: (
            "plot: tour/forecast-7.png" in step.output
            and (step.folder / "tour" / "forecast-7.png").read_bytes().startswith(b"\x89PNG")
        ),
    ),
    (
        r"TARGET_MODEL=\$\(aws dynamodb get-item ",
        lambda step: (
            re.fullmatch(rf"{RUN_ID}/7\.tar\.gz", step.variables["TARGET_MODEL"]) is not None
        ),
    ),
    (
        r"aws sagemaker-runtime invoke-endpoint ",
        lambda step: (
            '"InvokedProductionVariant": "AllTraffic"' in step.output
            and len(json.loads((step.folder / "tour" / "forecast-7.json").read_text())["forecast"])
            == 7
        ),
    ),
    (
        r"\.venv-sdk/bin/python examples/sdk_client\.py ",
        rf"customer 7, model run {RUN_ID}\n(.*\n){{8}}",
    ),
    (
        r"printf 'customer_id,country",
        lambda step: (
            (step.folder / "tour" / "customers.csv").read_text() == "customer_id,country\n7,US\n"
        ),
    ),
    (
        r"aws s3 cp tour/customers\.csv ",
        r"upload: (\./)?tour/customers\.csv to s3://fleetcast-raw-\S+/incoming/metadata/customers\.csv",
    ),
    (
        r"\.venv/bin/fleetcast status --wait 600 +# the metadata run",
        # the metadata run: 1 row read, none rejected, 1 customer trained and made live
        rf"{RUN_ID}\s*│\s*customers\.csv\s*│\s*Completed\s*│\s*1 \(0\)\s*│\s*Completed\s*│"
        r"\s*1\s*│\s*1\s*│\s*0\s*│\s*1\s*│",
    ),
    (r"\.venv/bin/fleetcast forecast 7 --period 14 --quantiles ", _holiday_dip_forecast),
    (
        r'curl -s -H "x-api-key: \$FLEETCAST_API_KEY" "\S+/forecast\?period=7&quantiles=0\.1,0\.5,0\.9"',
        _quantile_forecast,
    ),
    (
        r"FLEET_RUN=\$\(",
        lambda step: re.fullmatch(RUN_ID, step.variables["FLEET_RUN"]) is not None,
    ),
    (
        r'\.venv/bin/fleetcast export --run "\$FLEET_RUN" -o tour/fleet\.parquet',
        _export_file(
            "fleet.parquet",
            live={str(index) for index in range(CUSTOMERS)} - {"7"},
            not_live={"7"},
        ),
    ),
    (
        r"\.venv/bin/fleetcast export -o tour/latest\.parquet",
        _export_file("latest.parquet", live={"7"}, not_live=set()),
    ),
    (r'\.venv/bin/python -c "import duckdb; ', _next_week_per_customer),
    (
        r'\.venv/bin/fleetcast report --run "\$FLEET_RUN" -o tour/report\.html',
        lambda step: (
            re.search(
                rf"accuracy of run {step.variables['FLEET_RUN']} \({CUSTOMERS} of {CUSTOMERS} "
                r"customers scored.*WAPE median .*made live \d+; not made live \d+: .*"
                r"report -> tour/report\.html",
                step.output,
                re.S,
            )
            is not None
            and (step.folder / "tour" / "report.html").read_text().startswith("<!DOCTYPE html>")
            and "data:image/png;base64," in (step.folder / "tour" / "report.html").read_text()
        ),
    ),
    (
        r"\.venv/bin/fleetcast cost-report +#",
        r"SageMaker cost \d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d: \$[\d,.]+ .*\d+ anomal",
    ),
    (r"\.venv/bin/fleetcast cost-report --send", r"sent to \S+@\S+ through SES"),
]


def tour_blocks(readme: str) -> tuple[str, list[str]]:
    """The first shell's command and the second shell's, in README order."""
    blocks = re.findall(r"<!-- tour(: up)? -->\n```bash\n(.*?)```", readme, re.S)
    up = [body for marker, body in blocks if marker]
    assert len(up) == 1, "one block starts the stack"
    commands = []
    for marker, body in blocks:
        if marker:
            continue
        joined = re.sub(r"\\\n\s*", " ", body)
        commands += [line for line in joined.splitlines() if line.strip()]
    (start,) = [line for line in up[0].splitlines() if line.strip()]
    return start, commands


def expectation(command: str) -> str | Callable[[Step], bool]:
    found = [check for pattern, check in EXPECTED if re.match(pattern, command)]
    assert len(found) == 1, f"{len(found)} expectations for the README command {command!r}"
    return found[0]


def test_every_tour_command_has_exactly_one_expectation_and_each_is_used() -> None:
    _, commands = tour_blocks(README.read_text())
    for command in commands:
        expectation(command)
    for pattern, _ in EXPECTED:
        assert any(re.match(pattern, c) for c in commands), f"no README command for {pattern}"


def _environment(state_dir: Path) -> dict[str, str]:
    """This environment less any AWS settings of the machine, with a state folder of its
    own and wide tables (rich cuts columns to fit 80 otherwise)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLEETCAST_"))}
    environment.update(
        FLEETCAST_HOME=str(state_dir),
        COLUMNS="200",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    return environment


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in LINKED:
        if not (REPO_ROOT / name).exists():
            pytest.skip(f"{name} is missing: run `make install`")
        (work / name).symlink_to(REPO_ROOT / name)
    return work


@pytest.fixture
def stack(folder: Path, tmp_path: Path) -> Iterator[Path]:
    """Step 1, in the background: the README's `fleetcast up`, on free ports. Stopped the
    way a reader stops it, with Ctrl-C (SIGINT to its process group)."""
    start, _ = tour_blocks(README.read_text())
    state_dir, log = tmp_path / "state", tmp_path / "up.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {start} --port 0"],
            cwd=folder,
            env=_environment(state_dir),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while "Ctrl-C" not in log.read_text():
            assert process.poll() is None, f"fleetcast up exited:\n{log.read_text()}"
            assert time.monotonic() < deadline, (
                f"no stack after {START_SECONDS} s:\n{log.read_text()}"
            )
            time.sleep(0.5)
        assert "fleetcast local stack (127.0.0.1 only)" in log.read_text()
        yield state_dir
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert process.returncode == 0, log.read_text()
    assert "local stack stopped" in log.read_text()


def run_tour(commands: list[str], folder: Path, state_dir: Path) -> list[Step]:
    """All commands in one bash, as one reader's shell; each one's output, exit status
    and the tour's variables cut apart by markers."""
    token = secrets.token_hex(8)
    script = ["exec 2>&1", f"cd {folder}"]
    for index, command in enumerate(commands):
        script += [
            f"printf '@@{token} start {index}\\n'",
            command,
            "status=$?",
            f"printf '\\n@@{token} end {index} %s\\n' \"$status\"",
            *(f"printf '@@{token} var {name}=%s\\n' \"${{{name}:-}}\"" for name in VARIABLES),
        ]
    result = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        env=_environment(state_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TOUR_SECONDS,
        check=False,
    )
    steps = []
    for index, command in enumerate(commands):
        part = re.search(
            rf"@@{token} start {index}\n(.*?)\n@@{token} end {index} (\d+)\n((?:@@{token} var [^\n]*\n)*)",
            result.stdout,
            re.S,
        )
        assert part is not None, f"the tour stopped before {command!r}:\n{result.stdout[-3000:]}"
        variables = dict(
            line.split(" var ", 1)[1].split("=", 1) for line in part.group(3).splitlines()
        )
        steps.append(Step(command, part.group(1), int(part.group(2)), variables, folder))
    return steps


def test_the_readme_local_tour_works_as_written(stack: Path, folder: Path) -> None:
    # Given the stack of step 1, started as the README says
    _, commands = tour_blocks(README.read_text())
    # When a reader types every command of steps 2 to 6 into a second shell
    steps = run_tour(commands, folder, stack)
    # Then each exits 0 and prints what the tour promises
    for step in steps:
        shown = f"$ {step.command}\n(exit {step.exit_status})\n{step.output}"
        assert step.exit_status == 0, shown
        check = expectation(step.command)
        if isinstance(check, str):
            assert re.search(check, step.output), f"expected /{check}/ in:\n{shown}"
        else:
            assert check(step), shown
