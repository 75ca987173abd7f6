"""Customer metadata files: every row accepted or rejected with a reason and its line,
limits with clear errors, and the merge into the store."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import pytest
from shard_helpers import parts_in, read_rows, write_history

from fleetcast_contracts.processing import (
    MAX_ATTRIBUTE_COLUMNS,
    MAX_VALUE_CHARS,
    ProcessingSummary,
)
from fleetcast_contracts.training import CALENDARS_FILE
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.metadata import MetadataPaths, read_text, run_metadata
from fleetcast_processing.metadata_store import CustomerMetadata, load_store, write_store

LONG = "x" * (MAX_VALUE_CHARS + 1)
CORPUS = (
    "customer_id,Country,subdivision,segment\n"  # line 1: column names in any case
    "a1,us,,retail\n"  # 2: replaced by line 9
    "\n"  # 3: blank
    'b2,DE,by,"two\nlines"\n'  # 4-5: a quoted line break; subdivision in any case
    "bad id,US,,x\n"  # 6
    "c3,XX,,\n"  # 7: unknown country
    "c4,DE,ZZ,\n"  # 8: unknown subdivision
    "a1,US,CA,=cmd|x\n"  # 9: the last row for a1 wins; its formula-like attribute is kept
    'c5,"=HYPERLINK(""http://x"")",,\n'  # 10: a formula where the country goes
    f"c6,US,,{LONG}\n"  # 11: a value over the limit
    "c7,US\n"  # 12: too few fields
    "c8,,,\n"  # 13: no country
    "d9,DE,Augsburg,\n"  # 14: a subdivision code that is not in capitals
)


@pytest.fixture
def paths(tmp_path: Path) -> MetadataPaths:
    for name in ("store", "history"):
        (tmp_path / name).mkdir()
    return MetadataPaths(
        metadata_input=tmp_path / "store",
        metadata_output=tmp_path / "store-out",
        history_input=tmp_path / "history",
        train_output=tmp_path / "train",
        calendars_output=tmp_path / "calendars",
        report_output=tmp_path / "report",
        fleet_output=tmp_path / "fleet",
    )


def process(paths: MetadataPaths, text: str, name: str = "meta.csv") -> ProcessingSummary:
    upload = paths.report_output.parent / name
    upload.write_text(text)
    return run_metadata(upload, paths, name, "q0000000909-20261129t120000", "D")


def rejected(paths: MetadataPaths) -> list[dict[str, str]]:
    with (paths.report_output / "rejected.csv").open(newline="") as lines:
        return list(csv.DictReader(lines))


def test_every_row_of_the_corpus_is_accepted_or_rejected_with_its_line(paths: MetadataPaths):
    # Given a file with every kind of bad row, and history for a1
    write_history(paths.history_input, "a1", [("2026-11-01", 1.0), ("2026-11-02", 2.0)])
    # When it is processed
    summary = process(paths, CORPUS)
    # Then rows read = accepted + rejected, and lines add up
    assert summary.rows_read == 11
    assert (summary.rows_accepted, summary.rows_rejected) == (3, 8)
    assert summary.lines == 14
    assert (summary.header_line, summary.blank_lines, summary.continued_lines) == (1, 1, 1)
    assert summary.lines == (
        summary.header_line + summary.blank_lines + summary.continued_lines + summary.rows_read
    )
    # And each rejection names its reason, its line and the bad code
    report = {(int(r["line"]), r["reason"]): r for r in rejected(paths)}
    assert sorted(report) == [
        (2, "duplicate_customer"),
        (6, "invalid_customer_id"),
        (7, "unknown_country"),
        (8, "unknown_subdivision"),
        (10, "unknown_country"),
        (11, "value_too_long"),
        (12, "malformed_row"),
        (13, "missing_country"),
    ]
    assert "line 9" in report[(2, "duplicate_customer")]["message"]
    assert "'XX'" in report[(7, "unknown_country")]["message"]
    assert "'ZZ'" in report[(8, "unknown_subdivision")]["message"]
    assert f"at most {MAX_VALUE_CHARS}" in report[(11, "value_too_long")]["message"]
    # And a formula is echoed so that no spreadsheet runs it
    assert report[(10, "unknown_country")]["country"].startswith("'=")
    assert summary.rejected_by_reason["unknown_country"] == 2


def test_accepted_rows_reach_the_store_and_changed_calendars_with_history_are_retrained(
    paths: MetadataPaths,
):
    write_history(paths.history_input, "a1", [("2026-11-01", 1.0), ("2026-11-02", 2.0)])
    summary = process(paths, CORPUS)
    store = load_store(paths.metadata_output)
    assert sorted(store) == ["a1", "b2", "d9"]
    assert store["a1"].calendar == ("US", "CA")
    assert store["a1"].attributes == {"segment": "=cmd|x"}
    assert store["b2"].calendar == ("DE", "BY")
    assert store["b2"].attributes == {"segment": "two\nlines"}
    assert store["d9"].calendar == ("DE", "Augsburg")
    assert summary.metadata is not None
    assert summary.metadata.retrained == ["a1"]
    assert summary.metadata.waiting_for_readings == ["b2", "d9"]
    assert read_rows(parts_in(paths.train_output)) == {
        "a1": [("2026-11-01", 1.0), ("2026-11-02", 2.0)]
    }
    assert summary.days_written == 2
    assert (paths.calendars_output / CALENDARS_FILE).read_text() == (
        "customer_id,country,subdivision\na1,US,CA\n"
    )


def test_the_newest_upload_wins_and_an_unchanged_calendar_is_not_retrained(
    paths: MetadataPaths,
):
    # Given a store that knows a1 (US) and b2 (DE), and history for both
    write_store(
        paths.metadata_input,
        {
            "a1": CustomerMetadata("a1", "US", None, {"segment": "old"}),
            "b2": CustomerMetadata("b2", "DE", None),
        },
    )
    for customer_id in ("a1", "b2"):
        write_history(paths.history_input, customer_id, [("2026-11-01", 1.0)])
    # When a file sets a1 to the same calendar with a new segment, and b2 to Bavaria
    summary = process(paths, "customer_id,country,subdivision,segment\na1,US,,new\nb2,DE,BY,\n")
    # Then the store has the new rows, only b2 is retrained, and a customer the file does
    # not name is kept
    store = load_store(paths.metadata_output)
    assert store["a1"].attributes == {"segment": "new"}
    assert store["b2"].calendar == ("DE", "BY")
    assert summary.metadata is not None
    assert summary.metadata.calendar_changed == ["b2"]
    assert summary.metadata.retrained == ["b2"]
    assert read_rows(parts_in(paths.train_output)) == {"b2": [("2026-11-01", 1.0)]}
    assert summary.new_customers == 0


def test_a_gzipped_metadata_file_is_read(paths: MetadataPaths):
    upload = paths.report_output.parent / "meta.csv.gz"
    upload.write_bytes(gzip.compress(b"customer_id,country\na1,FR\n"))
    summary = run_metadata(upload, paths, "meta.csv.gz", "run", "D")
    assert summary.rows_accepted == 1
    assert load_store(paths.metadata_output)["a1"].calendar == ("FR", None)


def test_a_file_over_the_metadata_limit_fails_saying_so(tmp_path: Path):
    upload = tmp_path / "big.csv"
    upload.write_text("customer_id,country\n" + "a,US\n" * 1000)
    with pytest.raises(UnusableInputError, match="at most 100 bytes"):
        read_text(upload, max_bytes=100)
    assert read_text(upload).count("\n") == 1001


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("customer_id,timestamp,consumption\na,2026-01-01,1\n", "needs the columns"),
        ("customer_id,country,Country\na,US,US\n", "names country more than once"),
        (
            "customer_id,country,"
            + ",".join(f"a{i}" for i in range(MAX_ATTRIBUTE_COLUMNS + 1))
            + "\n",
            f"at most {MAX_ATTRIBUTE_COLUMNS} are kept",
        ),
        ("customer_id,country," + "a" * 65 + "\nx,US,1\n", "is not a name"),
        ("customer_id,country,seg ment\nx,US,1\n", "'seg ment' is not a name"),
        ("customer_id,country\n", "no data rows"),
        ("", "empty"),
        ("customer_id,country\nc3,XX\n", "none of its 1 data rows is usable.*line 2"),
    ],
)
def test_an_unusable_file_fails_the_job_saying_why(paths: MetadataPaths, text: str, problem: str):
    with pytest.raises(UnusableInputError, match=problem):
        process(paths, text)
    # And the store is left as it was
    assert not (paths.metadata_output).exists()
