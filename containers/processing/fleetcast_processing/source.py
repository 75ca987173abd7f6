"""Reading an upload: recognise what kind of file it is, read its header, then hand out
blocks of rows with the line each row started on.

The file is read in blocks of a few tens of megabytes, so a gigabyte upload never sits in
memory whole. Each block ends on a record boundary and is parsed by Arrow's CSV reader
with every column as a string: the rules in :mod:`fleetcast_processing.validation` decide
what a value means, and rejected rows are reported exactly as they were written.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleetcast_contracts.processing import REQUIRED_COLUMNS
from fleetcast_processing.errors import UnusableInputError, visible
from fleetcast_processing.upload import UTF8_BOM, UploadReader, check_first_bytes, sniff_delimiter

logger = logging.getLogger(__name__)

# A block's working set (text, Arrow columns, parsed arrays, report rows) is about ten times
# its size: 8 MiB keeps a 1 GB upload's peak memory under 1 GB at the same speed as larger
# blocks (tests/integration/test_processing_large_upload.py).
DEFAULT_BLOCK_SIZE = 8 * 1024 * 1024
# A header longer than this is not a header; a line longer than LINE_LIMIT is not a reading.
HEADER_LIMIT = 1024 * 1024
LINE_LIMIT = 64 * 1024 * 1024
# Raw values copied from a malformed row into rejected.csv are cut to this length.
RAW_VALUE_LIMIT = 200


@dataclass(frozen=True)
class Header:
    """The upload's first line: its delimiter, its columns, where the required ones are."""

    line: int
    delimiter: str
    columns: tuple[str, ...]
    positions: dict[str, int]


@dataclass(frozen=True)
class MalformedRow:
    """A row with a different number of fields than the header."""

    line: int
    expected_fields: int
    found_fields: int
    values: dict[str, str]


@dataclass(frozen=True)
class RowBlock:
    """One block of parsed rows: the required columns as Arrow string arrays."""

    customer_id: pa.Array
    timestamp: pa.Array
    consumption: pa.Array
    lines: npt.NDArray[np.int64]
    malformed: list[MalformedRow]
    blank_rows: int
    bytes_read: int
    # Every line the block holds, and those that continue a row (line breaks in quotes).
    line_count: int = 0
    continued_lines: int = 0

    def __len__(self) -> int:
        return len(self.lines)


def read_header(upload: UploadReader) -> Header:
    """Read the header line, skipping blank lines before it, and check its columns."""
    line_number = 0
    first = b""
    while not first.strip():
        line_number += upload.skip_blank_lines() + 1
        first = upload.readline(HEADER_LIMIT)
        if not first:
            what = "decompresses to nothing" if upload.compressed else "is empty"
            raise UnusableInputError(f"the file {what}: there is no header and no data.")
        if line_number == 1:
            first = check_first_bytes(first)
        # A byte order mark may also follow blank lines (files pasted together): it is not
        # part of the first column's name.
        first = first.removeprefix(UTF8_BOM)
    if not first.endswith(b"\n") and len(first) >= HEADER_LIMIT:
        raise UnusableInputError(
            f"the first line is longer than {HEADER_LIMIT // 1024} KiB, so it is not a CSV "
            "header: is this a CSV file?"
        )
    if b"\x00" in first:
        raise UnusableInputError("the file contains NUL bytes: it is binary, not CSV text.")
    try:
        text = first.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as error:
        raise UnusableInputError(
            f"the header (line {line_number}) is not UTF-8 text (byte "
            f"{first[error.start : error.start + 1]!r} at position {error.start}): the file is "
            "binary or in another encoding such as Latin-1. Upload it as UTF-8 CSV."
        ) from error
    delimiter = sniff_delimiter(text)
    try:
        names = next(csv.reader([text], delimiter=delimiter))
    except csv.Error as error:
        raise UnusableInputError(f"the header could not be read as CSV ({error}).") from error
    columns = tuple(name.strip().lower() for name in names)
    _check_columns(columns)
    positions = {name: columns.index(name) for name in REQUIRED_COLUMNS}
    return Header(line_number, delimiter, columns, positions)


