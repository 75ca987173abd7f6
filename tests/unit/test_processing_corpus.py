"""A corpus of broken and hostile uploads, one test each: the processing container keeps
every good row, reports every bad one with its reason, fails only when nothing is
usable, and always says why in words (never only a traceback).

Each case is a whole file as a customer might send it. A run that succeeds must account
for every line: the header (and blank lines before it), blank lines, lines inside quoted
values, and rows accepted or rejected by reason add up to the lines of the file, and
rejected.csv lists each reason's rows (up to its cap) or says how many it left out.
"""

from __future__ import annotations

import gzip
from collections import Counter
from dataclasses import dataclass, field

import pytest
from test_processing import HEADER, Job, job  # noqa: F401  (the fixture)

from fleetcast_contracts.processing import MESSAGE_LIMIT, REJECTED_ROWS_PER_REASON


@dataclass(frozen=True)
class Usable:
    """The job succeeds: these daily totals per customer, and these rejections."""

    train: dict[str, list[tuple[str, float]]]
    rejected: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Unusable:
    """The job fails, and its message contains each fragment."""

    fragments: list[str]


GOOD = "a,2024-01-01T10:00:00Z,1.5\na,2024-01-02T10:00:00Z,2\nb,2024-01-01T10:00:00Z,3\n"
GOOD_TRAIN = {
    "a": [("2024-01-01", 1.5), ("2024-01-02", 2.0)],
    "b": [("2024-01-01", 3.0)],
}


def _rows(customer_id: str, days: int, month: str = "2024-02") -> str:
    return "".join(f"{customer_id},{month}-{day:02d}T10:00:00Z,1\n" for day in range(1, days + 1))


def _lines_in(content: bytes) -> int:
    """Lines of the file as the job reads it: decompressed, bare CRs as line ends."""
    text = gzip.decompress(content) if content[:2] == b"\x1f\x8b" else content
    if b"\n" not in text:
        text = text.replace(b"\r", b"\n")
    return text.count(b"\n") + (bool(text) and not text.endswith(b"\n"))


