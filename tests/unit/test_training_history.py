"""Reading one customer's CSV: clean series in, a clear reason out for anything else."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fleetcast_training.failures import CustomerFailure, FailureKind
from fleetcast_training.history import read_history


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "acme.csv"
    path.write_text(text)
    return path


def test_rows_are_sorted_and_rows_without_a_value_dropped(tmp_path: Path):
    # Given unsorted rows, one without a value
    path = write(tmp_path, "ds,y\n2025-01-03,3\n2025-01-01,1.5\n2025-01-02,\n")
    # When read
    history = read_history(path)
    # Then
    assert history["ds"].tolist() == [pd.Timestamp("2025-01-01"), pd.Timestamp("2025-01-03")]
    assert history["y"].tolist() == [1.5, 3.0]


def test_hourly_times_with_an_offset_become_naive_utc(tmp_path: Path):
    path = write(tmp_path, "ds,y\n2025-01-01T01:00:00+01:00,1\n2025-01-01 01:00:00,2\n")
    history = read_history(path)
    assert history["ds"].tolist() == [
        pd.Timestamp("2025-01-01 00:00"),
        pd.Timestamp("2025-01-01 01:00"),
    ]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("date,value\n2025-01-01,1\n", "header must be 'ds,y', found 'date,value'"),
        ("ds,y\n2025-01-01,1\nyesterday,2\n", "line 3: ds 'yesterday' is not a date or time"),
        ("ds,y\n2025-01-01,lots\n", "line 2: y 'lots' is not a number"),
        ("ds,y\n2025-01-01,inf\n", "line 2: y 'inf' is not finite"),
        (
            "ds,y\n2025-01-01,1\n2025-01-01,2\n",
            "timestamp 2025-01-01 00:00:00 appears more than once",
        ),
        ("", "not a readable CSV file"),
    ],
)
def test_anything_but_a_clean_series_is_refused_with_a_reason(
    tmp_path: Path, text: str, reason: str
):
    with pytest.raises(CustomerFailure) as raised:
        read_history(write(tmp_path, text))
    assert raised.value.kind is FailureKind.UNREADABLE
    assert reason in raised.value.reason
