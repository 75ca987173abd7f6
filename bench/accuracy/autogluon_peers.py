"""AutoGluon-TimeSeries' ``medium_quality`` preset over every customer of a set at once.

Runs in ``.venv-autogluon`` (autogluon.timeseries 1.6.3 pins pandas < 3 and brings torch),
started by :mod:`bench.accuracy.peers` from the repository's root; it imports nothing of
fleetcast but :mod:`bench.accuracy.peer_rows` (pandas and numpy alone):

    .venv-autogluon/bin/python -m bench.accuracy.autogluon_peers SERIES OUT --horizon 30
    .venv-autogluon/bin/python -m bench.accuracy.autogluon_peers SERIES OUT --horizon 720 \
        --frequency h --time-limit 300

SERIES is Parquet with ``unique_id, ds, y`` (daily or hourly, regular); OUT gets peer_rows' columns,
one model per base model AutoGluon trained and one for its ensemble. What a user writes::

    TimeSeriesPredictor(prediction_length=h, freq="D", eval_metric="WQL",
                        quantile_levels=[0.1, 0.5, 0.9]).fit(df, presets="medium_quality")

with ``HF_HUB_OFFLINE=1``: the preset's pretrained members (Chronos-2, Toto) cannot download
their weights here and are skipped at once, with AutoGluon's own message.

CPU (this process and its worker processes): the whole fit's CPU is the ensemble's, and each
base model gets the share of it in proportion to its fit time on the leaderboard; each
model's ``predict`` (its local models refit per series there) is timed on its own. Both per
customer: the total divided by the customers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.accuracy import peer_rows

QUANTILE_LEVELS = [0.1, 0.5, 0.9]
PRESET = "medium_quality"
ENSEMBLE = "WeightedEnsemble"


def cpu_seconds() -> float:
    """This process, its reaped children, and its live workers (joblib keeps them)."""
    import psutil

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def method_name(model: str) -> str:
    """The name make accuracy reports a model under."""
    return "AutoGluon ensemble" if model.startswith(ENSEMBLE) else f"AutoGluon {model}"


def predictions_to_rows(
    predictions: pd.DataFrame, model: str, cpu_per_customer: float
) -> pd.DataFrame:
    """AutoGluon's predictions (index ``item_id, timestamp``; columns ``mean`` and one per
    quantile level as a string) as peer_rows' rows; the point forecast is ``mean``."""
    frame = pd.DataFrame(predictions).reset_index()
    frame = frame.rename(columns={str(q): f"q{round(q * 100)}" for q in QUANTILE_LEVELS})
    ids = frame["item_id"].astype(str)
    return peer_rows.from_long(
        frame.assign(item_id=ids),
        method_name(model),
        dict.fromkeys(ids.unique(), cpu_per_customer),
        yhat="mean",
        q10="q10",
        q50="q50",
        q90="q90",
        id_column="item_id",
        time_column="timestamp",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("series")
    parser.add_argument("output")
    parser.add_argument("--horizon", type=int, required=True)
    parser.add_argument("--leaderboard", help="where to write the leaderboard as JSON")
    parser.add_argument("--frequency", choices=("D", "h"), default="D")
    parser.add_argument("--time-limit", type=int, help="the fit's seconds (AutoGluon's time_limit)")
    options = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from autogluon.timeseries import TimeSeriesDataFrame, TimeSeriesPredictor

    frame = pd.read_parquet(options.series).sort_values(["unique_id", "ds"])
    data = TimeSeriesDataFrame.from_data_frame(frame, id_column="unique_id", timestamp_column="ds")
    customers = data.num_items
    with tempfile.TemporaryDirectory(prefix="fleetcast-autogluon-") as folder:
        predictor = TimeSeriesPredictor(
            prediction_length=options.horizon,
            target="y",
            freq=options.frequency,
            eval_metric="WQL",
            quantile_levels=QUANTILE_LEVELS,
            path=folder,
            verbosity=1,
        )
        started, wall = cpu_seconds(), time.perf_counter()
        predictor.fit(data, presets=PRESET, time_limit=options.time_limit)
        fit_cpu, fit_wall = cpu_seconds() - started, time.perf_counter() - wall
        board = predictor.leaderboard()
        fit_times = dict(zip(board["model"], board["fit_time_marginal"].fillna(0.0), strict=True))
        base_fit = sum(t for m, t in fit_times.items() if not m.startswith(ENSEMBLE)) or 1.0
        parts = []
        predict_cpu: dict[str, float] = {}
        for model in board["model"]:
            started = cpu_seconds()
            predictions = predictor.predict(data, model=model, use_cache=False)
            predict_cpu[model] = cpu_seconds() - started
            share = (
                fit_cpu
                if model.startswith(ENSEMBLE)
                else fit_cpu * float(fit_times[model]) / base_fit
            )
            parts.append(
                predictions_to_rows(predictions, model, (share + predict_cpu[model]) / customers)
            )
    pd.concat(parts, ignore_index=True).to_parquet(options.output)
    if options.leaderboard:
        Path(options.leaderboard).write_text(
            json.dumps(
                {
                    "preset": PRESET,
                    "time_limit_seconds": options.time_limit,
                    "fit_cpu_seconds": fit_cpu,
                    "fit_wall_seconds": fit_wall,
                    "customers": customers,
                    "models": [
                        {
                            "model": str(row["model"]),
                            "score_val": _finite(row["score_val"]),
                            "fit_time_marginal": _finite(row["fit_time_marginal"]),
                            "predict_cpu_seconds": predict_cpu[str(row["model"])],
                        }
                        for _, row in board.iterrows()
                    ],
                }
            )
        )


def _finite(value: object) -> float | None:
    number = float(value)  # type: ignore[arg-type]
    return number if np.isfinite(number) else None


if __name__ == "__main__":
    main()
