"""Messages that name the real problem (issue 25, item 8): a byte order mark where it is
not expected, invisible characters in column names, a truncated or doubly compressed gzip,
and metadata files held to the same rules as readings files (delimiters, ids kept exactly
as written, one description of the id allow-list)."""

from __future__ import annotations

import csv
import gzip
import zlib
from pathlib import Path

import pytest
from test_processing import HEADER, Job, job  # noqa: F401  (the fixture)
from test_processing_corpus import GOOD, GOOD_TRAIN

from fleetcast_contracts.ids import CUSTOMER_ID_RULE, InvalidCustomerIdError
from fleetcast_processing.metadata import MetadataPaths, run_metadata
from fleetcast_processing.metadata_store import load_store


def test_a_byte_order_mark_after_blank_lines_is_not_part_of_the_header(job: Job) -> None:  # noqa: F811
    # Given a file whose BOM comes after blank lines (two exports pasted together)
    job.upload(("\n\r\n" + "\ufeff" + HEADER + GOOD).encode())

    # When the job runs
    exit_code = job.run()

    # Then the header is read without it
    assert exit_code == 0, job.message
    assert {customer: job.train(customer) for customer in GOOD_TRAIN} == GOOD_TRAIN
    assert job.summary.header_line == 3


def test_an_invisible_character_in_a_column_name_is_shown(job: Job) -> None:  # noqa: F811
    # Given a header whose first name starts with a zero-width space
    job.upload(("\u200b" + HEADER + GOOD).encode())

    # When the job runs
    assert job.run() == 1

    # Then the message shows the character, not a name that looks right
    assert "columns found: '\\u200bcustomer_id'" in job.message


def test_a_small_truncated_gzip_says_how_much_of_it_is_there(job: Job) -> None:  # noqa: F811
    # Given a gzip cut short within its first block (it used to "end after 0 bytes of data")
    whole = gzip.compress((HEADER + GOOD * 50).encode())
    cut = whole[: len(whole) * 2 // 3]
    job.upload(cut, "upload.csv.gz")

    # When the job runs
    assert job.run() == 1

    # Then the message says it is truncated, how large it is and how much of it decompresses
    message = job.message
    decompressed = len(zlib.decompressobj(wbits=31).decompress(cut))
    assert "the gzip file is truncated" in message
    assert f"its {len(cut):,} compressed bytes stop before" in message
    assert f"after {decompressed:,} bytes of CSV" in message
    assert decompressed > 0 and "after 0 bytes" not in message


def test_a_doubly_gzipped_file_says_so(job: Job) -> None:  # noqa: F811
    # Given a .gz of a .gz (it used to "contain NUL bytes")
    job.upload(gzip.compress(gzip.compress((HEADER + GOOD).encode())), "upload.csv.gz")

    # When the job runs
    assert job.run() == 1

    # Then the message names the double compression
    assert "gzip-compressed twice" in job.message
    assert "NUL" not in job.message


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


def _metadata(paths: MetadataPaths, content: bytes) -> list[dict[str, str]]:
    upload = paths.report_output.parent / "meta.csv"
    upload.write_bytes(content)
    run_metadata(upload, paths, "meta.csv", "q0000000909-20261129t120000", "D")
    with (paths.report_output / "rejected.csv").open(newline="") as report:
        return list(csv.DictReader(report))


@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_metadata_takes_the_delimiters_readings_take(paths: MetadataPaths, delimiter: str) -> None:
    # Given a metadata file delimited as a readings file may be
    text = "customer_id,country,subdivision\nm1,DE,BY\nm2,US,\n".replace(",", delimiter)

    # When it is processed
    rejected = _metadata(paths, text.encode())

    # Then every row is read with its columns
    assert rejected == []
    store = load_store(paths.metadata_output)
    assert (store["m1"].calendar, store["m2"].calendar) == (("DE", "BY"), ("US", None))


def test_metadata_header_after_blank_lines_may_have_a_byte_order_mark(
    paths: MetadataPaths,
) -> None:
    _metadata(paths, "\n\n\ufeffcustomer_id,country\nm1,FR\n".encode())
    assert load_store(paths.metadata_output)["m1"].calendar == ("FR", None)


def test_metadata_keeps_ids_exactly_as_readings_do(paths: MetadataPaths) -> None:
    # Given ids with spaces around them, and one with a dot
    rejected = _metadata(paths, b"customer_id,country\n 7,US\n8 ,US\nmeter.1,US\n9,US\n")

    # Then the spaced ids are rejected saying why, not stored as '7' and '8'
    by_line = {int(row["line"]): row for row in rejected}
    assert sorted(by_line) == [2, 3, 4]
    assert {row["reason"] for row in rejected} == {"invalid_customer_id"}
    assert "has spaces around it" in by_line[2]["message"]
    assert "' 7'" in by_line[2]["message"]
    assert set(load_store(paths.metadata_output)) == {"9"}
    # And the id with a dot is refused with the allow-list as it is, in the same words as
    # everywhere else
    assert by_line[4]["message"] == f"not a valid customer id: it must be {CUSTOMER_ID_RULE}"
    assert CUSTOMER_ID_RULE in str(InvalidCustomerIdError("meter.1"))
    assert "'.'" not in CUSTOMER_ID_RULE
