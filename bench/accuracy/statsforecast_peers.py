"""statsforecast's AutoETS, AutoTheta and AutoARIMA on each customer's daily series.

Runs in ``.venv-peers`` (statsforecast 2.1.1 needs pandas < 3; fleetcast pins pandas 3),
started by :mod:`bench.accuracy.peers` from the repository's root; it imports nothing of
fleetcast but :mod:`bench.accuracy.peer_rows`:

    .venv-peers/bin/python -m bench.accuracy.statsforecast_peers SERIES OUT --horizon 30 \\
        --models AutoETS,AutoTheta,AutoARIMA

SERIES is Parquet with ``unique_id, ds, y`` (each series regular and daily); OUT gets
:mod:`bench.accuracy.peer_rows`' columns: the mean, and the 80% interval (``level=[80]``)
as the 0.1 and 0.9 quantiles.
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
from statsforecast.models import AutoARIMA, AutoETS, AutoTheta

from bench.accuracy import peer_rows

SEASON_LENGTH = 7
MODELS = {"AutoETS": AutoETS, "AutoTheta": AutoTheta, "AutoARIMA": AutoARIMA}
LEVEL = 80


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
    parts = []
    for name in options.models.split(","):
        make = MODELS[name]
        make(season_length=SEASON_LENGTH).forecast(y=series[0][1], h=options.horizon, level=[LEVEL])
        for unique_id, values in series:
            started = time.process_time()
            forecast = make(season_length=SEASON_LENGTH).forecast(
                y=values, h=options.horizon, level=[LEVEL]
            )
            cpu = time.process_time() - started
            parts.append(
                peer_rows.rows(
                    unique_id,
                    name,
                    forecast["mean"],
                    cpu,
                    q10=forecast[f"lo-{LEVEL}"],
                    q90=forecast[f"hi-{LEVEL}"],
                )
            )
    pd.concat(parts, ignore_index=True).to_parquet(options.output)


if __name__ == "__main__":
    main()
