"""Another rule for the customer's model, scored on ``make accuracy``'s data in seconds.

``make accuracy`` takes a quarter of an hour, most of it the jobs fitting every candidate
of every customer. A rule that only chooses among those candidates (the combination's
members, the gate's tolerance, the fallback) needs none of that work redone: it needs each
customer's candidates, their backtests and their whole-history models. So:

- ``python -m bench.accuracy.replay record FOLDER`` runs ``make accuracy``'s fleetcast
  jobs (:mod:`bench.accuracy.fleetcast_run`; the peers are not run) on each set's daily
  windows (the last 30 days and the 30 before them; ``--window`` for one) and keeps, for
  every customer, what the training job handed to its choice
  (:func:`fleetcast_training.selection.choose`), and the forecasts the run exported;
- ``python -m bench.accuracy.replay check FOLDER [--rule MODULE:FUNCTION]`` calls the rule
  (by default the training job's own ``choose``) on every customer's recorded candidates,
  forecasts the held-back days from the model it returns (the export's compile and floor),
  and prints median and mean WAPE and the customers beating seasonal naive, beside the
  figures the recorded run exported and, for a whole set, the peers' of
  ``bench/accuracy-results.json``. With the training job's own rule, every forecast must
  equal what the run exported (exit code 1 otherwise): the replay is then exact, and a
  different rule's figures are what ``make accuracy`` would measure with it.

A rule takes ``choose``'s arguments and returns its :class:`~fleetcast_training.selection.Choice`
(or None). docs/model-families.md's replayed tables were made this way. A recording
belongs to the checkout that made it (it pickles the training job's own objects).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import math
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from bench.accuracy import fleetcast_run, metrics, peers
from bench.accuracy.datasets import DATA_SETS, WINDOWS, DataSet, SplitSet, split
from fleetcast_contracts.quantiles import FORECAST_FLOOR
from fleetcast_forecasters.families import compile_archive
from fleetcast_training import customer_training
from fleetcast_training.selection import Choice
from fleetcast_training.stan_backend import silence_stan_logging

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "accuracy-results.json"
SMOKE_CUSTOMERS = 3
# The training job's own rule, as the recording's jobs called it.
DEFAULT_RULE = "fleetcast_training.selection:choose"
Rule = Callable[..., Choice | None]


@dataclass(frozen=True)
class Recorded:
    """One customer's call of the rule: ``choose``'s arguments as the job passed them."""

    customer_id: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def last_history(self) -> str:
        """The customer's last fitted period (``choose``'s ``common``: every model has it)."""
        common = self.args[4] if len(self.args) > 4 else self.kwargs["common"]
        return str(common["last_history"])


# The customer being trained, in the process training it (the jobs fork their workers).
_training: dict[str, str] = {}


@contextlib.contextmanager
def recording(folder: Path, key: str) -> Iterator[None]:
    """Every ``choose`` the training job calls, appended to ``folder``'s file for data set
    ``key`` (one file per process: the job's workers write their own)."""
    train, choose = customer_training.CustomerTrainer._train, customer_training.choose

    def train_noting(self: Any, customer: Any, *args: Any, **kwargs: Any) -> Any:
        _training["customer_id"] = customer.customer_id
        return train(self, customer, *args, **kwargs)

    def choose_recording(*args: Any, **kwargs: Any) -> Choice | None:
        record = Recorded(_training["customer_id"], args, kwargs)
        with (folder / f"{key}-{os.getpid()}.calls").open("ab") as file:
            pickle.dump(record, file, pickle.HIGHEST_PROTOCOL)
        return choose(*args, **kwargs)

    customer_training.CustomerTrainer._train = train_noting  # type: ignore[method-assign]
    customer_training.choose = choose_recording
    try:
        yield
    finally:
        customer_training.CustomerTrainer._train = train  # type: ignore[method-assign]
        customer_training.choose = choose


def _stem(key: str, window: int) -> str:
    """A recording's files' stem: the set's key, and its window after the last."""
    return key if window == 0 else f"{key}.w{window}"


def record(
    folder: Path, data_set: DataSet, customers: int | None, console: Console, window: int = 0
) -> None:
    """The set's fleetcast run on ``window``, its calls of the rule and its exported
    forecasts."""
    horizon = fleetcast_run.export_horizon()
    split_set = split(data_set, horizon, customers, window=window)
    stem = _stem(data_set.key, window)
    for stale in folder.glob(f"{stem}-*.calls"):
        stale.unlink()
    with (
        console.status(f"{stem}: fleetcast's jobs, {len(split_set.customers)} customers"),
        recording(folder, stem),
        tempfile.TemporaryDirectory(prefix="fleetcast-replay-") as scratch,
    ):
        run = fleetcast_run.run(
            split_set.customers,
            Path(scratch) / data_set.key,
            {"DefaultHolidayCountry": data_set.holiday_country},
        )
    calls = _calls(folder, stem)
    if len(calls) != run.trained:
        raise RuntimeError(
            f"{stem}: recorded {len(calls)} customers' choices of {run.trained} trained "
            "(the training job's workers must be forked from this process)"
        )
    exported = {
        k: [None if math.isnan(x) else x for x in v] for k, v in run.forecasts.values.items()
    }
    (folder / f"{stem}.json").write_text(
        json.dumps(
            {"customers": customers, "horizon": horizon, "window": window, "exported": exported}
        )
    )
    console.print(f"{stem}: {len(calls)} customers recorded")


def _calls(folder: Path, key: str) -> dict[str, Recorded]:
    calls: dict[str, Recorded] = {}
    for path in sorted(folder.glob(f"{key}-*.calls")):
        with path.open("rb") as file:
            while True:
                try:
                    call = pickle.load(file)  # this tool's own recording
                except EOFError:
                    break
                except Exception as error:
                    raise SystemExit(
                        f"cannot read the recording {path} ({error!r}): record it again "
                        "with this checkout"
                    ) from None
                calls[call.customer_id] = call
    return calls


def served(choice: Choice | None, last_history: str, days: pd.DatetimeIndex) -> np.ndarray:
    """The held-back ``days`` of the chosen model's forecast (its history ending at
    ``last_history``), as the export has them: the same compile, the same floor. NaN
    without a model."""
    if choice is None:
        return np.full(len(days), np.nan)
    last = pd.Timestamp(last_history).normalize()
    periods = max(1, (days[-1] - last).days)
    forecaster = compile_archive(
        choice.model,
        choice.kind,
        "D",
        horizon=periods,
        one_period=False,
        last_history=np.datetime64(last_history),
    )
    dates = pd.date_range(last + pd.Timedelta(days=1), periods=periods, freq="D")
    yhat = pd.Series(np.maximum(forecaster.yhat[:periods], FORECAST_FLOOR), index=dates)
    return yhat.reindex(days).to_numpy(np.float64)


@dataclass(frozen=True)
class Figures:
    median_wape: float
    mean_wape: float
    beats_naive: int
    of: int

    def cells(self) -> list[str]:
        return [f"{self.median_wape:.4f}", f"{self.mean_wape:.4f}", f"{self.beats_naive}/{self.of}"]


def figures(split_set: SplitSet, forecasts: dict[str, np.ndarray], horizon: int) -> Figures:
    """make accuracy's measures of ``forecasts`` over the set's customers."""
    naive = peers.seasonal_naive(split_set.customers, horizon).values
    ours, theirs = [], []
    for customer in split_set.customers:
        forecast = forecasts.get(customer.customer_id)
        if forecast is None or np.isnan(forecast).any():
            ours.append(math.nan)
        else:
            ours.append(metrics.wape(customer.actuals, forecast))
        theirs.append(metrics.wape(customer.actuals, naive[customer.customer_id]))
    summary = metrics.Summary.of(ours, [])
    wins, total = metrics.beats_share(ours, theirs)
    return Figures(summary.median_wape, summary.mean_wape, wins, total)


def load_rule(name: str) -> Rule:
    module, _, function = name.partition(":")
    if not function:
        raise SystemExit(f"--rule {name!r}: give it as MODULE:FUNCTION")
    try:
        rule: Rule = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as error:
        raise SystemExit(f"--rule {name!r}: {error}") from None
    return rule


def check(folder: Path, rule_name: str, console: Console) -> int:
    """Print the rule's figures on the recording in ``folder``; 1 when the job's own rule
    does not give every exported forecast, or there is no recording."""
    rule = load_rule(rule_name)
    exact = rule_name == DEFAULT_RULE
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"data_sets": []}
    # The peers' figures of each set's daily windows.
    measured = {
        (d["key"], d.get("window", 0)): d
        for d in results["data_sets"]
        if d.get("frequency", "D") == "D"
    }
    table = Table(title=f"the rule {rule_name}, replayed", header_style="bold")
    for column in ("data set", "forecasts", "median WAPE", "mean WAPE", "beats naive"):
        table.add_column(column, justify="left" if column in ("data set", "forecasts") else "right")
    failures = 0
    for data_set, window in ((d, w) for d in DATA_SETS for w in WINDOWS):
        stem = _stem(data_set.key, window)
        meta_path = folder / f"{stem}.json"
        if not meta_path.exists():
            continue
        meta = json.loads(meta_path.read_text())
        split_set = split(data_set, meta["horizon"], meta["customers"], window=window)
        days = {c.customer_id: c.horizon_index for c in split_set.customers}
        calls = _calls(folder, stem)
        replayed = {
            cid: served(rule(*call.args, **call.kwargs), call.last_history, days[cid])
            for cid, call in calls.items()
            if cid in days
        }
        exported = {
            k: np.array([math.nan if x is None else x for x in v], np.float64)
            for k, v in meta["exported"].items()
        }
        if exact:
            differ = [
                cid
                for cid, forecast in exported.items()
                if not np.allclose(
                    replayed.get(cid, np.nan), forecast, rtol=1e-9, atol=1e-9, equal_nan=True
                )
            ]
            if differ:
                failures += 1
                console.print(
                    f"[red]{stem}: the replay of the job's own rule differs from the "
                    f"export for {len(differ)} customers ({', '.join(differ[:5])})[/]"
                )
        horizon = meta["horizon"]
        table.add_row(stem, "replayed", *figures(split_set, replayed, horizon).cells())
        table.add_row("", "as recorded", *figures(split_set, exported, horizon).cells())
        found = measured.get((data_set.key, window))
        if meta["customers"] is None and found:
            for name, method in found["methods"].items():
                if name == "fleetcast":
                    continue
                summary = method["summary"]
                table.add_row(
                    "", name, f"{summary['median_wape']:.4f}", f"{summary['mean_wape']:.4f}", ""
                )
        table.add_section()
    if not table.rows:
        console.print(f"[red]{folder} holds no recording: run `record` first[/]")
        return 1
    console.print(table)
    if exact and not failures:
        console.print("the job's own rule, replayed, gives every exported forecast exactly")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.accuracy.replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="record and check a few customers of each set, in a temporary folder",
    )
    commands = parser.add_subparsers(dest="command")
    recorder = commands.add_parser("record", help="run fleetcast's jobs and keep the rule's inputs")
    recorder.add_argument("folder", type=Path)
    recorder.add_argument("--customers", type=int, help="at most this many customers per set")
    recorder.add_argument("--data-set", action="append", choices=[d.key for d in DATA_SETS])
    recorder.add_argument(
        "--window",
        type=int,
        action="append",
        choices=WINDOWS,
        help="a daily window to record (0: the last 30 days, 1: the 30 before); default both",
    )
    checker = commands.add_parser("check", help="replay a rule on a recording")
    checker.add_argument("folder", type=Path)
    checker.add_argument(
        "--rule", default=DEFAULT_RULE, help=f"MODULE:FUNCTION (default {DEFAULT_RULE})"
    )
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    silence_stan_logging()
    console = Console(width=None if sys.stdout.isatty() else 160)
    if options.smoke:
        with tempfile.TemporaryDirectory(prefix="fleetcast-replay-") as folder:
            for data_set in DATA_SETS:
                record(Path(folder), data_set, SMOKE_CUSTOMERS, console)
            return check(Path(folder), DEFAULT_RULE, console)
    if options.command == "record":
        options.folder.mkdir(parents=True, exist_ok=True)
        for data_set in DATA_SETS:
            if not options.data_set or data_set.key in options.data_set:
                for window in options.window or WINDOWS:
                    record(options.folder, data_set, options.customers, console, window)
        return 0
    if options.command == "check":
        return check(options.folder, options.rule, console)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
