"""A customer metadata upload (``incoming/metadata/*.csv``): validate it, merge it into the
metadata store, and send to training the customers whose holiday calendar changed.

Columns: ``customer_id`` and ``country`` (an ISO code of the ``holidays`` package),
optional ``subdivision`` (a subdivision code of that package), and up to
``MAX_ATTRIBUTE_COLUMNS`` free attribute columns kept as text. Every data row is either
accepted or rejected with a reason in ``rejected.csv`` (rows read = accepted + rejected);
of several rows for one customer the last wins and the earlier ones are rejected as
duplicates, naming the line that replaced them.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.holiday_calendar import check_calendar
from fleetcast_contracts.ids import CUSTOMER_ID_RULE, is_valid_customer_id
from fleetcast_contracts.processing import (
    MAX_ATTRIBUTE_COLUMNS,
    MAX_COLUMN_NAME_CHARS,
    MAX_METADATA_BYTES,
    MAX_VALUE_CHARS,
    METADATA_REJECTED_COLUMNS,
    METADATA_REQUIRED_COLUMNS,
    REJECTED_FILE,
    REJECTED_VALUE_LIMIT,
    SUBDIVISION_COLUMN,
    SUMMARY_FILE,
    MetadataRejectReason,
    MetadataSummary,
    ProcessingSummary,
)
from fleetcast_processing.errors import UnusableInputError, visible
from fleetcast_processing.metadata_store import (
    CustomerMetadata,
    load_store,
    write_calendars,
    write_store,
)
from fleetcast_processing.report import write_summary
from fleetcast_processing.shards import (
    fleet_teacher_limit,
    write_fleet_teachers,
    write_stored_parts,
)
from fleetcast_processing.upload import UTF8_BOM, UploadReader, sniff_delimiter
from fleetcast_processing.usage import UseCounts, UseRules

logger = logging.getLogger(__name__)

_BOM = UTF8_BOM.decode()
_ATTRIBUTE_NAME = re.compile(r"[a-z][a-z0-9_]*")
# What a spreadsheet may take for a formula (OWASP, "CSV Injection"), as in the readings'
# rejected.csv; numbers such as "-0.5" are left alone.
_FORMULA_START = re.compile(r"^[=+\-@\t\r]")
_NUMBER = re.compile(r"^[+-]?(\d+([.,]\d*)?|[.,]\d+)([eE][+-]?\d+)?$")


@dataclass(frozen=True)
class MetadataHeader:
    line: int
    columns: tuple[str, ...]
    attributes: tuple[str, ...]

    @property
    def has_subdivision(self) -> bool:
        return SUBDIVISION_COLUMN in self.columns


@dataclass(frozen=True)
class Rejection:
    line: int
    values: dict[str, str]
    reason: MetadataRejectReason
    message: str


@dataclass
class CheckedFile:
    header: MetadataHeader
    accepted: dict[str, tuple[int, CustomerMetadata]]
    rejected: list[Rejection]
    rows_read: int
    blank_lines: int
    lines: int

    @property
    def by_reason(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason.value for r in self.rejected).items()))


def read_text(path: Path, max_bytes: int = MAX_METADATA_BYTES) -> str:
    """The upload as text (gzip or plain; other formats and non-UTF-8 refused by name)."""
    with UploadReader.open(path) as upload:
        chunks, size = [], 0
        while chunk := upload.read(1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UnusableInputError(
                    f"a metadata file is at most {max_bytes:,} bytes (decompressed); split "
                    "it into smaller files and upload those one after the other."
                )
    data = b"".join(chunks)
    data = data.removeprefix(UTF8_BOM)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UnusableInputError(
            f"line {line} is not UTF-8 text (byte {data[error.start : error.start + 1]!r}): "
            "upload the metadata file as UTF-8 CSV."
        ) from error


def parse_header(names: list[str], line: int) -> MetadataHeader:
    columns = tuple(name.strip().lower() for name in names)
    missing = [name for name in METADATA_REQUIRED_COLUMNS if name not in columns]
    if missing:
        found = visible(",".join(columns)[:200])
        raise UnusableInputError(
            f"a metadata file needs the columns {', '.join(METADATA_REQUIRED_COLUMNS)} "
            f"(optional: {SUBDIVISION_COLUMN} and free attributes); line {line} has '{found}', "
            f"without {', '.join(missing)}."
        )
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        raise UnusableInputError(f"the header names {', '.join(repeated)} more than once.")
    known = {*METADATA_REQUIRED_COLUMNS, SUBDIVISION_COLUMN}
    attributes = tuple(name for name in columns if name not in known)
    for name in attributes:
        if len(name) > MAX_COLUMN_NAME_CHARS or not _ATTRIBUTE_NAME.fullmatch(name):
            raise UnusableInputError(
                f"attribute column {name[:80]!r} is not a name: use at most "
                f"{MAX_COLUMN_NAME_CHARS} lowercase letters, digits and _, starting with a letter."
            )
    if len(attributes) > MAX_ATTRIBUTE_COLUMNS:
        raise UnusableInputError(
            f"the file has {len(attributes)} attribute columns; at most "
            f"{MAX_ATTRIBUTE_COLUMNS} are kept per customer. Remove "
            f"{len(attributes) - MAX_ATTRIBUTE_COLUMNS} of them."
        )
    return MetadataHeader(line=line, columns=columns, attributes=attributes)


def check_file(text: str, source_name: str, run_id: str) -> CheckedFile:
    """Every row of the file accepted (the last for each customer) or rejected."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text))
    header: MetadataHeader | None = None
    accepted: dict[str, tuple[int, CustomerMetadata]] = {}
    rejected: list[Rejection] = []
    rows_read = blank = 0
    try:
        for fields in reader:
            line = reader.line_num - text_lines(fields) + 1
            if header is None and fields:
                # A byte order mark after blank lines (files pasted together) is no name.
                fields[0] = fields[0].removeprefix(_BOM)
            if not any(value.strip() for value in fields):
                if header is not None:
                    blank += 1
                continue
            if header is None:
                header = parse_header(fields, line)
                continue
            rows_read += 1
            problem = _check_row(fields, header)
            values = dict(zip(header.columns, fields, strict=False))
            if problem is not None:
                rejected.append(Rejection(line, values, *problem))
                continue
            record = _record(values, header, source_name, run_id)
            earlier = accepted.get(record.customer_id)
            if earlier is not None:
                rejected.append(
                    Rejection(
                        earlier[0],
                        _as_values(earlier[1]),
                        MetadataRejectReason.DUPLICATE_CUSTOMER,
                        f"line {line} of the same file, for the same customer, replaces it",
                    )
                )
            accepted[record.customer_id] = (line, record)
    except csv.Error as error:
        raise UnusableInputError(f"line {reader.line_num} is not valid CSV ({error}).") from error
    if header is None:
        raise UnusableInputError("the file is empty: there is no header and no data.")
    if rows_read == 0:
        raise UnusableInputError("the file has a header but no data rows.")
    return CheckedFile(header, accepted, rejected, rows_read, blank, reader.line_num)


