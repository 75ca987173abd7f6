"""statsforecast's AutoETS, AutoTheta and AutoARIMA on each customer's daily series.

Runs in ``.venv-peers`` (statsforecast 2.1.1 needs pandas < 3; fleetcast pins pandas 3),
started by :mod:`bench.accuracy.peers` as a script, so it imports nothing of fleetcast:

    .venv-peers/bin/python bench/accuracy/statsforecast_peers.py SERIES OUT --horizon 30 \\
        --models AutoETS,AutoTheta,AutoARIMA

SERIES is Parquet with ``unique_id, ds, y`` (each series regular and daily); OUT gets
``unique_id, model, step, yhat, cpu_seconds`` (``step`` 0 is the day after the series).
Each model is fitted on one series at a time with season length 7 and its defaults, in
this one process and thread, and timed with the process's CPU clock. Each model fits the
first series once beforehand, untimed, so first-call costs (lazy imports, caches) are not
charged to one customer.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from statsforecast.models import AutoARIMA, AutoETS, AutoTheta

SEASON_LENGTH = 7
MODELS = {"AutoETS": AutoETS, "AutoTheta": AutoTheta, "AutoARIMA": AutoARIMA}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("series")
    parser.add_argument("output")
    parser.add_argument("--horizon", type=int, required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    options = parser.parse_args()
    frame = pd.read_parquet(options.series).sort_values(["unique_id", "ds"])
    series = [
        (str(unique_id), rows["y"].to_numpy(np.float64))
        for unique_id, rows in frame.groupby("unique_id", sort=True)
    ]
    columns: dict[str, list[object]] = {
        "unique_id": [],
        "model": [],
        "step": [],
        "yhat": [],
        "cpu_seconds": [],
    }
    for name in options.models.split(","):
        make = MODELS[name]
        make(season_length=SEASON_LENGTH).forecast(y=series[0][1], h=options.horizon)
        for unique_id, values in series:
            started = time.process_time()
            mean = make(season_length=SEASON_LENGTH).forecast(y=values, h=options.horizon)["mean"]
            cpu = time.process_time() - started
            for step, value in enumerate(np.asarray(mean, dtype=np.float64)):
                columns["unique_id"].append(unique_id)
                columns["model"].append(name)
                columns["step"].append(step)
                columns["yhat"].append(float(value))
                columns["cpu_seconds"].append(cpu)
    pq.write_table(pa.table(columns), options.output)


if __name__ == "__main__":
    main()
