"""The processing container end to end: ``main()`` in-process against a temporary /opt/ml."""

from __future__ import annotations

import csv
import errno
import gzip
import io
import json
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from shard_helpers import parts_in, read_rows, write_history

from fleetcast_common.jobs import Upload, processing_job_request
from fleetcast_common.settings import ProcessingSettings
from fleetcast_contracts.opt_ml import OPT_ML_ENV
from fleetcast_contracts.processing import (
    MAX_PERIOD_TOTAL_ENV,
    MAX_UPLOAD_BYTES_ENV,
    MESSAGE_LIMIT,
    REJECTED_COLUMNS,
    REJECTED_ROWS_PER_REASON,
    REJECTED_VALUE_LIMIT,
    JobLimits,
    ProcessingPaths,
    ProcessingSummary,
    source_key_environment,
)
from fleetcast_contracts.shards import history_shard_name, history_shard_of
from fleetcast_processing import __main__ as entrypoint
from fleetcast_processing import job as processing_job

DATA = Path(__file__).parent.parent / "data" / "processing"
HEADER = "customer_id,timestamp,consumption\n"


class Job:
    """One processing job's /opt/ml under tmp_path, and what it left behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = ProcessingPaths.under(root)

    def upload(self, content: bytes | str, name: str = "readings.csv") -> Path:
        self.paths.raw_input.mkdir(parents=True, exist_ok=True)
        path = self.paths.raw_input / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def store_history(self, customer_id: str, readings: list[tuple[str, float]]) -> None:
        """Readings (``(ts, y)``) in the customer's stored history shard."""
        write_history(self.paths.history_input, customer_id, readings)

    def run(self, *args: str) -> int:
        return entrypoint.main(list(args))

    @property
    def message(self) -> str:
        return self.paths.message_file.read_text()

    @property
    def summary(self) -> ProcessingSummary:
        return ProcessingSummary.model_validate_json(
            (self.paths.report_output / "summary.json").read_text()
        )

    def rejected(self) -> list[dict[str, str]]:
        with (self.paths.report_output / "rejected.csv").open(newline="") as report:
            return list(csv.DictReader(report))

    def train(self, customer_id: str) -> list[tuple[str, float]]:
        return read_rows(parts_in(self.paths.train_output))[customer_id]

    def train_customers(self) -> set[str]:
        return set(read_rows(parts_in(self.paths.train_output)))

    def history(self, customer_id: str) -> list[tuple[str, float]] | None:
        return read_rows(parts_in(self.paths.history_output)).get(customer_id)


@pytest.fixture
def job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Job:
    root = tmp_path / "opt_ml"
    monkeypatch.setenv(OPT_ML_ENV, str(root))
    return Job(root)


def test_clean_file_gives_one_file_per_customer_with_daily_totals(job: Job) -> None:
    # Given two customers, one reading per day, ids with leading zeros
    job.upload(HEADER + "007,2024-01-01,1.5\n007,2024-01-02,2\n8,2024-01-01,10\n")

    # When the job runs
    exit_code = job.run()

    # Then it succeeds with each customer's rows in the training input and in its history
    # shard, ids kept as text
    assert exit_code == 0
    assert job.train_customers() == {"007", "8"}
    assert job.train("007") == [("2024-01-01", 1.5), ("2024-01-02", 2.0)]
    assert job.train("8") == [("2024-01-01", 10.0)]
    assert job.history("007") == job.train("007")
    summary = job.summary
    assert (summary.rows_read, summary.rows_accepted, summary.rows_rejected) == (3, 3, 0)
    assert summary.customers_list == ["007", "8"]
    assert (summary.customers, summary.new_customers, summary.days_written) == (2, 2, 3)
    assert summary.frequency == "D"
    assert summary.source_name == "readings.csv"
    assert job.rejected() == []
    assert (job.paths.report_output / "rejected.csv").read_text() == ",".join(
        REJECTED_COLUMNS
    ) + "\n"
    assert job.message.startswith("Processed readings.csv: 3 rows read, 3 accepted, 0 rejected")


def test_irregular_readings_are_summed_per_utc_day(job: Job) -> None:
    # Given several readings a day at random times, some with offsets that cross midnight UTC
    job.upload(
        HEADER
        + "c1,2024-03-01T00:00:01Z,1\n"
        + "c1,2024-03-01T13:17:45Z,2\n"
        + "c1,2024-03-01T23:59:59.999Z,4\n"
        + "c1,2024-03-02T01:30:00+02:00,8\n"  # 2024-03-01T23:30Z
        + "c1,2024-03-01T22:00:00-03:00,16\n"  # 2024-03-02T01:00Z
        + "c1,2024-03-03,32\n"
    )

    # When the job runs with the default daily frequency
    assert job.run() == 0

    # Then each UTC day holds the sum of its readings, sorted by day
    assert job.train("c1") == [("2024-03-01", 15.0), ("2024-03-02", 16.0), ("2024-03-03", 32.0)]
    assert job.summary.source_name == "readings.csv"


