"""The history keeps readings (issue 25, item 2): an upload replaces only the readings it
carries, other readings of a period add to it, and conflicting values between uploads are
reported. Each test runs the processing job once per upload, each job's history output
being the next one's input, as the pipeline chains them."""

from __future__ import annotations

import csv
import shutil
from datetime import date, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from shard_helpers import parts_in, read_periods

from fleetcast_contracts.opt_ml import OPT_ML_ENV
from fleetcast_contracts.processing import ProcessingPaths, ProcessingSummary
from fleetcast_processing import __main__ as entrypoint

HEADER = "customer_id,timestamp,consumption\n"


class Chain:
    """Processing jobs run one after the other over one stored history."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.monkeypatch = monkeypatch
        self.runs = 0
        self.history: Path | None = None  # the last job's history output
        self.paths = ProcessingPaths.under(root / "none")

    def process(self, content: str, *args: str) -> ProcessingSummary:
        """Run a job on ``content`` with the history so far; the job's summary."""
        self.runs += 1
        root = self.root / f"job-{self.runs}"
        self.paths = ProcessingPaths.under(root)
        if self.history is not None:
            shutil.copytree(self.history, self.paths.history_input)
        self.paths.raw_input.mkdir(parents=True)
        (self.paths.raw_input / "upload.csv").write_text(content)
        self.monkeypatch.setenv(OPT_ML_ENV, str(root))
        assert entrypoint.main(list(args)) == 0, self.paths.message_file.read_text()
        # As the pipeline does: shards the job wrote replace the stored ones, others stay.
        merged = self.root / f"history-{self.runs}"
        if self.history is not None:
            shutil.copytree(self.history, merged)
        shutil.copytree(self.paths.history_output, merged, dirs_exist_ok=True)
        self.history = merged
        return ProcessingSummary.model_validate_json(
            (self.paths.report_output / "summary.json").read_text()
        )

    def stored_total(self, customer_id: str) -> float:
        assert self.history is not None
        table = pq.read_table(sorted(self.history.glob("*.parquet")))
        mine = table.filter(pc.equal(table.column("customer_id"), customer_id))
        return float(pc.sum(mine.column("y")).as_py())

    def stored_readings(self, customer_id: str) -> int:
        assert self.history is not None
        table = pq.read_table(sorted(self.history.glob("*.parquet")))
        return int(pc.sum(pc.equal(table.column("customer_id"), customer_id)).as_py())

    def periods(self, customer_id: str) -> list[tuple[str, float, int, float | None]]:
        return read_periods(parts_in(self.paths.train_output))[customer_id]

    def changed(self) -> list[dict[str, str]]:
        with (self.paths.report_output / "changed.csv").open(newline="") as report:
            return list(csv.DictReader(report))

    @property
    def message(self) -> str:
        return self.paths.message_file.read_text()


@pytest.fixture
def chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Chain:
    return Chain(tmp_path, monkeypatch)


def _local_day(day: date, hours: range = range(24), value: float = 1.0) -> str:
    """A meter's hourly readings of one local day in UTC+1, written with their offset."""
    return HEADER + "".join(f"m,{day}T{hour:02d}:00:00+01:00,{value}\n" for hour in hours)


def test_four_local_days_in_four_files_keep_every_reading(chain: Chain) -> None:
    # Given four files, each one local day (UTC+1) of 24 hourly readings of 1.0: each
    # carries the last hour of the UTC day before it
    first = date(2024, 3, 4)
    for offset in range(4):
        summary = chain.process(_local_day(first + timedelta(days=offset)))
        # Then every upload's readings are new: none replaces another
        assert (summary.readings_new, summary.readings_replaced) == (24, 0)

    # Then the stored history holds all 96 readings (it kept 27.0 when uploads replaced days)
    assert chain.stored_readings("m") == 96
    assert chain.stored_total("m") == 96.0
    # And the last run trains on UTC days, each with its readings counted: the first and
    # the last incomplete (1 and 23 readings of hourly data), the others whole
    assert chain.periods("m") == [
        ("2024-03-03", 1.0, 1, 3600.0),
        ("2024-03-04", 24.0, 24, 3600.0),
        ("2024-03-05", 24.0, 24, 3600.0),
        ("2024-03-06", 24.0, 24, 3600.0),
        ("2024-03-07", 23.0, 23, 3600.0),
    ]
    assert summary.readings_stored == 96


