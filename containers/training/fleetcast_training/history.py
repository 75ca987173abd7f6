"""One customer's history as processing wrote it: ``{customer_id}.csv`` with header ``ds,y``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fleetcast_training.failures import CustomerFailure, FailureKind

COLUMNS = ["ds", "y"]


def read_history(path: Path) -> pd.DataFrame:
    """Return ``ds`` (sorted, unique, timezone-naive UTC) and ``y`` (finite floats).

    Rows without a value are dropped, as Prophet would drop them. Anything else that is
    not a clean series raises :class:`CustomerFailure`: training does not guess.
    """
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

    history = pd.DataFrame({"ds": ds.dt.tz_localize(None), "y": y.astype(np.float64)})
    history = history.dropna().sort_values("ds", kind="stable", ignore_index=True)
    duplicated = history["ds"].duplicated()
    if duplicated.any():
        first = history.loc[duplicated.idxmax(), "ds"]
        raise CustomerFailure(FailureKind.UNREADABLE, f"timestamp {first} appears more than once")
    return history


def _reject_first(raw: pd.DataFrame, bad: pd.Series, column: str, problem: str) -> None:
    if bad.any():
        row = int(bad.to_numpy().argmax())
        # +2: one for the header line, one because people count lines from 1.
        raise CustomerFailure(
            FailureKind.UNREADABLE,
            f"line {row + 2}: {column} {raw.loc[row, column]!r:.40} {problem}",
        )