def test_hourly_frequency_sums_per_utc_hour(job: Job) -> None:
    # Given readings within two hours
    job.upload(
        HEADER
        + "c1,2024-03-01T05:10:00Z,1\n"
        + "c1,2024-03-01T05:50:00Z,2\n"
        + "c1,2024-03-01T08:20:00+02:00,4\n"
    )

    # When the job runs hourly
    assert job.run("--frequency", "h") == 0

    # Then ds names the hour and each hour holds its sum
    assert job.train("c1") == [("2024-03-01T05:00:00", 3.0), ("2024-03-01T06:00:00", 4.0)]
    assert job.summary.frequency == "H"


EXPECTED_REJECTIONS = {
    4: "invalid_customer_id",
    5: "invalid_customer_id",
    6: "invalid_timestamp",
    7: "out_of_range_timestamp",
    8: "out_of_range_timestamp",
    9: "invalid_consumption",
    10: "invalid_consumption",
    11: "invalid_consumption",
    12: "invalid_consumption",
    13: "negative_consumption",
    14: "implausible_consumption",
    15: "duplicate_row",
    16: "duplicate_row",
    18: "malformed_row",
    19: "invalid_customer_id",
    20: "invalid_customer_id",
}


def test_mixed_file_keeps_good_rows_and_reports_every_bad_row(job: Job) -> None:
    # Given tests/data/processing/mixed.csv: good rows among one of every kind of bad row
    job.upload((DATA / "mixed.csv").read_bytes())

    # When the job runs
    assert job.run() == 0

    # Then the good rows are totalled per customer and day
    assert job.train_customers() == {"007", "42"}
    assert job.train("007") == [("2024-01-01", 15.5)]
    assert job.train("42") == [("2024-01-02", 7.0), ("2024-01-03", 2.25)]
    # And every bad row is in rejected.csv, in line order, with its line and reason
    rejected = job.rejected()
    assert {int(row["line"]): row["reason"] for row in rejected} == EXPECTED_REJECTIONS
    assert [int(row["line"]) for row in rejected] == sorted(EXPECTED_REJECTIONS)
    by_line = {int(row["line"]): row for row in rejected}
    # And raw values are reported as they appeared
    assert by_line[4]["customer_id"] == "../../etc/passwd"
    assert by_line[19]["customer_id"] == "ÄÖ"
    assert by_line[9]["consumption"] == ""
    assert by_line[6]["timestamp"] == "not-a-date"
    assert by_line[18]["timestamp"] == "2024-01-02T06:00:00"
    assert "line 2" in by_line[15]["message"] and "line 2" in by_line[16]["message"]
    assert "expected 3 fields" in by_line[18]["message"]
    summary = job.summary
    assert summary.rows_read == 20  # 21 data lines, one of them blank
    assert summary.rows_accepted == 4
    assert summary.rows_rejected == len(EXPECTED_REJECTIONS)
    assert summary.rejected_by_reason == {
        "duplicate_row": 2,
        "implausible_consumption": 1,
        "invalid_consumption": 4,
        "invalid_customer_id": 4,
        "invalid_timestamp": 1,
        "malformed_row": 1,
        "negative_consumption": 1,
        "out_of_range_timestamp": 2,
    }