def _delimiter(text: str) -> str:
    """The delimiter readings files may use too (``,``, ``;`` or tab), sniffed from the
    header: the first line that is not blank."""
    for line in io.StringIO(text):
        if line.removeprefix(_BOM).strip():
            return sniff_delimiter(line)
    return ","


def text_lines(fields: list[str]) -> int:
    """Physical lines a row spans (a quoted value may hold line breaks)."""
    return 1 + sum(value.count("\n") for value in fields)


def _check_row(
    fields: list[str], header: MetadataHeader
) -> tuple[MetadataRejectReason, str] | None:
    if len(fields) != len(header.columns):
        return (
            MetadataRejectReason.MALFORMED_ROW,
            f"{len(fields)} fields where the header has {len(header.columns)}",
        )
    values = dict(zip(header.columns, fields, strict=True))
    customer_id = values["customer_id"]
    if customer_id != customer_id.strip() and is_valid_customer_id(customer_id.strip()):
        # Readings keep ids exactly as written, so ' 7' here would describe nobody's '7'.
        return (
            MetadataRejectReason.INVALID_CUSTOMER_ID,
            f"customer_id {visible(customer_id)!r} has spaces around it: ids are kept exactly "
            "as written, in readings files too, so remove the spaces",
        )
    if not is_valid_customer_id(customer_id):
        return (
            MetadataRejectReason.INVALID_CUSTOMER_ID,
            f"not a valid customer id: it must be {CUSTOMER_ID_RULE}",
        )
    for name, value in values.items():
        if len(value) > MAX_VALUE_CHARS:
            return (
                MetadataRejectReason.VALUE_TOO_LONG,
                f"{name} has {len(value)} characters; at most {MAX_VALUE_CHARS} are kept",
            )
    country = values["country"].strip().upper()
    if not country:
        return MetadataRejectReason.MISSING_COUNTRY, "country is empty"
    try:
        check_calendar(country)
    except ValueError as error:
        return MetadataRejectReason.UNKNOWN_COUNTRY, str(error)
    try:
        _subdivision(country, values.get(SUBDIVISION_COLUMN, ""))
    except ValueError as error:
        return MetadataRejectReason.UNKNOWN_SUBDIVISION, str(error)
    return None