def _gzip_cut_in_half(text: str) -> bytes:
    whole = gzip.compress(text.encode())
    return whole[: len(whole) // 2]


CORPUS: dict[str, tuple[bytes, Usable | Unusable]] = {
    "empty file": (b"", Unusable(["empty"])),
    "only blank lines": (b"\n\r\n\n", Unusable(["empty"])),
    "header only": (HEADER.encode(), Unusable(["header but no data rows"])),
    "utf-8 byte order mark": (("\ufeff" + HEADER + GOOD).encode(), Usable(GOOD_TRAIN)),
    "crlf line endings": ((HEADER + GOOD).replace("\n", "\r\n").encode(), Usable(GOOD_TRAIN)),
    "semicolons and decimal commas": (
        b"customer_id;timestamp;consumption\na;2024-01-01T10:00:00Z;1,5\n"
        b"a;2024-01-02T10:00:00Z;2\nb;2024-01-01T10:00:00Z;3\n",
        Usable(GOOD_TRAIN),
    ),
    "quoted fields with commas, quotes and newlines": (
        (
            b'"customer_id","timestamp","consumption","note"\n'
            b'"a","2024-01-01T10:00:00Z","1.5","meter, north"\n'
            b'"a","2024-01-02T10:00:00Z","2","said ""read me""\nand more"\n'
            b'"b","2024-01-01T10:00:00Z","3",""\n'
        ),
        Usable(GOOD_TRAIN),
    ),
    "extra and reordered columns": (
        (
            b"site,Consumption,CUSTOMER_ID,unit,Timestamp\n"
            b"n,1.5,a,kWh,2024-01-01T10:00:00Z\nn,2,a,kWh,2024-01-02T10:00:00Z\n"
            b"s,3,b,kWh,2024-01-01T10:00:00Z\n"
        ),
        Usable(GOOD_TRAIN),
    ),
    "missing column": (
        b"customer_id,timestamp\na,2024-01-01\n",
        Unusable(["missing required column(s) consumption"]),
    ),
    "duplicate column in the header": (
        b"customer_id,timestamp,consumption,consumption\na,2024-01-01,1,2\n",
        Unusable(["duplicate column names", "'consumption' (columns 3 and 4)"]),
    ),
    # Two exports pasted together: the second header is a row like any other, and invalid.
    "header repeated inside the file": (
        (HEADER + GOOD + HEADER + "b,2024-01-02T10:00:00Z,4\n").encode(),
        Usable(
            {**GOOD_TRAIN, "b": [("2024-01-01", 3.0), ("2024-01-02", 4.0)]},
            {"repeated_header": 1},
        ),
    ),
    # Every reading lands on its UTC day, whatever zone it was written in.
    "mixed time zones and offsets": (
        (
            HEADER + "a,2024-01-01T23:30:00-02:00,1\n"  # 2024-01-02 01:30 UTC
            "a,2024-01-02T00:30:00+01:00,2\n"  # 2024-01-01 23:30 UTC
            "a,2024-01-02 12:00:00Z,4\n"
            "a,2024-01-01T12:00:00+0530,8\n"
            "a,2024-01-01,16\n"  # no zone: UTC
        ).encode(),
        Usable({"a": [("2024-01-01", 26.0), ("2024-01-02", 5.0)]}),
    ),
    "dates out of range or impossible": (
        (
            HEADER + GOOD + "a,1999-12-31T10:00:00Z,1\na,2999-01-01T10:00:00Z,1\n"
            "a,2024-02-30T10:00:00Z,1\na,2024-13-01,1\na,yesterday,1\n"
        ).encode(),
        Usable(GOOD_TRAIN, {"out_of_range_timestamp": 2, "invalid_timestamp": 3}),
    ),
    # Issue 25: a monthly total written as "2024-02" landed on the 1st as one reading.
    "months and years as timestamps": (
        (HEADER + GOOD + "a,2024-02,30\na, 2024 ,365\nb,2023-12,31\nb,2024-02-01,1\n").encode(),
        Usable(
            {**GOOD_TRAIN, "b": [*GOOD_TRAIN["b"], ("2024-02-01", 1.0)]},
            {"month_or_year_timestamp": 3},
        ),
    ),
    "nan, infinite, negative and huge consumption": (
        (
            HEADER + GOOD + "c,2024-01-01,NaN\nc,2024-01-02,inf\nc,2024-01-03,-inf\n"
            "c,2024-01-04,-0.5\nc,2024-01-05,1e12\nc,2024-01-06,\nc,2024-01-07,12kWh\n"
        ).encode(),
        Usable(
            GOOD_TRAIN,
            {"invalid_consumption": 5, "negative_consumption": 1, "implausible_consumption": 1},
        ),
    ),
    "duplicate rows": (
        (HEADER + GOOD + GOOD.splitlines(keepends=True)[0] * 2).encode(),
        Usable(GOOD_TRAIN, {"duplicate_row": 2}),
    ),
    "unicode and over-long customer ids": (
        (
            HEADER + GOOD + "caf\u00e9,2024-01-01,1\n\u5ba2\u6237,2024-01-01,1\n"
            "\U0001f600,2024-01-01,1\n" + "x" * 65 + ",2024-01-01,1\n"
        ).encode(),
        Usable(GOOD_TRAIN, {"invalid_customer_id": 4}),
    ),
    "ids that are paths, or hold slashes or spaces": (
        (
            HEADER + GOOD + "../../etc/passwd,2024-01-01,1\n/etc/passwd,2024-01-01,1\n"
            "a/b,2024-01-01,1\na b,2024-01-01,1\n..,2024-01-01,1\n"
            '"a\\b",2024-01-01,1\n'
        ).encode(),
        Usable(GOOD_TRAIN, {"invalid_customer_id": 6}),
    ),
    "rows with too few or too many fields": (
        (HEADER + GOOD + "a,2024-01-05\na,2024-01-06,1,extra\n").encode(),
        Usable(GOOD_TRAIN, {"malformed_row": 2}),
    ),
    "gzip": (gzip.compress((HEADER + GOOD).encode()), Usable(GOOD_TRAIN)),
    # A cut-off file would give its last day too low a total: it is re-uploaded, not guessed.
    "truncated gzip": (
        _gzip_cut_in_half(HEADER + GOOD * 2000),
        Unusable(["truncated"]),
    ),
    "not csv: png image": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", Unusable(["UTF-8"])),
    "not csv: json": (b'{"readings": [{"customer": "a"}]}\n', Unusable(["missing required"])),
    "not csv: latin-1 text": (
        (HEADER + GOOD).encode() + "caf\u00e9,2024-01-01,1\n".encode("latin-1"),
        Unusable(["UTF-8", "line 5"]),
    ),
    # Issue 13: a quote left open swallowed every row after it, reported as one bad row.
    "a quote left open after good rows": (
        (HEADER + GOOD + '"x,2025-07-01,5\n' + _rows("b", 28)).encode(),
        Unusable(["line 5 has a quote", "not closed", "to line 33"]),
    ),
    "a quote left open on the first data row": (
        (HEADER + '"x,2025-07-01,5\n' + _rows("a", 28) + _rows("b", 28, "2024-03")).encode(),
        Unusable(["line 2 has a quote", "not closed"]),
    ),
    # A closed quote may hold a line break: that row is read (and here rejected) as one row.
    "a quoted id with a line break in it": (
        (HEADER + GOOD + '"a\nb",2024-01-01,1\n').encode(),
        Usable(GOOD_TRAIN, {"invalid_customer_id": 1}),
    ),
    "blank lines before the header and among the rows": (
        ("\n \n\t\r\n" + HEADER + "\n" + GOOD + "\n\n,,\n").encode(),
        Usable(GOOD_TRAIN),
    ),
    "blank lines only after the header": ((HEADER + "\n\n  \n").encode(), Unusable(["no data"])),
    "gzip of a million blank lines before the header": (
        gzip.compress(b"\n" * 1_000_000 + (HEADER + GOOD).encode()),
        Usable(GOOD_TRAIN),
    ),
    # Issue 13: with nanosecond fractions in the block these were "not an ISO 8601 date".
    "out-of-range dates beside nanosecond timestamps": (
        (
            HEADER + "a,2024-01-01T10:00:00.123456789Z,1.5\na,2024-01-02T10:00:00Z,2\n"
            "b,2024-01-01T10:00:00Z,3\na,9999-12-31,1\na,0001-01-01,1\na,2262-04-12,1\n"
            "a,2262-04-12T00:00:00.000000001Z,1\n"
        ).encode(),
        Usable(GOOD_TRAIN, {"out_of_range_timestamp": 4}),
    ),
    # Issue 13: each reading is plausible, their day is not (it went live forecasting -7e10).
    "a day of 1440 readings of 999,999,999": (
        (
            HEADER
            + GOOD
            + "".join(
                f"c,2024-01-01T{minute // 60:02d}:{minute % 60:02d}:00Z,999999999\n"
                for minute in range(1440)
            )
        ).encode(),
        Usable(GOOD_TRAIN, {"implausible_period_total": 1440}),
    ),
    # Issue 13: 78 KB of gzip made a 1.18 GB rejected.csv.
    "a gzip of many rows of junk": (
        gzip.compress((HEADER + GOOD + "!,x,y\n" * 30_000).encode()),
        Usable(GOOD_TRAIN, {"invalid_customer_id": 30_000}),
    ),
    "spreadsheet formulas in rejected values": (
        (
            HEADER + GOOD + '=HYPERLINK("http://x"),2024-01-01,1\n@SUM(A1),2024-01-01,1\n'
            "+1+1,2024-01-01,1\n-1+1,2024-01-01,1\n\t=1,2024-01-01,1\nd,=1+1,1\nd,2024-01-01,-2\n"
        ).encode(),
        Usable(
            GOOD_TRAIN,
            {"invalid_customer_id": 5, "invalid_timestamp": 1, "negative_consumption": 1},
        ),
    ),
    "nothing usable": (
        (HEADER + "../x,2024-01-01,1\na,never,1\n").encode(),
        Unusable(["none of its 2 data rows is usable"]),
    ),
}


@pytest.mark.parametrize(
    ("content", "expected"),
    [pytest.param(content, expected, id=name) for name, (content, expected) in CORPUS.items()],
)
def test_every_upload_is_used_or_refused_with_reasons(
    job: Job,  # noqa: F811
    content: bytes,
    expected: Usable | Unusable,
) -> None:
    # Given an upload from the corpus
    job.upload(content, "upload.csv")

    # When the job runs
    exit_code = job.run()

    # Then it ends with a message (never a traceback) and an exit code that says which
    message = job.message
    assert "Traceback" not in message and "\n" not in message
    assert len(message.encode()) <= MESSAGE_LIMIT
    if isinstance(expected, Unusable):
        assert exit_code == 1, message
        assert message.startswith("Processing failed for upload.csv: ")
        for fragment in expected.fragments:
            assert fragment in message
        assert not job.paths.train_output.exists() or job.train_customers() == set()
        return
    assert exit_code == 0, message
    # And the good rows flow into one file per customer
    assert job.train_customers() == set(expected.train)
    assert {customer: job.train(customer) for customer in expected.train} == expected.train
    # And every line of the file is accounted for
    summary = job.summary
    assert summary.rejected_by_reason == expected.rejected
    assert summary.rows_accepted + summary.rows_rejected == summary.rows_read
    assert summary.rows_rejected == sum(summary.rejected_by_reason.values())
    assert summary.lines == _lines_in(content)
    assert summary.lines == (
        summary.header_line + summary.blank_lines + summary.continued_lines + summary.rows_read
    )
    # And every bad row is listed with its reason, or counted in the row saying how many
    # more there were
    rejected = job.rejected()
    per_period = [row for row in rejected if row["reason"] == "implausible_period_total"]
    rows = [row for row in rejected if row not in per_period]
    listed = Counter(row["reason"] for row in rows if row["line"])
    more = {
        row["reason"]: _count_in(row["message"], " more rows") for row in rows if not row["line"]
    }
    assert all(row["line"].isdigit() for row in rows if row["line"])
    for reason, count in summary.rejected_by_reason.items():
        if reason == "implausible_period_total":
            # Listed by period, each row naming how many readings it stands for
            assert (
                sum(
                    _count_in(row["message"].removeprefix("the "), " readings")
                    for row in per_period
                )
                == count
            )
            continue
        assert listed[reason] == min(count, REJECTED_ROWS_PER_REASON)
        assert listed[reason] + more.get(reason, 0) == count


def _count_in(message: str, before: str) -> int:
    return int(message.split(before, 1)[0].replace(",", ""))
