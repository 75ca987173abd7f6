"""LightGBM across the fleet with mlforecast, as a user writes it in twenty lines.

Runs in ``.venv-peers`` (beside statsforecast), started by :mod:`bench.accuracy.peers` from
the repository's root; it imports nothing of fleetcast but :mod:`bench.accuracy.peer_rows`:

    .venv-peers/bin/python -m bench.accuracy.mlforecast_peers SERIES OUT --horizon 30
    .venv-peers/bin/python -m bench.accuracy.mlforecast_peers SERIES OUT --horizon 720 \
        --frequency h

One LightGBM model with its defaults over every customer of the set at once (each series
scaled by its own mean and deviation, as mlforecast's guide does for series of different
levels); daily, on lags of one, two and four weeks, weekly and four-weekly rolling means,
and the calendar; hourly, on lags of one and two days and one and two weeks, daily and
weekly rolling means, the hour and the day of the week; recursive over the horizon. Its 80% interval: mlforecast's conformal
``PredictionIntervals`` over two windows of the horizon's length (two more fits). mlforecast
refuses them when any series is shorter than the windows need (2 h + 1 days), so such
customers get their point forecast from a second fit on every customer, without interval,
as a user would have to. CPU: the process's, every fit and prediction, divided by the
customers.
"""

from __future__ import annotations

import argparse
import time
import warnings

import pandas as pd
from lightgbm import LGBMRegressor
from mlforecast import MLForecast
from mlforecast.lag_transforms import RollingMean
from mlforecast.target_transforms import LocalStandardScaler
from mlforecast.utils import PredictionIntervals

from bench.accuracy import peer_rows

MODEL = "LightGBM"
METHOD = "mlforecast LightGBM"
LEVEL = 80
WINDOWS = 2


def forecaster(frequency: str = "D") -> MLForecast:
    if frequency == "h":
        return MLForecast(
            models={MODEL: LGBMRegressor(verbosity=-1)},
            freq="h",
            lags=[24, 48, 168, 336],
            lag_transforms={1: [RollingMean(window_size=24)], 24: [RollingMean(window_size=168)]},
            date_features=["hour", "dayofweek"],
            target_transforms=[LocalStandardScaler()],
        )
    return MLForecast(
        models={MODEL: LGBMRegressor(verbosity=-1)},
        freq="D",
        lags=[7, 14, 28],
        lag_transforms={1: [RollingMean(window_size=7)], 7: [RollingMean(window_size=28)]},
        date_features=["dayofweek", "dayofyear", "month"],
        target_transforms=[LocalStandardScaler()],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("series")
    parser.add_argument("output")
    parser.add_argument("--horizon", type=int, required=True)
    parser.add_argument("--frequency", choices=("D", "h"), default="D")
    options = parser.parse_args()
    # Lags a short series lacks are NaN, which LightGBM takes; mlforecast warns each step.
    warnings.filterwarnings("ignore", category=UserWarning, module="mlforecast")
    frame = pd.read_parquet(options.series).sort_values(["unique_id", "ds"])
    frame["unique_id"] = frame["unique_id"].astype(str)
    started = time.process_time()
    lengths = frame.groupby("unique_id").size()
    long_enough = set(lengths.index[lengths >= WINDOWS * options.horizon + 1])
    parts = []
    if long_enough:
        model = forecaster(options.frequency)
        model.fit(
            frame[frame["unique_id"].isin(long_enough)],
            prediction_intervals=PredictionIntervals(n_windows=WINDOWS, h=options.horizon),
        )
        parts.append(model.predict(h=options.horizon, level=[LEVEL]))
    if len(long_enough) < len(lengths):
        model = forecaster(options.frequency)
        model.fit(frame)
        point = model.predict(h=options.horizon)
        parts.append(point[~point["unique_id"].isin(long_enough)])
    forecast = pd.concat(parts, ignore_index=True)
    cpu = time.process_time() - started
    customers = frame["unique_id"].unique()
    peer_rows.from_long(
        forecast,
        METHOD,
        dict.fromkeys(customers, cpu / len(customers)),
        yhat=MODEL,
        q10=f"{MODEL}-lo-{LEVEL}",
        q90=f"{MODEL}-hi-{LEVEL}",
    ).to_parquet(options.output)


if __name__ == "__main__":
    main()
