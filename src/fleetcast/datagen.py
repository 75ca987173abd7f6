"""Synthetic meter readings: ``customer_id,timestamp,consumption``, seeded and deterministic.

Shaped like the public AWS sample's data, with its bug fixed: the yearly wave uses real day
numbers (days since 1970-01-01), so it repeats once a year rather than every eight days.
Each customer's daily consumption is::

    (baseline + amplitude * sin(2 pi * day_number / 365.25 + phase)) * weekly + noise

with baseline ~ U(500, 1000), amplitude ~ U(100, 200), phase ~ U(0, 2 pi), weekends lower
by a per-customer U(5 %, 35 %), Gaussian noise (sd ~ U(10, 30)), and a few random days
missing. A customer's parameters depend only on ``seed`` and its id, so a later upload
generated with other dates or other customers continues the same curves.

With ``holidays`` (a country of the ``holidays`` package, ``US``, or a country and a
subdivision, ``DE-BY``) use drops on that calendar's public holidays, as energy use does
(by 20-40 %): each customer's expected use is lower by a per-customer U(20 %, 40 %) on
those dates, on top of the weekend dip for a holiday at a weekend (so a holiday that falls
on a weekend also shows, as Prophet's one effect per holiday expects). The dates are the
ones fleetcast's training gives Prophet (``fleetcast_contracts.holiday_calendar.holiday_dates``),
and every other day keeps the value it has without ``holidays`` for the same seed.

With ``readings_per_day`` > 1 each day's total is split over that many readings at
irregular times (one random second in each equal slice of the day), as raw meters report.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleetcast_contracts.holiday_calendar import holiday_dates
from fleetcast_contracts.ids import validate_customer_id

COLUMNS = ("customer_id", "timestamp", "consumption")
SECONDS_PER_DAY = 86_400
# write_readings generates this many customers at a time (730 days: about 60 MB of table).
CUSTOMERS_PER_TABLE = 2000
_EPOCH = date(1970, 1, 1)
# A customer's holiday dip is drawn from a generator of its own (this word after the
# customer's identity), so the days that are not holidays keep their values.
_HOLIDAY_STREAM = 0x484F4C49


def generate_readings(
    customers: int = 1000,
    *,
    start: date | str = "2022-01-01",
    days: int = 730,
    readings_per_day: int = 1,
    seed: int = 0,
    customer_offset: int = 0,
    customer_ids: Sequence[str] | None = None,
    gap_rate: float = 0.01,
    holidays: str | None = None,
) -> pd.DataFrame:
    """Readings as a DataFrame, in file order: by customer, then by time.

    Args:
        customers: how many customers, with ids ``str(customer_offset + i)``. Ignored when
            ``customer_ids`` is given.
        start: first day (a ``date`` or ``"YYYY-MM-DD"``).
        days: how many consecutive days from ``start``.
        readings_per_day: 1 gives one reading per day with ``timestamp`` ``YYYY-MM-DD``;
            more gives that many readings at irregular times, ``YYYY-MM-DDTHH:MM:SSZ``.
        seed: everything random derives from it; the same arguments give the same rows.
        customer_offset: first numeric id, so a second upload can add new customers.
        customer_ids: explicit ids (e.g. a few existing customers to extend).
        gap_rate: share of (customer, day) pairs left out, as missing days.
        holidays: a holiday calendar, ``COUNTRY`` or ``COUNTRY-SUBDIVISION`` (``US``,
            ``DE-BY``), whose public holidays lower use; None for no holidays.

    Returns:
        Columns ``customer_id`` (str), ``timestamp`` (str, exactly as written to a file)
        and ``consumption`` (float, rounded to 3 decimals).
    """
    return _readings(
        _customer_ids(customers, customer_offset, customer_ids),
        start=start,
        days=days,
        readings_per_day=readings_per_day,
        seed=seed,
        gap_rate=gap_rate,
        holidays=holidays,
    ).to_pandas()


def write_readings(
    path: str | Path,
    customers: int = 1000,
    *,
    start: date | str = "2022-01-01",
    days: int = 730,
    readings_per_day: int = 1,
    seed: int = 0,
    customer_offset: int = 0,
    customer_ids: Sequence[str] | None = None,
    gap_rate: float = 0.01,
    holidays: str | None = None,
) -> int:
    """Write :func:`generate_readings`' rows as CSV to ``path`` (gzip when it ends ``.gz``),
    :data:`CUSTOMERS_PER_TABLE` customers at a time: memory stays bounded whatever the
    fleet, and the file is the same (a customer's rows do not depend on the others').

    Returns the number of rows written.
    """
    ids = _customer_ids(customers, customer_offset, customer_ids)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Arrow quotes every header name and every string; none of these values needs quotes.
    options = pcsv.WriteOptions(include_header=False, quoting_style="none")
    header = (",".join(COLUMNS) + "\n").encode()
    rows = 0
    with _open_for_writing(target) as output:
        output.write(header)
        # At least one table, so that the arguments are checked for an empty fleet too.
        for first in range(0, max(len(ids), 1), CUSTOMERS_PER_TABLE):
            table = _readings(
                ids[first : first + CUSTOMERS_PER_TABLE],
                start=start,
                days=days,
                readings_per_day=readings_per_day,
                seed=seed,
                gap_rate=gap_rate,
                holidays=holidays,
            )
            pcsv.write_csv(table, output, write_options=options)
            rows += table.num_rows
    return rows


def _open_for_writing(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        # gzip level 1: several times faster than the default (or Arrow's gzip stream), and
        # the file is barely larger.
        return gzip.GzipFile(path, "wb", compresslevel=1)
    return path.open("wb")


def _readings(
    ids: list[str],
    *,
    start: date | str,
    days: int,
    readings_per_day: int,
    seed: int,
    gap_rate: float,
    holidays: str | None,
) -> pa.Table:
    """The rows of the customers ``ids`` (checked by :func:`_customer_ids`)."""
    first_day = date.fromisoformat(start) if isinstance(start, str) else start
    if days < 1:
        raise ValueError(f"days must be at least 1, not {days}")
    if not 1 <= readings_per_day <= SECONDS_PER_DAY:
        raise ValueError(f"readings_per_day must be 1 to {SECONDS_PER_DAY}, not {readings_per_day}")
    if not 0 <= gap_rate < 1:
        raise ValueError(f"gap_rate must be in [0, 1), not {gap_rate}")

    if not ids:
        return pa.table({name: pa.array([], type=pa.string()) for name in COLUMNS}).set_column(
            2, "consumption", pa.array([], type=pa.float64())
        )
    day_numbers = (first_day - _EPOCH).days + np.arange(days)
    is_holiday = _holiday_mask(holidays, day_numbers)
    day_labels = pa.array(
        np.datetime_as_string(day_numbers.astype("datetime64[D]"), unit="D").tolist()
    )
    customer_index, day_index, seconds, consumption = (
        np.concatenate(parts)
        for parts in zip(
            *(
                _customer_readings(
                    index, customer_id, day_numbers, is_holiday, readings_per_day, seed, gap_rate
                )
                for index, customer_id in enumerate(ids)
            ),
            strict=True,
        )
    )
    timestamps = day_labels.take(pa.array(day_index))
    if readings_per_day > 1:
        timestamps = pc.binary_join_element_wise(
            timestamps, "T", _time_labels().take(pa.array(seconds)), "Z", ""
        )
    return pa.table(
        {
            "customer_id": pa.array(ids, type=pa.string()).take(pa.array(customer_index)),
            "timestamp": timestamps,
            "consumption": pa.array(np.round(consumption, 3), type=pa.float64()),
        }
    )


def _customer_readings(
    index: int,
    customer_id: str,
    day_numbers: npt.NDArray[np.int64],
    is_holiday: npt.NDArray[np.bool_],
    readings_per_day: int,
    seed: int,
    gap_rate: float,
) -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]
]:
    """One customer's rows: (customer index, day index, second of day, consumption).

    Every draw is seeded by the seed, the id and the dates alone, so a customer's rows do
    not depend on which other customers are generated with it, and its daily totals and
    gaps do not depend on ``readings_per_day``.
    """
    identity = [seed, zlib.crc32(customer_id.encode())]
    dates = [int(day_numbers[0]) + _EPOCH.toordinal(), len(day_numbers)]
    baseline, amplitude, phase, weekend_dip, noise_sd = np.random.default_rng(identity).uniform(
        [500, 100, 0, 0.05, 10], [1000, 200, 2 * np.pi, 0.35, 30]
    )
    season = amplitude * np.sin(2 * np.pi * day_numbers / 365.25 + phase)
    # 1970-01-01 was a Thursday: (day_number + 3) % 7 is 0 on Mondays, 5 and 6 at weekends.
    weekly = np.where((day_numbers + 3) % 7 >= 5, 1 - weekend_dip, 1.0)
    if is_holiday.any():
        holiday_dip = np.random.default_rng([*identity, _HOLIDAY_STREAM]).uniform(0.2, 0.4)
        weekly = np.where(is_holiday, weekly * (1 - holiday_dip), weekly)
    daily_rng = np.random.default_rng([*identity, *dates])
    noise = daily_rng.normal(0, noise_sd, len(day_numbers))
    daily = np.clip((baseline + season) * weekly + noise, 0, None)
    kept_days = np.flatnonzero(daily_rng.random(len(day_numbers)) >= gap_rate)

    day_index = np.repeat(kept_days, readings_per_day)
    if readings_per_day == 1:
        return np.full(len(kept_days), index), day_index, np.zeros_like(day_index), daily[kept_days]
    reading_rng = np.random.default_rng([*identity, *dates, readings_per_day])
    # One random second in each equal slice of the day: irregular, increasing, never equal.
    slice_length = SECONDS_PER_DAY // readings_per_day
    offsets = reading_rng.integers(0, slice_length, (len(kept_days), readings_per_day))
    seconds = np.arange(readings_per_day) * slice_length + offsets
    weights = reading_rng.uniform(0.5, 1.5, (len(kept_days), readings_per_day))
    shares = weights / weights.sum(axis=1, keepdims=True)
    consumption = (daily[kept_days, None] * shares).ravel()
    return np.full(len(day_index), index), day_index, seconds.ravel(), consumption


def _holiday_mask(
    holidays: str | None, day_numbers: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Which of ``day_numbers`` are public holidays of the calendar ``holidays`` names."""
    if holidays is None:
        return np.zeros(len(day_numbers), dtype=bool)
    country, _, subdivision = holidays.upper().partition("-")
    first, last = (_EPOCH + timedelta(days=int(day)) for day in day_numbers[[0, -1]])
    try:
        dates = holiday_dates(country, subdivision or None, range(first.year, last.year + 1))
    except ValueError as error:
        raise ValueError(f"holidays {holidays!r}: {error}") from None
    holiday_numbers = np.array([(day - _EPOCH).days for day, _ in dates], dtype=np.int64)
    return np.isin(day_numbers, holiday_numbers)


def _customer_ids(
    customers: int, customer_offset: int, customer_ids: Sequence[str] | None
) -> list[str]:
    if customer_ids is not None:
        ids = [validate_customer_id(customer_id) for customer_id in customer_ids]
    else:
        if customers < 0 or customer_offset < 0:
            raise ValueError("customers and customer_offset must not be negative")
        ids = [str(customer_offset + index) for index in range(customers)]
    if len(set(ids)) != len(ids):
        raise ValueError("customer ids must be unique")
    return ids


def _time_labels() -> pa.Array:
    """``HH:MM:SS`` for every second of a day, indexed by second."""
    seconds = np.arange(SECONDS_PER_DAY)
    labels = [
        f"{hour:02d}:{minute:02d}:{second:02d}"
        for hour, minute, second in zip(
            (seconds // 3600).tolist(),
            (seconds // 60 % 60).tolist(),
            (seconds % 60).tolist(),
            strict=True,
        )
    ]
    return pa.array(labels, type=pa.string())