def _subdivision(country: str, raw: str) -> str | None:
    """The ``holidays`` package's code for ``raw``: as written, else in capitals (most
    codes are, a few such as DE's 'Augsburg' are not); raise ``ValueError`` naming it."""
    written = raw.strip()
    if not written:
        return None
    try:
        check_calendar(country, written)
    except ValueError:
        check_calendar(country, written.upper())
        return written.upper()
    return written


def _record(
    values: dict[str, str], header: MetadataHeader, source_name: str, run_id: str
) -> CustomerMetadata:
    return CustomerMetadata(
        customer_id=values["customer_id"],
        country=values["country"].strip().upper(),
        subdivision=_subdivision(
            values["country"].strip().upper(), values.get(SUBDIVISION_COLUMN, "")
        ),
        attributes={name: values[name] for name in header.attributes if values[name] != ""},
        source_name=source_name,
        run_id=run_id,
    )


def _as_values(record: CustomerMetadata) -> dict[str, str]:
    return {
        "customer_id": record.customer_id,
        "country": record.country,
        SUBDIVISION_COLUMN: record.subdivision or "",
    }


def _echo(value: str) -> str:
    """A value as rejected.csv shows it: cut, and defused if a spreadsheet would run it."""
    if len(value) > REJECTED_VALUE_LIMIT:
        value = value[: REJECTED_VALUE_LIMIT - 3] + "..."
    if _FORMULA_START.match(value) and not _NUMBER.match(value):
        value = "'" + value
    return value


