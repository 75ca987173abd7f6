"""statsforecast's AutoETS, AutoTheta and AutoARIMA on each customer's daily series, and
MSTL, AutoETS and AutoTheta on each customer's hourly series.

Runs in ``.venv-peers`` (statsforecast 2.1.1 needs pandas < 3; fleetcast pins pandas 3),
started by :mod:`bench.accuracy.peers` from the repository's root; it imports nothing of
fleetcast but :mod:`bench.accuracy.peer_rows`:

    .venv-peers/bin/python -m bench.accuracy.statsforecast_peers SERIES OUT --horizon 30 \\
        --models AutoETS,AutoTheta,AutoARIMA
    .venv-peers/bin/python -m bench.accuracy.statsforecast_peers SERIES OUT --horizon 720 \
        --models MSTL,AutoETS,AutoTheta --frequency h --history 2016

SERIES is Parquet with ``unique_id, ds, y`` (each series regular, daily or hourly); OUT
gets :mod:`bench.accuracy.peer_rows`' columns: the mean, and the 80% interval
(``level=[80]``) as the 0.1 and 0.9 quantiles.
Each model is fitted on one series at a time with its defaults and the frequency's seasons
(daily: 7; hourly: 24, and MSTL 24 and 168), on the series' last ``--history`` values if
given, in this one process and thread, and timed with the process's CPU clock. Each model
fits the
first series once beforehand, untimed, so first-call costs (lazy imports, caches) are not
charged to one customer.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pandas as pd
from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta

from bench.accuracy import peer_rows

# Per frequency: the season of the single-season models, and MSTL's seasons.
SEASONS = {"D": [7], "h": [24, 168]}
MODELS = {"AutoETS": AutoETS, "AutoTheta": AutoTheta, "AutoARIMA": AutoARIMA}
LEVEL = 80


def model(name: str, frequency: str) -> Any:
    """A fresh ``name`` for series of ``frequency``."""
    seasons = SEASONS[frequency]
    if name == "MSTL":
        return MSTL(season_length=seasons)
    return MODELS[name](season_length=seasons[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("series")
    parser.add_argument("output")
    parser.add_argument("--horizon", type=int, required=True)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--frequency", choices=SEASONS, default="D")
    parser.add_argument("--history", type=int, help="fit on each series' last so many values")
    options = parser.parse_args()
    frame = pd.read_parquet(options.series).sort_values(["unique_id", "ds"])
    series = [
        (str(unique_id), rows["y"].to_numpy(np.float64)[-(options.history or 0) :])
        for unique_id, rows in frame.groupby("unique_id", sort=True)
    ]
    parts = []
    for name in options.models.split(","):
        model(name, options.frequency).forecast(y=series[0][1], h=options.horizon, level=[LEVEL])
        for unique_id, values in series:
            started = time.process_time()
            forecast = model(name, options.frequency).forecast(
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