@pytest.mark.parametrize("compressed", [False, True], ids=["spill plain", "spill compressed"])
def test_line_numbers_and_duplicates_hold_across_blocks(
    job: Job, compressed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a file read in many small blocks, with bad rows and a repeat far from its original
    # (data row i is on line i + 2; rows[1] is c1's reading of 2024-01-01, on line 3), and a
    # volume that holds its readings set aside uncompressed, or one that does not
    monkeypatch.setattr(processing_job, "compress_for", lambda *_: compressed)
    rows = [f"c{index % 7},2024-01-{1 + index // 7:02d}T00:00:00Z,{index}" for index in range(140)]
    rows[100] = "c1,2024-01-01T00:00:00Z,5"
    rows[57] = "bad id,2024-01-01,1"
    rows[120] = 'c3,"2024-01-01T00:00:00Z",-1'
    job.upload(HEADER + "\n".join(rows) + "\n")

    # When the job reads it 1 KiB at a time (about 40 rows a block)
    assert job.run("--block-size", "1024") == 0

    # Then each rejected row carries its own line, and the repeat names the line kept
    assert {(int(row["line"]), row["reason"]) for row in job.rejected()} == {
        (102, "duplicate_row"),
        (59, "invalid_customer_id"),
        (122, "negative_consumption"),
    }
    repeat = job.rejected()[1]
    assert "line 3" in repeat["message"]
    # And the repeat's text is its own, as written (set aside in a block read after line 3's)
    assert (repeat["customer_id"], repeat["timestamp"], repeat["consumption"]) == (
        "c1",
        "2024-01-01T00:00:00Z",
        "5",
    )
    assert job.summary.rows_accepted == 137


def test_quoted_values_with_newlines_keep_line_numbers_right(job: Job) -> None:
    # Given a note column whose quoted values span lines, then a bad row
    job.upload(
        "customer_id,note,timestamp,consumption\n"
        'c1,"first\nsecond\nthird",2024-01-01,1\n'  # lines 2-4
        'c1,"a, ""quoted"" note",2024-01-02,2\n'  # line 5
        "c1,,2024-01-03,-1\n"  # line 6
    )

    # When the job runs
    assert job.run() == 0

    # Then the bad row is reported on the line it starts on
    assert [(row["line"], row["reason"]) for row in job.rejected()] == [
        ("6", "negative_consumption")
    ]
    assert job.train("c1") == [("2024-01-01", 1.0), ("2024-01-02", 2.0)]


def test_history_merge_replaces_the_readings_it_names_and_leaves_other_customers_alone(
    job: Job,
) -> None:
    # Given stored readings for customers 7 and 99, and an upload for 7 (one reading of a
    # stored instant, with another value) and 8
    job.store_history("7", [("2024-01-01", 1.0), ("2024-01-02", 2.0), ("2024-01-03", 3.0)])
    job.store_history("99", [("2024-01-01", 5.0)])
    job.upload(HEADER + "7,2024-01-04,40\n7,2024-01-03,30\n8,2024-01-01,1\n")

    # When the job runs
    assert job.run() == 0

    # Then 7's stored reading of that instant takes the new value, its others stay, sorted
    assert job.train("7") == [
        ("2024-01-01", 1.0),
        ("2024-01-02", 2.0),
        ("2024-01-03", 30.0),
        ("2024-01-04", 40.0),
    ]
    assert job.history("7") == job.train("7")
    # And 99, not in the upload, is in its shard as it was, and in no training part
    assert job.train_customers() == {"7", "8"}
    assert job.history("99") in (None, [("2024-01-01", 5.0)])
    summary = job.summary
    assert (summary.customers, summary.new_customers) == (2, 1)
    assert (summary.days_uploaded, summary.days_written) == (3, 5)
    assert (summary.readings_new, summary.readings_replaced, summary.readings_changed) == (2, 1, 1)
    assert summary.readings_stored == 5


def test_an_empty_stored_shard_leaves_its_customers_new(job: Job) -> None:
    # Given a stored shard without rows
    write_history(job.paths.history_input, "a", [])
    job.upload(HEADER + "a,2024-01-01,1\nb,2024-01-01,2\n")

    # When the job runs
    assert job.run() == 0

    # Then both are new customers
    assert job.summary.new_customers == 2


WHOLE_FILE_FAILURES: list[tuple[str, bytes, list[str]]] = [
    ("empty", b"", ["is empty"]),
    ("blank lines only", b"\n\r\n  \n", ["is empty"]),
    ("header only", HEADER.encode(), ["header but no data rows"]),
    ("header and blank lines", (HEADER + "\n\n").encode(), ["no data rows"]),
    (
        "no good rows",
        (HEADER + "x y,2024-01-01,1\nok,nope,1\n").encode(),
        ["none of its 2 data rows is usable", "invalid_customer_id 1", "invalid_timestamp 1"],
    ),
    (
        "missing columns",
        b"Customer_ID,time,value\n1,2024-01-01,3\n",
        ["missing required column(s) timestamp, consumption", "'customer_id', 'time', 'value'"],
    ),
    (
        "duplicate columns",
        b"customer_id,timestamp,consumption, TimeStamp\n1,2024-01-01,3,x\n",
        ["duplicate column names", "'timestamp' (columns 2 and 4)"],
    ),
    ("not utf-8", (HEADER + "1,2024-01-01,3\n").encode() + b"caf\xe9,2024-01-01,1\n", ["line 3"]),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ["not UTF-8"]),
    ("nul bytes", (HEADER + "1,2024-01-01,3\n").encode() + b"\x00\x01\x02\n", ["NUL bytes"]),
    ("utf-16", HEADER.encode("utf-16"), ["UTF-16"]),
    ("json", b'{"readings": [1, 2, 3]}\n', ["missing required column(s)"]),
]


@pytest.mark.parametrize(
    ("content", "expected"),
    [pytest.param(content, expected, id=name) for name, content, expected in WHOLE_FILE_FAILURES],
)
def test_unusable_files_fail_with_a_message(job: Job, content: bytes, expected: list[str]) -> None:
    # Given an upload that cannot be used as a whole
    job.upload(content)

    # When the job runs
    exit_code = job.run()

    # Then it exits 1 with a one-paragraph message naming the problem, and writes no data
    assert exit_code == 1
    message = job.message
    assert message.startswith("Processing failed for readings.csv: ")
    for fragment in expected:
        assert fragment in message
    assert "\n" not in message and len(message.encode()) <= MESSAGE_LIMIT
    assert not job.paths.train_output.exists() or job.train_customers() == set()