def _check_columns(columns: tuple[str, ...]) -> None:
    seen: dict[str, int] = {}
    repeated: list[str] = []
    for index, name in enumerate(columns, start=1):
        if name and name in seen:
            repeated.append(f"'{visible(_shorten(name))}' (columns {seen[name]} and {index})")
        seen.setdefault(name, index)
    if repeated:
        raise UnusableInputError(
            f"the header has duplicate column names: {', '.join(repeated[:5])}. "
            "Each column name must appear once."
        )
    missing = [name for name in REQUIRED_COLUMNS if name not in seen]
    if missing:
        shown = ", ".join(f"'{visible(_shorten(name))}'" for name in columns[:12])
        if len(columns) > 12:
            shown += f" and {len(columns) - 12} more"
        raise UnusableInputError(
            f"the header is missing required column(s) {', '.join(missing)}; "
            f"columns found: {shown or 'none'}. The header must name customer_id, timestamp "
            "and consumption (any order, any case; other columns are ignored)."
        )


def _shorten(value: str, limit: int = 40) -> str:
    return value if len(value) <= limit else value[: limit - 3] + "..."


def read_blocks(
    upload: UploadReader, header: Header, block_size: int = DEFAULT_BLOCK_SIZE
) -> Iterator[RowBlock]:
    """Parse the rest of the upload block by block; every row carries its line number."""
    for chunk, first_line, lines in _record_chunks(upload, block_size, header.line + 1):
        yield _parse_chunk(chunk, header, first_line, lines, upload.bytes_read)


def _record_chunks(
    upload: UploadReader, block_size: int, first_line: int
) -> Iterator[tuple[bytes, int, int]]:
    """Blocks of whole lines, never cut inside a quoted value (quotes can hide newlines),
    each with the number of its first line and how many lines it holds."""
    carry = b""
    line = first_line
    while data := upload.read(block_size):
        if carry:
            data = carry + data
        cut = _record_boundary(data)
        if cut == 0:
            carry = data
            if len(carry) > LINE_LIMIT:
                raise UnusableInputError(
                    f"line {line} is longer than {LINE_LIMIT // 2**20} MiB: is this a CSV file?"
                )
            continue
        chunk, carry = data[:cut], data[cut:]
        _check_text(chunk, line)
        lines = _count_newlines(chunk)
        yield chunk, line, lines
        line += lines
    if carry:  # the rest: lines that could not be cut apart, the last one without a newline
        _check_text(carry, line)
        yield carry, line, _count_newlines(carry) + (not carry.endswith(b"\n"))


def _count_newlines(data: bytes) -> int:
    # numpy compares a block's bytes several times faster than bytes.count finds them.
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n")))


def _record_boundary(data: bytes) -> int:
    """Where to cut ``data``: just after its last newline outside quotes (0: nowhere yet).

    Counting quotes is a heuristic (a stray quote inside a field fools it), so when no
    newline leaves the quotes balanced, cut at the last newline anyway.
    """
    last = data.rfind(b"\n")
    if last < 0 or b'"' not in data:
        return last + 1
    cut = last
    quotes_after = data.count(b'"', cut + 1)
    total = data.count(b'"')
    while cut >= 0 and (total - quotes_after) % 2:
        previous = data.rfind(b"\n", 0, cut)
        quotes_after += data.count(b'"', previous + 1, cut + 1)
        cut = previous
    return cut + 1 if cut >= 0 else last + 1


def _check_text(chunk: bytes, first_line: int) -> None:
    nul = chunk.find(b"\x00")
    if nul >= 0:
        line = first_line + chunk.count(b"\n", 0, nul)
        raise UnusableInputError(
            f"line {line} contains NUL bytes: the file is binary (or UTF-16), not CSV text."
        )


