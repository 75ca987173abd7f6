"""Reading one customer's CSV: clean series in, a clear reason out for anything else."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fleetcast_training import history as history_module
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


def read_checked_only(path: Path) -> pd.DataFrame | str:
    """What ``read_history`` returns (or the reason it refuses) on the pandas path alone."""
    try:
        frame = history_module._read_checked(path)
    except CustomerFailure as failure:
        return failure.reason
    frame = frame.dropna().sort_values("ds", kind="stable", ignore_index=True)
    if frame["ds"].duplicated().any():
        return "duplicated"
    return frame


@pytest.mark.parametrize(
    "text",
    [
        "ds,y\n2025-01-03,3\n2025-01-01,1.5\n2025-01-02,\n,7\n",
        "ds,y\n2025-01-01 10:00,1e3\n2025-01-01T10:00:01.5,-0\n2025-01-01T11,.5\n",
        'ds,y\n2025-01-01,"3"\n2025-01-02, 4\n2025-01-03,+5.\n',
        "ds,y\n2025-01-01T01:00:00+01:00,1\n2025-01-01 01:00:00,2\n",
        "ds,y\n2025-01-01T00:00:00.123456789,3\n",
        "ds,y\n2025-1-2,3\n20250103,4\n",
        "ds,y\n2025-01-01,nan\n",
        "ds,y\n2025-01-01,-inf\n",
        "ds,y\n2025-01-01,NA\n",
        "ds,y\n2025-01-01\n2025-01-02,3\n",
        "ds,y,extra\n2025-01-01,1,2\n",
        "y,ds\n1,2025-01-01\n",
    ],
)
def test_a_file_reads_as_the_checked_pandas_path_reads_it(tmp_path: Path, text: str):
    # Given a file Arrow may or may not parse itself
    path = write(tmp_path, text)
    expected = read_checked_only(path)
    # When read
    try:
        history: pd.DataFrame | str = read_history(path)
    except CustomerFailure as failure:
        history = failure.reason
    # Then the rows, their types, or the reason for refusing are the pandas path's
    if isinstance(expected, str):
        assert history == expected
    else:
        assert isinstance(history, pd.DataFrame)
        pd.testing.assert_frame_equal(history, expected, check_exact=True)
        assert history["y"].map(str).tolist() == expected["y"].map(str).tolist()  # -0.0


def test_files_as_processing_writes_them_are_parsed_by_arrow(tmp_path: Path):
    # Given a file of dates and plain decimals, with a gap and a day without a value
    path = write(tmp_path, "ds,y\n2025-01-01,1.25\n2025-01-02,\n2025-01-04,-3\n")
    # When parsed, Then Arrow reads it (not the slower pandas path) as pandas would
    parsed = history_module._read_plain(path)
    assert parsed is not None
    pd.testing.assert_frame_equal(parsed, history_module._read_checked(path), check_exact=True)