def test_not_utf8_message_says_so(job: Job) -> None:
    # Given a Latin-1 file
    job.upload((HEADER + "café,2024-01-01,1\n").encode("latin-1"))

    # When the job runs
    # Then the message says the file is not UTF-8 and where
    assert job.run() == 1
    assert "not UTF-8" in job.message and "line 2" in job.message


def test_excel_workbook_is_named_as_such(job: Job) -> None:
    # Given an .xlsx (a zip archive) uploaded instead of CSV
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as workbook:
        workbook.writestr("xl/workbook.xml", "<workbook/>")
    job.upload(buffer.getvalue(), name="readings.xlsx")

    # When the job runs
    # Then the message says what the file is
    assert job.run() == 1
    assert "zip archive" in job.message


@pytest.mark.parametrize("files", [0, 2])
def test_raw_input_must_hold_exactly_one_file(job: Job, files: int) -> None:
    # Given no file or two files in the raw input
    job.paths.raw_input.mkdir(parents=True)
    for index in range(files):
        job.upload(HEADER + "a,2024-01-01,1\n", name=f"part-{index}.csv")

    # When the job runs
    # Then it fails saying how many files it found
    assert job.run() == 1
    assert f"exactly one file, found {files or 'none'}" in job.message


def test_the_upload_file_is_picked_when_the_prefix_brought_several(job: Job) -> None:
    # Given the raw input prefix 'a.csv' also matched 'a.csv.gz'
    job.upload(HEADER + "a,2024-01-01,1\n", name="a.csv")
    job.upload(gzip.compress((HEADER + "b,2024-01-01,1\n").encode()), name="a.csv.gz")

    # When the job runs for a.csv
    assert job.run("--upload-file", "a.csv") == 0

    # Then only a.csv was read
    assert job.train_customers() == {"a"}