def _parse_chunk(
    chunk: bytes, header: Header, first_line: int, lines_in_chunk: int, bytes_read: int
) -> RowBlock:
    try:
        table, invalid = _parse_numbered(chunk, header)
    except pa.ArrowInvalid as error:
        raise _explain_parse_error(chunk, first_line, error) from error

    records = table.num_rows + len(invalid)
    record_lines = _record_lines(chunk, header.delimiter, first_line, lines_in_chunk, records)
    invalid_index = np.array([number - 1 for number, _, _ in invalid], dtype=np.int64)
    lines = np.delete(record_lines, invalid_index) if invalid else record_lines
    # Lines each record spans: more than one only after a line break inside quotes, so
    # one each where the chunk has as many records as lines (the usual chunk).
    one_line_each = records == lines_in_chunk
    spans = (
        np.ones(records, dtype=np.int64)
        if one_line_each
        else np.diff(record_lines, append=first_line + lines_in_chunk)
    )

    malformed: list[MalformedRow] = []
    blank_rows = 0
    for number, found, text in invalid:
        if not text.strip():
            blank_rows += 1
            continue
        line = int(record_lines[number - 1])
        if spans[number - 1] > 1 and _swallows_rows(
            _split_fields(text, header.delimiter), header.delimiter
        ):
            raise _unclosed_quote(line, int(spans[number - 1]), first_line + lines_in_chunk)
        malformed.append(
            MalformedRow(
                line=line,
                expected_fields=len(header.columns),
                found_fields=found,
                values=_fields_of(text, header),
            )
        )

    customer_id, timestamp, consumption = (
        table.column(name).combine_chunks() for name in REQUIRED_COLUMNS
    )
    valid_spans = spans if one_line_each else np.delete(spans, invalid_index)
    if (valid_spans > 1).any():
        _check_line_breaks(
            (customer_id, timestamp, consumption),
            header.delimiter,
            lines,
            valid_spans,
            first_line + lines_in_chunk,
        )
    blank_count = 0
    no_id = pc.equal(pc.binary_length(customer_id), 0)
    if pc.any(no_id).as_py():  # else no row is blank, the usual block: no more to look at
        blank = pc.and_(
            pc.and_(no_id, pc.equal(pc.binary_length(timestamp), 0)),
            pc.equal(pc.binary_length(consumption), 0),
        )
        blank_count = pc.sum(blank).as_py() or 0
    if blank_count:
        keep = pc.invert(blank)
        customer_id, timestamp, consumption = (
            pc.filter(column, keep) for column in (customer_id, timestamp, consumption)
        )
        lines = lines[~blank.to_numpy(zero_copy_only=False)]
    return RowBlock(
        customer_id=customer_id,
        timestamp=timestamp,
        consumption=consumption,
        lines=lines,
        malformed=malformed,
        blank_rows=blank_rows + blank_count,
        bytes_read=bytes_read,
        line_count=lines_in_chunk,
        continued_lines=lines_in_chunk - records,
    )


def _parse_numbered(chunk: bytes, header: Header) -> tuple[pa.Table, list[tuple[int, int, str]]]:
    try:
        table, invalid = _arrow_parse(chunk, header, use_threads=True)
    except pa.ArrowInvalid:
        # A quote left open makes the reader fail to split the chunk into its blocks
        # ("straddling object straddles two block boundaries"): read it as one block, and
        # the checks after it name the line.
        return _arrow_parse(chunk, header, use_threads=False, block_size=len(chunk) + 1)
    if invalid:
        # Arrow numbers invalid rows only when it parses on one thread.
        return _arrow_parse(chunk, header, use_threads=False)
    return table, invalid


def _check_line_breaks(
    columns: tuple[pa.Array, ...],
    delimiter: str,
    lines: npt.NDArray[np.int64],
    spans: npt.NDArray[np.int64],
    end_line: int,
) -> None:
    """Raise if a row's customer_id, timestamp or consumption swallowed the rows after it
    (a value holding both a line break and the delimiter, as :func:`_swallows_rows`)."""
    multi_line = np.flatnonzero(spans > 1)
    picked = pa.array(multi_line)
    swallowed = np.zeros(len(multi_line), dtype=np.bool_)
    for column in columns:
        values = column.take(picked)
        swallowed |= pc.and_(
            pc.match_substring_regex(values, "[\r\n]"), pc.match_substring(values, delimiter)
        ).to_numpy(zero_copy_only=False)
    if swallowed.any():
        index = multi_line[np.argmax(swallowed)]
        raise _unclosed_quote(int(lines[index]), int(spans[index]), end_line)