def test_a_day_in_two_halves_adds_up(chain: Chain) -> None:
    # Given hours 0-11 of a UTC day, then hours 12-23 in a second file
    day = "2024-03-04"
    morning = HEADER + "".join(f"m,{day}T{hour:02d}:00:00Z,1\n" for hour in range(12))
    evening = HEADER + "".join(f"m,{day}T{hour:02d}:00:00Z,1\n" for hour in range(12, 24))
    chain.process(morning)
    assert chain.periods("m") == [(day, 12.0, 12, 3600.0)]

    # When the second half is processed
    summary = chain.process(evening)

    # Then the day is whole: 24.0 of 24 readings (it was 12.0)
    assert chain.periods("m") == [(day, 24.0, 24, 3600.0)]
    assert chain.stored_total("m") == 24.0
    assert (summary.readings_new, summary.readings_replaced, summary.readings_stored) == (12, 0, 24)


def test_the_same_readings_again_change_nothing(chain: Chain) -> None:
    # Given a day of readings processed once
    upload = _local_day(date(2024, 3, 4), value=1.5)
    chain.process(upload)
    before = chain.periods("m")

    # When the same file is processed again
    summary = chain.process(upload)

    # Then every reading replaced itself with the same value: nothing changed
    assert (summary.readings_new, summary.readings_replaced) == (0, 24)
    assert summary.readings_changed == 0
    assert summary.rows_accepted == summary.readings_new + summary.readings_replaced
    assert chain.periods("m") == before
    assert chain.stored_total("m") == 36.0
    assert chain.changed() == []
    assert "another value" not in chain.message


def test_a_changed_value_is_replaced_and_reported(chain: Chain) -> None:
    # Given a day of readings, then a file with two of them at other values, and one new
    chain.process(HEADER + "".join(f"m,2024-03-04T{h:02d}:00:00Z,1\n" for h in range(24)))
    correction = (
        HEADER
        + "m,2024-03-04T05:00:00Z,1\n"  # line 2: the same value again
        + "m,2024-03-04T06:00:00+00:00,4.5\n"  # line 3: changed
        + "m,2024-03-04T08:30:00+01:00,2\n"  # line 4: 07:30 UTC, a new reading
        + "m,2024-03-04T09:00:00.000400Z,0\n"  # line 5: the same instant to the millisecond
    )

    # When the correction is processed
    summary = chain.process(correction)

    # Then the upload's values are kept and the new reading added to the day
    assert (summary.readings_new, summary.readings_replaced, summary.readings_changed) == (
        1,
        3,
        2,
    )
    assert chain.periods("m") == [("2024-03-04", 24 - 2 + 4.5 + 2, 25, 3600.0)]
    # And each changed reading is listed with the value it replaced, in line order
    assert chain.changed() == [
        {
            "line": "3",
            "customer_id": "m",
            "timestamp": "2024-03-04T06:00:00.000000Z",
            "stored": "1",
            "uploaded": "4.5",
        },
        {
            "line": "5",
            "customer_id": "m",
            "timestamp": "2024-03-04T09:00:00.000400Z",
            "stored": "1",
            "uploaded": "0",
        },
    ]
    # And the job's message says so
    assert "2 of them with another value than the stored one" in chain.message
    assert "changed.csv" in chain.message


def test_a_reading_interval_ignores_missing_readings(chain: Chain) -> None:
    # Given 15-minute readings with a few hours missing, and a meter read once
    times = [
        f"2024-03-04T{q // 4:02d}:{q % 4 * 15:02d}:00Z" for q in range(96) if q // 4 not in (3, 4)
    ]
    chain.process(HEADER + "".join(f"q,{t},1\n" for t in times) + "once,2024-03-04,5\n")

    # Then the interval is the meter's 900 s, the day incomplete (88 of 96 readings)
    assert chain.periods("q") == [("2024-03-04", 88.0, 88, 900.0)]
    # And a customer with one reading has no interval
    assert chain.periods("once") == [("2024-03-04", 5.0, 1, None)]