def test_the_report_names_the_upload_by_its_s3_key_not_its_staged_copy(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the run's copy of an upload whose key is not a plain file name
    key = "incoming/Zählerstände März/daily export.csv"
    job.upload(HEADER + "a,2024-01-01,1\n", name="upload.csv")
    for name, value in source_key_environment(key).items():
        monkeypatch.setenv(name, value)
    # When the job reads the copy
    assert job.run("--upload-file", "upload.csv") == 0
    # Then its report and message name the upload as it was put, not 'upload.csv'
    assert job.summary.source_name == "daily export.csv"
    assert job.message.startswith("Processed daily export.csv:")


def test_a_failed_job_names_the_upload_by_its_s3_key(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    job.upload("not,a,header\n", name="upload.csv")
    for name, value in source_key_environment("incoming/täglich.csv").items():
        monkeypatch.setenv(name, value)
    assert job.run("--upload-file", "upload.csv") == 1
    assert job.message.startswith("Processing failed for täglich.csv:")


def test_gzip_is_detected_by_content_not_name(job: Job) -> None:
    # Given a gzip upload named .csv
    job.upload(gzip.compress((HEADER + "a,2024-01-01,1\na,2024-01-01T12:00:00,2\n").encode()))

    # When the job runs
    # Then it is read as gzip
    assert job.run() == 0
    assert job.train("a") == [("2024-01-01", 3.0)]


def test_plain_csv_named_gz_is_read_as_plain(job: Job) -> None:
    # Given a plain CSV named .csv.gz
    job.upload(HEADER + "a,2024-01-01,1\n", name="readings.csv.gz")

    # When the job runs
    # Then it is read as plain text
    assert job.run() == 0
    assert job.train("a") == [("2024-01-01", 1.0)]


def test_truncated_gzip_fails_and_says_truncated(job: Job) -> None:
    # Given a gzip file cut short
    rows = "".join(
        f"c{index % 10},2024-01-{1 + index % 28:02d}T{index % 24:02d}:00:00Z,{index}\n"
        for index in range(5000)
    )
    complete = gzip.compress((HEADER + rows).encode())
    job.upload(complete[: len(complete) // 2])

    # When the job runs
    # Then it fails and says the gzip file is truncated
    assert job.run() == 1
    assert "gzip file is truncated" in job.message


def test_corrupt_gzip_fails_with_a_message(job: Job) -> None:
    # Given gzip magic bytes followed by garbage
    job.upload(b"\x1f\x8b\x08\x00" + b"garbage" * 20)

    # When the job runs
    # Then it fails with a message, not a traceback
    assert job.run() == 1
    assert "gzip" in job.message


def test_bom_crlf_semicolons_quotes_reordered_and_extra_columns(job: Job) -> None:
    # Given a spreadsheet-style export: BOM, CRLF, ';', quoted fields, decimal commas,
    # header names in another order, case and padding, and an extra column
    content = (
        '\ufeff"Consumption" ; Timestamp ;note;"CUSTOMER_ID"\r\n'
        '"12,5";2024-01-01T10:00:00Z;"a;b";"007"\r\n'
        '3;2024-01-01;"say ""hi""";007\r\n'
        "1.25;2024-01-02;;007\r\n"
        "-1;2024-01-02;;007\r\n"
    )
    job.upload(content.encode("utf-8"))

    # When the job runs
    assert job.run() == 0

    # Then every value lands in its column
    assert job.train("007") == [("2024-01-01", 15.5), ("2024-01-02", 1.25)]
    assert [(row["line"], row["reason"], row["consumption"]) for row in job.rejected()] == [
        ("5", "negative_consumption", "-1")
    ]


def test_old_mac_line_endings_and_blank_lines_before_the_header(job: Job) -> None:
    # Given a file with bare CR line endings whose header comes after a blank line
    job.upload("\r" + HEADER.replace("\n", "\r") + "a,2024-01-01,1\rb,later,1\ra,2024-01-02,2")

    # When the job runs
    assert job.run() == 0

    # Then rows are split on CR and lines are counted from the top of the file
    assert job.train("a") == [("2024-01-01", 1.0), ("2024-01-02", 2.0)]
    assert [(row["line"], row["reason"]) for row in job.rejected()] == [("4", "invalid_timestamp")]


def test_whitespace_around_values_is_ignored_but_not_inside_ids(job: Job) -> None:
    # Given padded timestamps and numbers, and a padded customer id
    job.upload(HEADER + "a, 2024-01-01 , 2 \n a,2024-01-01,1\n")

    # When the job runs
    assert job.run() == 0

    # Then padded values parse, but the padded id is rejected rather than altered
    assert job.train("a") == [("2024-01-01", 2.0)]
    assert [(row["line"], row["reason"]) for row in job.rejected()] == [
        ("3", "invalid_customer_id")
    ]


TRAVERSAL_IDS = ["../escape", "..", ".", "a/b", "/abs", "..\\win", "x" * 65, " a", "é", "a\nb"]


def test_path_traversal_ids_never_create_files_outside_the_outputs(
    job: Job, tmp_path: Path
) -> None:
    # Given ids that would escape the output folder if used as file names
    rows = "".join(f'"{customer_id}",2024-01-01,1\n' for customer_id in TRAVERSAL_IDS)
    job.upload(HEADER + rows + "ok,2024-01-01,1\n")
    before = set(tmp_path.rglob("*"))

    # When the job runs
    assert job.run() == 0

    # Then every one of them is rejected
    rejected = job.rejected()
    assert [row["customer_id"] for row in rejected] == TRAVERSAL_IDS
    assert {row["reason"] for row in rejected} == {"invalid_customer_id"}
    # And the only files created are the expected ones, all inside the job's outputs
    created = {
        path.relative_to(tmp_path).as_posix()
        for path in set(tmp_path.rglob("*")) - before
        if path.is_file()
    }
    assert created == {
        "opt_ml/processing/output/train/part-00000.parquet",
        f"opt_ml/processing/output/history/{history_shard_name(history_shard_of('ok'))}",
        "opt_ml/processing/output/report/rejected.csv",
        "opt_ml/processing/output/report/changed.csv",
        "opt_ml/processing/output/report/summary.json",
        "opt_ml/processing/output/calendars/calendars.csv",
        "opt_ml/processing/output/fleet/teachers.parquet",
        "opt_ml/output/message",
    }


def test_unexpected_errors_become_a_message_not_a_traceback(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job whose processing hits a bug
    job.upload(HEADER + "a,2024-01-01,1\n")

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(entrypoint, "run", broken)

    # When the job runs
    # Then it exits 1 and the message names the error
    assert job.run() == 1
    assert "internal error (RuntimeError: boom)" in job.message


def test_a_full_volume_says_so_and_what_to_change(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a job whose volume fills up while it sets the readings aside
    job.upload(HEADER + "a,2024-01-01,1\n")

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(processing_job.ShardSpill, "add", full)

    # When the job runs
    # Then it exits 1, and the message says the volume is full and what setting to raise
    assert job.run() == 1
    assert "the job's volume is full" in job.message
    assert "ProcessingVolumeSizeGB" in job.message
    assert "internal error" not in job.message


def test_bad_arguments_write_a_message(job: Job) -> None:
    # Given an unknown frequency
    job.upload(HEADER + "a,2024-01-01,1\n")

    # When the job runs
    # Then it exits 1 with a message instead of argparse's usage exit
    assert job.run("--frequency", "W") == 1
    assert "bad arguments" in job.message


def test_long_failure_messages_are_cut_to_the_limit(job: Job) -> None:
    # Given a header with very many long, unexpected column names
    job.upload(",".join(f"column_{index}_{'x' * 60}" for index in range(50)) + "\n1\n")

    # When the job runs
    # Then the message still fits SageMaker's 1 KB
    assert job.run() == 1
    assert len(job.message.encode()) <= MESSAGE_LIMIT
    assert "missing required column(s) customer_id, timestamp, consumption" in job.message


def test_generated_upload_round_trips_through_processing(job: Job) -> None:
    # Given a generated upload with irregular readings (4 a day) and gaps
    from fleetcast.datagen import generate_readings, write_readings

    readings = generate_readings(20, days=30, readings_per_day=4, seed=3)
    write_readings(
        job.paths.raw_input / "generated.csv.gz", 20, days=30, readings_per_day=4, seed=3
    )

    # When the job runs
    assert job.run() == 0

    # Then each customer's daily totals equal the generated readings summed per day
    readings["ds"] = readings["timestamp"].str.slice(0, 10)
    expected = readings.groupby(["customer_id", "ds"])["consumption"].sum()
    for customer_id in ("0", "7", "19"):
        for ds, y in job.train(customer_id):
            assert y == pytest.approx(expected[(customer_id, ds)], abs=1e-9)
    assert job.summary.days_written == len(expected)
    assert job.summary.rows_accepted == len(readings)


def _read_json(path: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(path.read_text())
    return loaded


def test_summary_json_has_the_documented_keys(job: Job) -> None:
    # Given any successful job
    job.upload(HEADER + "a,2024-01-01,1\n")

    # When it runs
    assert job.run() == 0

    # Then summary.json carries exactly these keys
    assert set(_read_json(job.paths.report_output / "summary.json")) == {
        "source_name",
        "frequency",
        "lines",
        "header_line",
        "blank_lines",
        "continued_lines",
        "rows_read",
        "rows_accepted",
        "rows_rejected",
        "rejected_by_reason",
        "rejected_list_limit",
        "customers",
        "new_customers",
        "days_written",
        "days_uploaded",
        "readings_new",
        "readings_replaced",
        "readings_changed",
        "readings_stored",
        "periods_by_use",
        "unused_periods",
        "customers_by_interval_s",
        "changed_list_limit",
        "history_shards_written",
        "train_parts",
        "customers_list",
        "metadata",
    }


def test_rejected_values_are_cut_and_never_run_as_spreadsheet_formulas(job: Job) -> None:
    # Given rejected rows whose values a spreadsheet would run, and one very long value
    formulas = ["=cmd|' /C calc'!A0", "+1+1", "-1+1", "@SUM(A1)", "\t=1", "\r=1"]
    rows = "".join(f'"{value}",2024-01-01,1\n' for value in formulas)
    job.upload(HEADER + "a,2024-01-01,1\n" + rows + "b,2024-01-01," + "9" * 10_000 + "x\n")

    # When the job runs
    assert job.run() == 0

    # Then every such cell starts with a quote, numbers such as -2 excepted, and no value
    # is longer than the limit
    rejected = job.rejected()
    assert [row["customer_id"] for row in rejected[:-1]] == [f"'{value}" for value in formulas]
    assert all(len(value) <= REJECTED_VALUE_LIMIT for row in rejected for value in row.values())
    assert rejected[-1]["consumption"].endswith("...")


def test_rejected_report_lists_a_bounded_sample_and_counts_the_rest(job: Job) -> None:
    # Given a small gzip of many thousands of bad rows (issue 13: 78 KB made 1.18 GB)
    junk = "!,x,y\n" * 50_000 + "a,2024-01-01,1\n" + "=1,2024-01-01," + "9" * 200 + "\n" * 1
    job.upload(gzip.compress((HEADER + junk).encode()), "junk.csv.gz")

    # When the job runs
    assert job.run() == 0

    # Then the report lists the first rows per reason and says how many more there were
    rejected = job.rejected()
    assert len(rejected) == REJECTED_ROWS_PER_REASON + 1
    assert rejected[-1]["line"] == ""
    assert rejected[-1]["message"].startswith(
        f"{50_001 - REJECTED_ROWS_PER_REASON:,} more rows rejected for this reason"
    )
    assert f"first {REJECTED_ROWS_PER_REASON:,} per reason" in rejected[-1]["message"]
    assert job.summary.rejected_by_reason == {"invalid_customer_id": 50_001}
    assert (job.paths.report_output / "rejected.csv").stat().st_size < 300_000


def test_repeats_in_every_shard_list_the_first_lines_of_the_file(job: Job) -> None:
    # Given 600 customers' readings (spread over every history shard), then the whole file
    # again, with one repeat of a new kind (same instant, other spelling) near the top
    rows = [f"m{index:04d},2024-01-0{1 + day},{index}" for index in range(600) for day in (0, 1)]
    rows.insert(1, "m0000,2024-01-01T00:00:00+00:00,7")  # line 3: repeats line 2
    uploaded = rows + rows[:1] + rows[2:]  # data row i is on line i + 2
    job.upload(HEADER + "\n".join(uploaded) + "\n")

    # When the job runs
    assert job.run() == 0

    # Then every repeat is counted, and the report lists the first lines of the file,
    # in line order, each naming the line that was kept
    repeats = len(rows)  # line 3, and the second copy of every other row
    assert job.summary.rejected_by_reason == {"duplicate_row": repeats}
    assert job.summary.rows_accepted == 1200
    rejected = job.rejected()
    listed = [row for row in rejected if row["line"]]
    lines = [int(row["line"]) for row in listed]
    assert lines[0] == 3 and "as line 2," in listed[0]["message"]
    # And each listed repeat's values are its own line's, as written
    assert [f"{row['customer_id']},{row['timestamp']},{row['consumption']}" for row in listed] == [
        uploaded[line - 2] for line in lines
    ]
    assert lines == sorted(lines) and len(lines) == REJECTED_ROWS_PER_REASON
    assert lines[1:] == list(range(len(rows) + 2, len(rows) + 2 + len(lines) - 1))
    assert rejected[-1]["message"].startswith(
        f"{repeats - REJECTED_ROWS_PER_REASON:,} more rows rejected"
    )
    # And each customer keeps the first of its readings
    assert job.train("m0000") == [("2024-01-01", 0.0), ("2024-01-02", 0.0)]
    assert job.train("m0599") == [("2024-01-01", 599.0), ("2024-01-02", 599.0)]


def test_an_upload_over_the_size_limit_fails_saying_so(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a limit of 1000 bytes and a gzip that decompresses to more
    monkeypatch.setenv(MAX_UPLOAD_BYTES_ENV, "1000")
    job.upload(gzip.compress((HEADER + "a,2024-01-01,1\n" * 100).encode()), "big.csv.gz")

    # When the job runs
    exit_code = job.run()

    # Then it fails naming the limit and the setting
    assert exit_code == 1
    assert "larger than the processing limit of 1,000 bytes when decompressed" in job.message
    assert MAX_UPLOAD_BYTES_ENV in job.message


def test_a_bad_limit_setting_fails_the_job_naming_it(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_PERIOD_TOTAL_ENV, "-5")
    job.upload(HEADER + "a,2024-01-01,1\n")

    assert job.run() == 1
    assert job.message.startswith("Processing did not start: bad settings:")
    assert MAX_PERIOD_TOTAL_ENV in job.message


def test_a_period_total_above_the_configured_limit_is_rejected_with_its_rows(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plausible-total limit of 10 and a day adding up to 12
    monkeypatch.setenv(MAX_PERIOD_TOTAL_ENV, "10")
    job.upload(HEADER + "a,2024-01-01T01:00:00Z,6\na,2024-01-01T02:00:00Z,6\nb,2024-01-01,3\n")

    # When the job runs
    assert job.run() == 0

    # Then that day is not used, its two rows are rejected, and the report names the day
    assert job.train_customers() == {"b"}
    summary = job.summary
    assert (summary.rows_accepted, summary.rows_rejected) == (1, 2)
    assert summary.rejected_by_reason == {"implausible_period_total": 2}
    [row] = job.rejected()
    assert (row["customer_id"], row["timestamp"], row["reason"]) == (
        "a",
        "2024-01-01",
        "implausible_period_total",
    )
    assert "the 2 readings" in row["message"] and MAX_PERIOD_TOTAL_ENV in row["message"]


def test_a_day_split_over_two_uploads_is_checked_whole_with_the_stored_readings(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plausible-total limit of 10, a's morning of 2024-01-01 stored (6) and b's day
    # (4), and an upload with a's afternoon (6: plausible alone), b's evening (5) and a's
    # next day
    monkeypatch.setenv(MAX_PERIOD_TOTAL_ENV, "10")
    job.store_history("a", [("2024-01-01T01:00:00", 6.0)])
    job.store_history("b", [("2024-01-01T01:00:00", 4.0)])
    job.upload(
        HEADER
        + "a,2024-01-01T13:00:00Z,6\n"
        + "b,2024-01-01T20:00:00Z,5\n"
        + "a,2024-01-02T01:00:00Z,3\n"
    )

    # When the job runs
    assert job.run() == 0

    # Then a's day, 12 with the stored morning, keeps its stored reading only: the upload's
    # reading of it is rejected and reported with the day's total; b's day (9) is merged
    assert job.history("a") == [("2024-01-01T01:00:00", 6.0), ("2024-01-02T01:00:00", 3.0)]
    assert job.train("a") == [("2024-01-01", 6.0), ("2024-01-02", 3.0)]
    assert job.train("b") == [("2024-01-01", 9.0)]
    summary = job.summary
    assert (summary.rows_read, summary.rows_accepted, summary.rows_rejected) == (3, 2, 1)
    assert summary.rejected_by_reason == {"implausible_period_total": 1}
    assert (summary.readings_new, summary.readings_stored) == (2, 4)
    [row] = job.rejected()
    assert (row["customer_id"], row["timestamp"], row["consumption"]) == ("a", "2024-01-01", "12")
    assert "the 1 readings the history already holds" in row["message"]
    assert "the stored ones are kept" in row["message"]


def test_an_upload_correcting_a_stored_reading_is_checked_on_the_corrected_total(
    job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a stored day of 6 + 6 (stored before a limit of 10 was set), and an upload
    # correcting its second reading to 3
    monkeypatch.setenv(MAX_PERIOD_TOTAL_ENV, "10")
    job.store_history("a", [("2024-01-01T01:00:00", 6.0), ("2024-01-01T02:00:00", 6.0)])
    job.upload(HEADER + "a,2024-01-01T02:00:00Z,3\n")

    # When the job runs
    assert job.run() == 0

    # Then the corrected day (9) is plausible: the correction is taken
    assert job.train("a") == [("2024-01-01", 9.0)]
    assert (job.summary.rows_rejected, job.summary.readings_changed) == (0, 1)


def test_a_quote_left_open_in_a_large_file_names_its_line(job: Job) -> None:
    # Given 3 MB of rows with a stray quote in the middle (Arrow's reader said only
    # "straddling object straddles two block boundaries")
    rows = "a,2024-01-01T10:00:00Z,1\n" * 60_000
    job.upload(HEADER + rows + '"x,2024-07-01,5\n' + rows.replace("a,", "b,"))

    # When the job runs
    exit_code = job.run()

    # Then it fails naming the quote's line, not Arrow's internals
    assert exit_code == 1
    assert "line 60,002 has a quote" in job.message
    assert "straddl" not in job.message


def test_start_processing_passes_the_size_limit_the_container_reads() -> None:
    # Given start-processing's settings with a limit of 3 MiB (template parameter
    # ProcessingMaxUploadMB -> PROCESSING_MAX_UPLOAD_MB)
    settings = ProcessingSettings.from_env(
        {
            "RAW_BUCKET": "raw",
            "ARTIFACTS_BUCKET": "artifacts",
            "REGISTRY_TABLE": "registry",
            "JOB_NAME_PREFIX": "fleetcast",
            "SAGEMAKER_ROLE_ARN": "arn:aws:iam::123456789012:role/sm",
            "PROCESSING_IMAGE_URI": "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-processing:test",
            "UPLOAD_QUEUE_TABLE": "queue",
            "PROCESSING_MAX_UPLOAD_MB": "3",
        }
    )
    upload = Upload(
        bucket="raw",
        key="incoming/a.csv",
        revision="v1",
        size=10,
        uploaded_at=datetime(2024, 1, 1, tzinfo=UTC),
    )

    # When it builds the processing job's request
    request = processing_job_request(
        settings, "20240101T000000Z-abc", upload, "runs/20240101T000000Z-abc/upload/u.csv", False
    )

    # Then the job's environment holds the limit, in bytes, under the container's name
    limits = JobLimits.from_env(request["Environment"])
    assert limits.max_upload_bytes == 3 * 2**20


def test_stored_customers_not_in_the_run_are_sent_as_the_fleets_teachers(job: Job) -> None:
    # Given a store of five customers, and an upload for one of them and a new one
    for customer_id in ("s1", "s2", "s3", "s4", "7"):
        job.store_history(customer_id, [("2024-01-01", 1.0), ("2024-01-02", 2.0)])
    job.upload(HEADER + "7,2024-01-03,40\n8,2024-01-01,1\n")

    # When the job runs
    assert job.run() == 0

    # Then the stored customers the run does not train are the fleet family's teachers,
    # with their stored days as training rows, and the run's own are not among them
    teachers = read_rows([job.paths.fleet_output / "teachers.parquet"])
    assert set(teachers) == {"s1", "s2", "s3", "s4"}
    assert teachers["s2"] == [("2024-01-01", 1.0), ("2024-01-02", 2.0)]
    assert job.train_customers() == {"7", "8"}
    # And they are given their calendars, as the run's customers are
    calendars = (job.paths.calendars_output / "calendars.csv").read_text()
    assert calendars.splitlines()[0].startswith("customer_id")


def test_with_no_stored_history_the_teachers_file_is_written_empty(job: Job) -> None:
    job.upload(HEADER + "8,2024-01-01,1\n")
    assert job.run() == 0
    assert read_rows([job.paths.fleet_output / "teachers.parquet"]) == {}


def test_a_run_as_large_as_the_fleet_sample_needs_no_teachers() -> None:
    from fleetcast_contracts.training import FLEET_TEACHERS
    from fleetcast_processing.shards import fleet_teacher_limit

    assert fleet_teacher_limit(20, 1) == FLEET_TEACHERS - 20
    assert fleet_teacher_limit(3_000, 2) == FLEET_TEACHERS - 1_500
    assert fleet_teacher_limit(5_000, 2) == 0
