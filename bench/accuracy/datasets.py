"""The accuracy benchmark's data sets: real meter readings, and how each is split.

Each set is a Parquet file in fleetcast's upload shape (``customer_id, timestamp,
consumption``), the readings as the source publishes them (``bench/accuracy/data/README.md``
says where from and how they were taken). For each customer:

- its **last complete day** is the last day with as many readings as its most common
  count per day (a file that stops mid-day leaves a partial last day that no forecaster
  could be asked about);
- the **held-back horizon** of window 0 is the last ``horizon`` days up to and including
  it; window ``w`` is the ``horizon`` days that end ``w * horizon`` days earlier (window 1:
  the 30 days before the last 30), so a figure does not rest on one month; nothing of the
  horizon's days or any later day is shown to any method;
- the **fit readings** are every reading before the horizon, uploaded to fleetcast as they
  are (for window 1, the last window's days are left out too);
- the **daily series** the peers get is what a user would compute with pandas: the fit
  readings summed per calendar day (``resample("D").sum()``, so a day without readings is
  0 and a partial day is its partial total), from the customer's first reading day to the
  day before the horizon. The actuals are the held-back days summed the same way.

A customer with fewer than :data:`MIN_FIT_DAYS` days before the horizon is left out of
every method and counted.

The hourly part splits the same way with :data:`HOURLY`: the same held-back days, their
hours the horizon (24 a day), and the series and actuals the readings summed per hour
(``resample("h").sum()``, local time as the source wrote it: a clock change leaves an
hour of 0 in spring and an hour of two in autumn, as a user's pandas would).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

SHARED_DATA = Path("shared") / "accuracy-data"


def _shared_data(checkout: Path) -> Path:
    """``shared/accuracy-data`` in the nearest folder above the checkout that has it (a
    checkout beside shared/, or a worktree further down); beside the checkout if none."""
    for folder in checkout.parents:
        if (folder / SHARED_DATA).is_dir():
            return folder / SHARED_DATA
    return checkout.parent / SHARED_DATA


# The data files are not in the repository (public data is never committed): every
# developer and CI run has them in ``shared/accuracy-data`` beside the checkout
# (bench/accuracy/data/README.md); FLEETCAST_ACCURACY_DATA names another folder.
DATA_DIR = Path(
    os.environ.get("FLEETCAST_ACCURACY_DATA", _shared_data(Path(__file__).resolve().parents[2]))
)
# Four weeks of weekly pattern before the horizon at the least: below that neither a
# weekly seasonal model nor seasonal naive's in-sample scale (MASE) means much.
MIN_FIT_DAYS = 28


@dataclass(frozen=True)
class DataSet:
    key: str
    title: str
    file: str
    description: str
    # The country whose public holidays a stack serving these customers is given
    # (DefaultHolidayCountry), as a deployment in that country would be.
    holiday_country: str

    @property
    def path(self) -> Path:
        path = DATA_DIR / self.file
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: make accuracy reads its real data sets from "
                "shared/accuracy-data beside the checkout (or FLEETCAST_ACCURACY_DATA); "
                "bench/accuracy/data/README.md says where they come from and "
                "`python -m bench.accuracy.rebuild_data` writes them again"
            )
        return path


DATA_SETS = (
    DataSet(
        key="london-lcl",
        title="London households (Low Carbon London, 2013)",
        file="london-lcl-2013.parquet",
        description="100 London households of UK Power Networks' Low Carbon London "
        "smart-meter trial, half-hourly kWh, calendar year 2013",
        holiday_country="GB",
    ),
    DataSet(
        key="sgsc-nsw",
        title="NSW households (Smart Grid, Smart City, 2013)",
        file="sgsc-nsw-2013.parquet",
        description="50 New South Wales households of Ausgrid's Smart Grid, Smart City "
        "customer trial, half-hourly kWh (general supply), 2013",
        holiday_country="AU",
    ),
    DataSet(
        key="cambridge-estates",
        title="Cambridge University buildings (2022-2023)",
        file="cambridge-estates-2022-2023.parquet",
        description="74 non-residential buildings of the University of Cambridge estate "
        "(offices, labs, libraries), whole-building electricity, hourly kWh, 2022-2023",
        holiday_country="GB",
    ),
)


@dataclass(frozen=True)
class Frequency:
    """The periods a split is counted in: days (the daily models) or hours (issue 42's
    hourly part, fleetcast run with ``ModelFrequency=H``)."""

    # pandas' alias for resample and date_range.
    alias: str
    # template.yaml's ModelFrequency for this frequency.
    model_frequency: str
    per_day: int
    # Seasonal naive's season and MASE's scale: a week of days, a day of hours.
    season: int
    unit: str

    @property
    def period(self) -> pd.Timedelta:
        return pd.Timedelta(days=1) / self.per_day


DAILY = Frequency(alias="D", model_frequency="D", per_day=1, season=7, unit="day")
HOURLY = Frequency(alias="h", model_frequency="H", per_day=24, season=24, unit="hour")


@dataclass(frozen=True)
class CustomerSplit:
    customer_id: str
    # The held-back horizon's periods (days, or hours for an hourly split), in order.
    horizon_index: pd.DatetimeIndex
    actuals: np.ndarray
    # The series every peer is fitted on (index: periods, values: totals).
    series: pd.Series
    # The readings before the horizon, as uploaded to fleetcast.
    fit_readings: pd.DataFrame
    frequency: Frequency = DAILY

    def first(self, periods: int) -> CustomerSplit:
        """The same split scored on the horizon's first ``periods`` only (the day ahead of
        a 30-day hourly horizon)."""
        return replace(
            self, horizon_index=self.horizon_index[:periods], actuals=self.actuals[:periods]
        )


WINDOWS = (0, 1)
# The hourly part's day-ahead from a rolling origin (bench.accuracy.rolling): days between
# two origins, 0, 5, ..., 25 of a 30-day window (six origins, each on another weekday).
ROLLING_EVERY_DAYS = 5


def window_title(window: int, horizon: int) -> str:
    """How the tables name a window."""
    if window == 0:
        return f"last {horizon} days"
    return f"the {horizon} days before the last {window * horizon}"


@dataclass(frozen=True)
class SplitSet:
    data_set: DataSet
    customers: list[CustomerSplit]
    # Customers left out for too short a history, and how many readings the set has.
    too_short: list[str]
    readings: int
    window: int = 0


def load_readings(path: Path) -> pd.DataFrame:
    frame = pq.read_table(path).to_pandas()
    frame["customer_id"] = frame["customer_id"].astype(str)
    return frame.sort_values(["customer_id", "timestamp"], kind="stable", ignore_index=True)


def split(
    data_set: DataSet,
    horizon: int,
    customers: int | None = None,
    readings: pd.DataFrame | None = None,
    window: int = 0,
    frequency: Frequency = DAILY,
) -> SplitSet:
    """Every customer's split for ``window`` (the first ``customers`` of the sorted ids, if
    given), its series and horizon in periods of ``frequency``."""
    frame = load_readings(data_set.path) if readings is None else readings
    splits: list[CustomerSplit] = []
    too_short: list[str] = []
    for customer_id, rows in frame.groupby("customer_id", sort=True):
        if customers is not None and len(splits) >= customers:
            break
        customer = split_customer(str(customer_id), rows, horizon, window, frequency)
        if customer is None:
            too_short.append(str(customer_id))
        else:
            splits.append(customer)
    return SplitSet(data_set, splits, too_short, len(frame), window)


def split_customer(
    customer_id: str,
    rows: pd.DataFrame,
    horizon: int,
    window: int = 0,
    frequency: Frequency = DAILY,
) -> CustomerSplit | None:
    """``horizon`` held-back days, counted in periods of ``frequency`` (hours: the same
    days, 24 periods each)."""
    days = rows["timestamp"].dt.normalize()
    per_day = days.value_counts()
    complete = per_day[per_day == per_day.mode().max()].index.max()
    end = complete - pd.Timedelta(days=window * horizon)
    horizon_days = pd.date_range(end=end, periods=horizon, freq="D")
    fit = rows[days < horizon_days[0]]
    if fit.empty:
        return None
    series = period_totals(fit, horizon_days[0] - frequency.period, frequency)
    if len(series) < MIN_FIT_DAYS * frequency.per_day:
        return None
    held = rows[(days >= horizon_days[0]) & (days <= horizon_days[-1])]
    horizon_index = pd.date_range(
        horizon_days[0], periods=horizon * frequency.per_day, freq=frequency.alias
    )
    actuals = (
        held.set_index("timestamp")["consumption"]
        .resample(frequency.alias)
        .sum()
        .reindex(horizon_index, fill_value=0.0)
        .to_numpy(np.float64)
    )
    return CustomerSplit(
        customer_id=customer_id,
        horizon_index=horizon_index,
        actuals=actuals,
        series=series,
        fit_readings=fit[["customer_id", "timestamp", "consumption"]].reset_index(drop=True),
        frequency=frequency,
    )


def period_totals(
    readings: pd.DataFrame, end: pd.Timestamp, frequency: Frequency = DAILY
) -> pd.Series:
    """The readings summed per calendar day (or hour), from the first reading's to ``end``."""
    totals = readings.set_index("timestamp")["consumption"].resample(frequency.alias).sum()
    index = pd.date_range(totals.index[0], end, freq=frequency.alias)
    return totals.reindex(index, fill_value=0.0).astype(np.float64)
