"""The training container's parts, unpacked a slice at a time into one file per customer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetcast_contracts.shards import RUN_LAST_PERIOD_KEY
from fleetcast_training import parts
from fleetcast_training.history import read_series as read_customer
from fleetcast_training.parts import SERIES_DTYPE, unpack_parts


def part(path: Path, customers: list[tuple[str, int]]) -> dict[str, np.ndarray]:
    """A part with each customer's rows together, in row groups of 7 rows; returns the
    values written per customer."""
    ids, days, values, written = [], [], [], {}
    for number, (customer_id, rows) in enumerate(customers):
        y = np.arange(rows, dtype=np.float64) + 1000 * number
        ids += [customer_id] * rows
        days.append(np.datetime64("2025-01-01", "us") + np.arange(rows) * np.timedelta64(1, "D"))
        values.append(y)
        written.setdefault(customer_id, y)
    table = pa.table(
        {
            "customer_id": pa.array(ids, pa.string()),
            "ds": pa.array(np.concatenate(days)),
            "y": pa.array(np.concatenate(values)),
            # Each customer's readings per day: its row number, an interval of 1 hour
            "readings": pa.array(np.concatenate([np.arange(len(v)) for v in values]), pa.int64()),
            "interval_s": pa.array([3600.0] * len(ids), pa.float64()),
            "use": pa.array(["ok"] * len(ids), pa.string()),
        }
    )
    pq.write_table(table, path, row_group_size=7)
    return written


def read_series(path: Path) -> np.ndarray:
    return np.fromfile(path, dtype=SERIES_DTYPE)["y"]


def test_each_customer_keeps_its_reading_counts_and_interval(tmp_path: Path) -> None:
    # Given a part whose rows say how many readings each period has, and the interval
    part(tmp_path / "part-00000.parquet", [("a", 3), ("b", 2)])
    # When unpacked and read as training reads a customer
    unpacked = unpack_parts([tmp_path / "part-00000.parquet"], tmp_path / "out")
    history = read_customer(unpacked.series["a"][0])
    # Then its history carries them beside its totals
    assert history.readings is not None and history.readings.tolist() == [0, 1, 2]
    assert history.interval_s == 3600.0
    assert history.head(-1).readings.tolist() == [0, 1]  # type: ignore[union-attr]


def test_customers_across_slices_are_unpacked_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given parts read 5 rows at a time, with customers longer and shorter than a slice
    monkeypatch.setattr(parts, "ROWS_PER_READ", 5)
    customers = [("a", 12), ("b", 1), ("c", 5), ("d", 23), ("e", 2)]
    written = part(tmp_path / "part-00000.parquet", customers[:3])
    written |= part(tmp_path / "part-00001.parquet", customers[3:])
    # When unpacked
    unpacked = unpack_parts(sorted(tmp_path.glob("*.parquet")), tmp_path / "out")
    # Then every customer has all its rows, in order, and nothing is a problem
    assert unpacked.problems == []
    assert {c: rows for c, (_, rows) in unpacked.series.items()} == dict(customers)
    for customer_id, (path, _) in unpacked.series.items():
        np.testing.assert_array_equal(read_series(path), written[customer_id])


def test_a_customer_whose_rows_are_not_together_is_not_trained_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "ROWS_PER_READ", 4)
    part(tmp_path / "part-00000.parquet", [("a", 6), ("b", 3), ("a", 2), ("c", 4)])
    unpacked = unpack_parts([tmp_path / "part-00000.parquet"], tmp_path / "out")
    assert sorted(unpacked.series) == ["b", "c"]
    assert unpacked.problems == [
        (
            "a",
            "has rows in more than one place in part-00000.parquet, which keeps each "
            "customer's rows together",
        )
    ]


def test_a_part_that_breaks_half_way_trains_none_of_its_customers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a part whose last row groups are cut off, beside a good one
    monkeypatch.setattr(parts, "ROWS_PER_READ", 7)
    part(tmp_path / "part-00000.parquet", [("a", 10), ("b", 10), ("c", 10)])
    part(tmp_path / "part-00001.parquet", [("d", 3)])
    broken = tmp_path / "part-00000.parquet"
    data = broken.read_bytes()
    metadata = pq.ParquetFile(broken).metadata
    assert metadata.num_row_groups > 2
    # Row group 2's first page header overwritten: the footer still opens the file.
    start = metadata.row_group(2).column(0).data_page_offset
    broken.write_bytes(data[:start] + bytes([0xFF]) * 64 + data[start + 64 :])
    # When unpacked, then the broken part is a problem and none of its customers is left
    unpacked = unpack_parts(sorted(tmp_path.glob("*.parquet")), tmp_path / "out")
    assert list(unpacked.series) == ["d"]
    assert [name for name, _ in unpacked.problems] == ["part-00000.parquet"]
    assert "is not a readable Parquet file" in unpacked.problems[0][1]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["d.series"]


def test_the_runs_last_period_is_the_latest_the_parts_say_and_a_bad_one_is_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two parts that name the run's last period, and one whose value is not a time
    for name, said in (("a", "2025-03-01T00:00:00"), ("b", "2025-03-04T00:00:00"), ("c", "x")):
        path = tmp_path / f"part-{name}.parquet"
        part(path, [(name, 3)])
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({RUN_LAST_PERIOD_KEY: said}), path)
    # When they are unpacked
    unpacked = unpack_parts(sorted(tmp_path.glob("part-*.parquet")), tmp_path / "out")
    # Then the run's last period is the latest said, every customer is unpacked, and the
    # part that says no time is named in the log
    assert unpacked.run_last_period == np.datetime64("2025-03-04T00:00:00", "us")
    assert sorted(unpacked.series) == ["a", "b", "c"]
    assert RUN_LAST_PERIOD_KEY in caplog.text and "'x'" in caplog.text