def _swallows_rows(values: list[str], delimiter: str) -> bool:
    """A quoted value holding both a line break and the delimiter is, in all likelihood, a
    quote left open: the lines it took in are rows of their own."""
    return any(("\n" in value or "\r" in value) and delimiter in value for value in values)


def _unclosed_quote(line: int, span: int, end_line: int) -> UnusableInputError:
    last = min(line + span, end_line) - 1
    return UnusableInputError(
        f'line {line:,} has a quote (") that is not closed where it should be: the quoted '
        f"value runs on over at least {last - line + 1:,} lines (to line {last:,}), so the "
        "rows in them cannot be read. Remove the stray quote or close it (a quote inside a "
        'quoted value is written "").'
    )


def _arrow_parse(
    chunk: bytes, header: Header, use_threads: bool, block_size: int | None = None
) -> tuple[pa.Table, list[tuple[int, int, str]]]:
    invalid: list[tuple[int, int, str]] = []

    def on_invalid_row(row: pcsv.InvalidRow) -> str:
        invalid.append((row.number if row.number is not None else 0, row.actual_columns, row.text))
        return "skip"

    # Positional names: the header's own names may be empty or repeated among the extras.
    names = [f"f{index}" for index in range(len(header.columns))]
    wanted = {f"f{header.positions[name]}": name for name in REQUIRED_COLUMNS}
    table = pcsv.read_csv(
        pa.py_buffer(chunk),
        read_options=pcsv.ReadOptions(
            column_names=names,
            use_threads=use_threads,
            **({"block_size": block_size} if block_size else {}),
        ),
        parse_options=pcsv.ParseOptions(
            delimiter=header.delimiter,
            newlines_in_values=True,
            ignore_empty_lines=False,
            invalid_row_handler=on_invalid_row,
        ),
        convert_options=pcsv.ConvertOptions(
            include_columns=list(wanted),
            column_types=dict.fromkeys(wanted, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    return table.rename_columns([wanted[name] for name in table.column_names]), invalid


def _record_lines(
    chunk: bytes, delimiter: str, first_line: int, lines: int, records: int
) -> npt.NDArray[np.int64]:
    """The line each of the chunk's ``records`` starts on."""
    if records == lines:
        return np.arange(first_line, first_line + lines, dtype=np.int64)
    # Quoted values with newlines in them: let the csv module say where records start.
    text = io.StringIO(chunk.decode("utf-8", "replace"), newline="")
    reader = csv.reader(text, delimiter=delimiter)
    starts: list[int] = []
    lines_before = 0
    try:
        for _ in reader:
            starts.append(first_line + lines_before)
            lines_before = reader.line_num
    except csv.Error:
        starts = []
    if len(starts) != records:
        logger.warning(
            "could not match rows to lines from line %d on: line numbers there are approximate",
            first_line,
        )
        return np.arange(first_line, first_line + records, dtype=np.int64)
    return np.array(starts, dtype=np.int64)


def _split_fields(text: str, delimiter: str) -> list[str]:
    try:
        return next(csv.reader([text], delimiter=delimiter), [])
    except csv.Error:
        return [text]


def _fields_of(text: str, header: Header) -> dict[str, str]:
    fields = _split_fields(text, header.delimiter)
    return {
        name: _shorten(fields[position], RAW_VALUE_LIMIT) if position < len(fields) else ""
        for name, position in header.positions.items()
    }


def _explain_parse_error(chunk: bytes, first_line: int, error: Exception) -> UnusableInputError:
    try:
        chunk.decode("utf-8")
    except UnicodeDecodeError as bad:
        line = first_line + chunk.count(b"\n", 0, bad.start)
        return UnusableInputError(
            f"the file is not UTF-8 text: line {line} has bytes that are not valid UTF-8 "
            f"({chunk[bad.start : bad.start + 4]!r}). Save it as UTF-8 (not Latin-1 or UTF-16)."
        )
    last_line = first_line + chunk.count(b"\n")
    return UnusableInputError(
        f"lines {first_line} to {last_line} could not be parsed as CSV ({error})."
    )