def write_rejected(path: Path, rejected: list[Rejection]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(METADATA_REJECTED_COLUMNS)
        for rejection in sorted(rejected, key=lambda r: r.line):
            writer.writerow(
                [
                    rejection.line,
                    *(
                        _echo(rejection.values.get(name, ""))
                        for name in ("customer_id", "country", SUBDIVISION_COLUMN)
                    ),
                    rejection.reason.value,
                    rejection.message,
                ]
            )


@dataclass(frozen=True)
class MetadataPaths:
    metadata_input: Path
    metadata_output: Path
    history_input: Path
    train_output: Path
    calendars_output: Path
    report_output: Path
    fleet_output: Path


def run_metadata(
    upload_path: Path,
    paths: MetadataPaths,
    source_name: str,
    run_id: str,
    frequency: str,
    training_instances: int = 1,
    rules: UseRules | None = None,
) -> ProcessingSummary:
    """Process one metadata upload; raises :class:`UnusableInputError` when the file
    cannot be used at all (no store change then)."""
    checked = check_file(read_text(upload_path), source_name, run_id)
    write_rejected(paths.report_output / REJECTED_FILE, checked.rejected)
    if not checked.accepted:
        reasons = ", ".join(f"{reason} {count:,}" for reason, count in checked.by_reason.items())
        first = min(checked.rejected, key=lambda r: r.line)
        raise UnusableInputError(
            f"none of its {checked.rows_read:,} data rows is usable ({reasons}); the first "
            f"rejected row is line {first.line}: {first.message}."
        )
    store = load_store(paths.metadata_input)
    new_customers = sum(1 for customer_id in checked.accepted if customer_id not in store)
    changed = _merge_into_store(checked, store)
    write_store(paths.metadata_output, store)

    # Customers with stored history, and the changed ones among them sent to training.
    use = UseCounts()
    stored = write_stored_parts(
        sorted(checked.accepted),
        set(changed),
        Frequency.parse(frequency),
        rules or UseRules(),
        paths.history_input,
        paths.train_output,
        training_instances,
        use,
    )
    retrained = sorted(set(changed) & stored.keys())
    teachers = write_fleet_teachers(
        set(retrained),
        fleet_teacher_limit(len(retrained), training_instances),
        Frequency.parse(frequency),
        rules or UseRules(),
        paths.history_input,
        paths.fleet_output,
    )
    write_calendars(paths.calendars_output, [*retrained, *teachers], store)

    summary = _metadata_summary(
        checked, source_name, frequency, store, changed, new_customers, use, stored, retrained
    )
    write_summary(paths.report_output / SUMMARY_FILE, summary)
    logger.info(
        "metadata for %d customers (%d rejected rows); calendar changed for %d, %d retrained",
        len(checked.accepted),
        summary.rows_rejected,
        len(changed),
        len(retrained),
    )
    return summary


def _merge_into_store(checked: CheckedFile, store: dict[str, CustomerMetadata]) -> list[str]:
    """The accepted rows into ``store``; the customers whose calendar they changed (or
    who are new)."""
    changed = sorted(
        customer_id
        for customer_id, (_, record) in checked.accepted.items()
        if customer_id not in store or store[customer_id].calendar != record.calendar
    )
    for customer_id, (_, record) in checked.accepted.items():
        store[customer_id] = record
    return changed


def _metadata_summary(
    checked: CheckedFile,
    source_name: str,
    frequency: str,
    store: dict[str, CustomerMetadata],
    changed: list[str],
    new_customers: int,
    use: UseCounts,
    stored: dict[str, int],
    retrained: list[str],
) -> ProcessingSummary:
    # Customers without stored history wait for their readings.
    waiting = sorted(set(checked.accepted) - stored.keys())
    rows_written = sum(stored[customer_id] for customer_id in retrained)
    rows_rejected = len(checked.rejected)
    return ProcessingSummary(
        source_name=source_name,
        frequency=frequency,
        lines=checked.lines,
        header_line=checked.header.line,
        blank_lines=checked.blank_lines,
        continued_lines=checked.lines
        - checked.header.line
        - checked.blank_lines
        - checked.rows_read,
        rows_read=checked.rows_read,
        rows_accepted=checked.rows_read - rows_rejected,
        rows_rejected=rows_rejected,
        rejected_by_reason=checked.by_reason,
        customers=len(checked.accepted),
        new_customers=new_customers,
        days_written=rows_written,
        days_uploaded=0,
        periods_by_use=dict(sorted(use.by_use.items())),
        unused_periods=dict(sorted(use.unused.items())),
        customers_by_interval_s=dict(sorted(use.by_interval.items())),
        customers_list=sorted(checked.accepted),
        metadata=MetadataSummary(
            attribute_columns=list(checked.header.attributes),
            customers_in_store=len(store),
            calendar_changed=changed,
            retrained=retrained,
            waiting_for_readings=waiting,
        ),
    )
