"""One customer's history: its rows of a training part (``{customer_id}.series``, unpacked by
:mod:`fleetcast_training.parts`), or a ``{customer_id}.csv`` with header ``ds,y`` (runs
processed before parts)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from fleetcast_contracts.shards import USE_OK, USES
from fleetcast_training.failures import CustomerFailure, FailureKind
from fleetcast_training.parts import SERIES_DTYPE, SERIES_SUFFIX

COLUMNS = ["ds", "y"]
# A period whose total is more than IMPLAUSIBLE_FACTOR times the customer's 95th percentile
# (IMPLAUSIBLE_PERCENTILE) of its positive fitted totals is a meter's glitch, not use: a
# register rolling over, a reading sent in Wh among kWh. Fitted, one such period moved the
# level of every family that saw it (make accuracy's NSW households with one reading a
# thousand times a customer's largest: that customer's WAPE 12 times the others', the
# set's mean WAPE 0.34 -> 0.59). It is left out of fitting like an incomplete period (a
# gap, not filled in), counted as ``implausible``, and stays in the stored readings. Real
# use stays far below it: the largest period of make accuracy's 222 meters is at most 3.7
# times their 95th percentile by day, 19 by hour (a building's one busy hour). A customer
# with fewer than IMPLAUSIBLE_MIN_PERIODS positive periods has no percentile to trust and
# no period judged so.
IMPLAUSIBLE_FACTOR = 50.0
IMPLAUSIBLE_PERCENTILE = 95.0
IMPLAUSIBLE_MIN_PERIODS = 20
IMPLAUSIBLE = "implausible"
# What processing writes (ISO dates or times without a zone, plain decimals) parses
# straight into these; anything else takes the pandas path, which says what is wrong.
_ARROW_CONVERSION = pa_csv.ConvertOptions(
    column_types={"ds": pa.timestamp("us"), "y": pa.float64()},
    null_values=[""],
    strings_can_be_null=False,
    quoted_strings_can_be_null=True,
)


@dataclass(frozen=True)
class History:
    """One customer's rows as arrays: ``times`` sorted and unique (datetime64, naive UTC),
    ``values`` finite floats. Training works on these; a DataFrame is made only for the
    customers that go through Prophet itself.

    From a training part also ``readings``, how many readings make each row's total, and
    ``interval_s``, the customer's reading interval in seconds (contracts.shards), so that
    a period with fewer readings than the interval implies can be told from low
    consumption; None where the input does not say (a customer file of runs before parts,
    a part's rows that needed sorting or dropping, or a customer with a single reading for
    the interval).
    """

    times: npt.NDArray[np.datetime64]
    values: npt.NDArray[np.float64]
    readings: npt.NDArray[np.int64] | None = None
    interval_s: float | None = None
    # Each row's use, an index into contracts.shards.USES (None: every row is ok).
    use: npt.NDArray[np.uint8] | None = None

    @classmethod
    def of(cls, frame: pd.DataFrame) -> History:
        return cls(frame["ds"].to_numpy(), frame["y"].to_numpy(dtype=np.float64))

    def __len__(self) -> int:
        return int(self.values.size)

    def head(self, rows: int) -> History:
        """The first ``rows`` rows (all but the last ``-rows`` when negative)."""
        return self._take(slice(None, rows))

    def for_fitting(self) -> History:
        """The rows to fit: those whose use is ok and whose total is not implausible.
        Incomplete and inactive periods (contracts.shards) and implausible ones
        (:data:`IMPLAUSIBLE_FACTOR`) are gaps: left out, not filled in."""
        fitted = self._ok & ~self._implausible
        return self if fitted.all() else self._take(fitted)

    def left_out(self) -> dict[str, int]:
        """How many rows :meth:`for_fitting` leaves out, by use (``implausible`` for the
        ok rows it leaves out)."""
        counts: dict[str, int] = {}
        if self.use is not None:
            by_use = np.bincount(self.use, minlength=len(USES))
            counts = {USES[code]: int(by_use[code]) for code in np.flatnonzero(by_use) if code}
        implausible = int(self._implausible.sum())
        return {**counts, IMPLAUSIBLE: implausible} if implausible else counts

    def implausible(self) -> History:
        """The ok rows :meth:`for_fitting` leaves out as implausible."""
        return self._take(self._implausible)

    # (each mask computed once a history: for_fitting, left_out and implausible share it)
    @functools.cached_property
    def _ok(self) -> npt.NDArray[np.bool_]:
        if self.use is None:
            return np.ones(len(self), dtype=np.bool_)
        ok: npt.NDArray[np.bool_] = self.use == USES.index(USE_OK)
        return ok

    @functools.cached_property
    def _implausible(self) -> npt.NDArray[np.bool_]:
        positive = self.values[self._ok & (self.values > 0)]
        if len(positive) < IMPLAUSIBLE_MIN_PERIODS:
            return np.zeros(len(self), dtype=np.bool_)
        bound = IMPLAUSIBLE_FACTOR * float(np.percentile(positive, IMPLAUSIBLE_PERCENTILE))
        found: npt.NDArray[np.bool_] = self._ok & (self.values > bound)
        return found

    def _take(self, rows: slice | npt.NDArray[np.bool_]) -> History:
        return History(
            self.times[rows],
            self.values[rows],
            None if self.readings is None else self.readings[rows],
            self.interval_s,
            None if self.use is None else self.use[rows],
        )

    def frame(self) -> pd.DataFrame:
        """``ds`` and ``y``, as Prophet takes them."""
        return pd.DataFrame({"ds": self.times, "y": self.values})


def read_history(path: Path) -> pd.DataFrame:
    """Return ``ds`` (sorted, unique, timezone-naive UTC) and ``y`` (finite floats).

    Rows without a value are dropped, as Prophet would drop them. Anything else that is
    not a clean series raises :class:`CustomerFailure`: training does not guess.
    """
    return read_series(path).frame()


def read_series(path: Path) -> History:
    """:func:`read_history`'s rows as a :class:`History`; what processing writes (a clean
    ``.series`` of a training part) never becomes a DataFrame on the way."""
    if path.suffix == SERIES_SUFFIX:
        series = np.fromfile(path, dtype=SERIES_DTYPE)
        interval = float(series["interval_s"][0]) if len(series) else np.nan
        loaded = History(
            np.ascontiguousarray(series["ds"]),
            np.ascontiguousarray(series["y"]),
            np.ascontiguousarray(series["readings"]),
            None if np.isnan(interval) else interval,
            np.ascontiguousarray(series["use"]),
        )
        if np.isinf(loaded.values).any():
            raise CustomerFailure(FailureKind.UNREADABLE, "a value is not a finite number")
        if _clean(loaded):
            return loaded
        history = loaded.frame()
    else:
        history = _read_plain(path)
        if history is None:
            history = _read_checked(path)
    history = history.dropna().sort_values("ds", kind="stable", ignore_index=True)
    duplicated = history["ds"].duplicated()
    if duplicated.any():
        first = history.loc[duplicated.idxmax(), "ds"]
        raise CustomerFailure(FailureKind.UNREADABLE, f"timestamp {first} appears more than once")
    return History.of(history)


def _clean(history: History) -> bool:
    """Already what :func:`read_series` returns: no value missing, times strictly
    increasing (what processing writes), checked in numpy rather than pandas."""
    times = history.times
    return (
        times.dtype.kind == "M"
        and not np.isnat(times).any()
        and not np.isnan(history.values).any()
        and bool((times[1:] > times[:-1]).all())
    )


def _read_plain(path: Path) -> pd.DataFrame | None:
    """``ds`` and ``y`` parsed by Arrow, a sixth of pandas' CPU; None for a file Arrow
    does not read exactly as :func:`_read_checked` would (a zone offset, nanoseconds,
    a value that is not a finite number, another header...)."""
    try:
        table = pa_csv.read_csv(path, convert_options=_ARROW_CONVERSION)
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError):
        return None
    if table.column_names != COLUMNS:
        return None
    y = table.column("y")
    # Arrow reads "inf" and "nan" as numbers, which the checked path rejects.
    if pc.any(pc.invert(pc.is_finite(y))).as_py():
        return None
    return pd.DataFrame(
        {
            "ds": table.column("ds").to_numpy(zero_copy_only=False),
            "y": y.to_numpy(zero_copy_only=False),
        }
    )


def _read_checked(path: Path) -> pd.DataFrame:
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise CustomerFailure(
            FailureKind.UNREADABLE, f"not a readable CSV file: {error}"
        ) from error
    if list(raw.columns) != COLUMNS:
        shown = ",".join(str(c) for c in raw.columns)[:80]
        raise CustomerFailure(FailureKind.UNREADABLE, f"header must be 'ds,y', found {shown!r}")

    ds = pd.to_datetime(raw["ds"], format="ISO8601", errors="coerce", utc=True)
    _reject_first(raw, ds.isna() & raw["ds"].notna(), "ds", "is not a date or time")
    y = pd.to_numeric(raw["y"], errors="coerce")
    _reject_first(raw, y.isna() & raw["y"].notna(), "y", "is not a number")
    _reject_first(raw, np.isinf(y), "y", "is not finite")

    return pd.DataFrame({"ds": ds.dt.tz_localize(None), "y": y.astype(np.float64)})


def _reject_first(raw: pd.DataFrame, bad: pd.Series, column: str, problem: str) -> None:
    if bad.any():
        row = int(bad.to_numpy().argmax())
        # +2: one for the header line, one because people count lines from 1.
        raise CustomerFailure(
            FailureKind.UNREADABLE,
            f"line {row + 2}: {column} {raw.loc[row, column]!r:.40} {problem}",
        )
