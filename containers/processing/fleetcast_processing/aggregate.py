"""Totals per (customer, period): what the job keeps of the readings it accepts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fleetcast_contracts.frequency import Frequency

US_PER_SECOND = 1_000_000
_PERIOD_BITS = 32
_PERIOD_MASK = (1 << _PERIOD_BITS) - 1


def period_us(frequency: Frequency) -> int:
    """One period of the model's frequency (a UTC day or hour), in microseconds."""
    return frequency.period_seconds * US_PER_SECOND


def period_numbers(
    instants_us: npt.NDArray[np.int64], frequency: Frequency
) -> npt.NDArray[np.int64]:
    """The period each instant falls in, as a count of periods since 1970-01-01."""
    return instants_us // period_us(frequency)


def period_labels(periods: npt.NDArray[np.int64], frequency: Frequency) -> pa.Array:
    """``ds`` strings: ``YYYY-MM-DD`` for days, ``YYYY-MM-DDTHH:00:00`` for hours."""
    if len(periods) == 0:
        return pa.array([], type=pa.string())
    # Label every period between the first and the last once, then pick: periods span
    # years at most, far fewer than the rows.
    first = int(periods.min())
    starts = (np.arange(first, int(periods.max()) + 1) * period_us(frequency)).astype(
        "datetime64[us]"
    )
    if frequency.periods_per_day == 1:
        labels = np.datetime_as_string(starts, unit="D").tolist()
    else:
        labels = np.datetime_as_string(starts, unit="s").tolist()
    return pa.array(labels, type=pa.string()).take(pa.array(periods - first))


@dataclass(frozen=True)
class Totals:
    """Sums per (customer code, period), sorted by code then period."""

    codes: npt.NDArray[np.int64]
    periods: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.codes)

    def keys(self) -> npt.NDArray[np.int64]:
        """Each sum's (customer code, period) as :func:`period_keys` has it."""
        return (self.codes << _PERIOD_BITS) | self.periods

    @classmethod
    def empty(cls) -> Totals:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))

    @classmethod
    def of(
        cls,
        codes: npt.NDArray[np.int64],
        periods: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
    ) -> Totals:
        keys, sums, _ = _sum_by_key((codes << _PERIOD_BITS) | periods, values)
        return cls(keys >> _PERIOD_BITS, keys & _PERIOD_MASK, sums)


def _sum_by_key(
    keys: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Sums per distinct key (in key order), and how many values each sum is of."""
    if len(keys) == 0:
        return keys, values, np.zeros(0, np.int64)
    if is_sorted(keys):  # uploads sorted by customer and time skip the sort
        starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
        return keys[starts], np.add.reduceat(values, starts), np.diff(starts, append=len(keys))
    distinct, inverse, occurrences = np.unique(keys, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=values, minlength=len(distinct)).astype(np.float64)
    return distinct, sums, occurrences.astype(np.int64)


def is_sorted(values: npt.NDArray[np.int64]) -> bool:
    return bool(np.all(values[1:] >= values[:-1]))


def period_keys(
    codes: npt.NDArray[np.int64], instants_us: npt.NDArray[np.int64], frequency: Frequency
) -> npt.NDArray[np.int64]:
    """One key per reading for its (customer code, period), ordered as that pair is."""
    return (codes << _PERIOD_BITS) | period_numbers(instants_us, frequency)


def period_totals(
    codes: npt.NDArray[np.int64],
    instants_us: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    frequency: Frequency,
) -> tuple[Totals, npt.NDArray[np.int64]]:
    """Readings summed per (customer code, period), and how many readings each sum adds up."""
    keys, sums, rows = _sum_by_key(period_keys(codes, instants_us, frequency), values)
    return Totals(keys >> _PERIOD_BITS, keys & _PERIOD_MASK, sums), rows
