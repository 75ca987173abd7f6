"""The job's report: ``rejected.csv`` and ``summary.json``.

rejected.csv is opened by people, often in a spreadsheet, and its rows come from whoever
wrote the upload. So it lists a bounded sample per reason (the first lines; counts cover
every row), in line order, cuts every value it echoes, and defuses values a spreadsheet
would run as a formula.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleetcast_contracts.ids import CUSTOMER_ID_RULE
from fleetcast_contracts.processing import (
    DEFAULT_MAX_PERIOD_TOTAL,
    MAX_PERIOD_TOTAL_ENV,
    REJECTED_COLUMNS,
    REJECTED_ROWS_PER_REASON,
    REJECTED_VALUE_LIMIT,
    ProcessingSummary,
    RejectReason,
)
from fleetcast_processing.source import MalformedRow, RowBlock
from fleetcast_processing.validation import (
    ACCEPTED,
    EARLIEST,
    IMPLAUSIBLE_CONSUMPTION,
    NUMBER_PATTERN,
    REASONS,
    reason_code,
)

SCHEMA = pa.schema(
    [
        ("line", pa.int64()),
        ("customer_id", pa.string()),
        ("timestamp", pa.string()),
        ("consumption", pa.string()),
        ("reason", pa.string()),
        ("message", pa.string()),
    ]
)
assert tuple(SCHEMA.names) == REJECTED_COLUMNS
_MALFORMED = reason_code(RejectReason.MALFORMED_ROW)
# What a spreadsheet may take for a formula (OWASP, "CSV Injection"); plain numbers such as
# "-0.5" are left as they are.
_FORMULA_START = r"^[=+\-@\t\r]"
_ECHOED = ("customer_id", "timestamp", "consumption")


def reason_messages(latest: datetime) -> dict[RejectReason, str]:
    """What rejected.csv says about each reason (duplicates also name the line kept)."""
    return {
        RejectReason.INVALID_CUSTOMER_ID: (
            f"customer_id must be {CUSTOMER_ID_RULE}, kept exactly as written (' 7' is not '7')"
        ),
        RejectReason.INVALID_TIMESTAMP: (
            "timestamp is not an ISO 8601 date or date-time (like 2024-01-31 or "
            "2024-01-31T13:45:00Z)"
        ),
        RejectReason.MONTH_OR_YEAR_TIMESTAMP: (
            "timestamp is a month or a year (like 2024-02 or 2024), not the time of a "
            "reading: give the reading's date or date-time"
        ),
        RejectReason.OUT_OF_RANGE_TIMESTAMP: (
            f"timestamp is a date outside the supported range: before {EARLIEST:%Y-%m-%d} or "
            f"after {latest:%Y-%m-%dT%H:%M:%SZ} (more than a day after the job ran)"
        ),
        RejectReason.INVALID_CONSUMPTION: (
            "consumption must be a finite number (empty, text, NaN and infinity are not, "
            "nor a number too small to store, like 1e-400, which would be read as 0)"
        ),
        RejectReason.NEGATIVE_CONSUMPTION: "consumption is negative",
        RejectReason.IMPLAUSIBLE_CONSUMPTION: (
            f"consumption is above {IMPLAUSIBLE_CONSUMPTION:.0e}, too large to be a reading"
        ),
        RejectReason.DUPLICATE_ROW: "same customer_id and timestamp as an earlier row",
        RejectReason.MALFORMED_ROW: "the row has a different number of fields than the header",
        RejectReason.REPEATED_HEADER: (
            "the header line again (files joined together?): not a reading"
        ),
        RejectReason.IMPLAUSIBLE_PERIOD_TOTAL: (
            f"the customer's readings in this period add up to more than is plausible "
            f"(setting {MAX_PERIOD_TOTAL_ENV})"
        ),
    }


class RejectedRows:
    """``rejected.csv``: its header is written at once; on closing, the rows listed in line
    order, then one row per reason whose rows were not all listed, saying how many more."""

    def __init__(
        self,
        path: Path,
        latest: datetime,
        period_limit: float = DEFAULT_MAX_PERIOD_TOTAL,
        per_reason: int = REJECTED_ROWS_PER_REASON,
    ) -> None:
        self.path = path
        self.per_reason = per_reason
        self._period_limit = period_limit
        self._periods_left_out = 0
        self.by_reason: Counter[str] = Counter()
        self.listed: Counter[str] = Counter()
        # The rows listed, written in line order on closing (at most per_reason a reason).
        self._rows: list[pa.Table] = []
        self._duplicates = SCHEMA.empty_table()
        messages = reason_messages(latest)
        self._messages = pa.array([messages[reason] for reason in REASONS], type=pa.string())
        self._reasons = pa.array([reason.value for reason in REASONS], type=pa.string())
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("wb")
        self._file.write((",".join(REJECTED_COLUMNS) + "\n").encode())
        self._writer = pcsv.CSVWriter(
            self._file,
            SCHEMA,
            write_options=pcsv.WriteOptions(include_header=False, quoting_style="needed"),
        )

    @property
    def total(self) -> int:
        return sum(self.by_reason.values())

    def add(self, block: RowBlock, reasons: npt.NDArray[np.int8]) -> None:
        """Count the block's rejected rows (``reasons`` != 0) and its malformed rows, and list
        those that fit under the cap."""
        rejected = np.flatnonzero(reasons != ACCEPTED)
        codes = reasons[rejected].astype(np.int64)
        counts = np.bincount(codes, minlength=len(REASONS) + 1)
        counts[_MALFORMED] += len(block.malformed)
        if not counts.any():
            return
        self.by_reason.update(
            {REASONS[code - 1].value: int(counts[code]) for code in np.flatnonzero(counts)}
        )
        listed = self._under_cap(codes)
        rejected, codes = rejected[listed], codes[listed]
        malformed = block.malformed[: self._room(RejectReason.MALFORMED_ROW)]
        self.listed.update({REASONS[code - 1].value: int(n) for code, n in _counts(codes).items()})
        self.listed[RejectReason.MALFORMED_ROW.value] += len(malformed)
        picked = pa.array(rejected, type=pa.int64())
        self._rows.append(
            pa.table(
                [
                    pa.array(block.lines[rejected]),
                    block.customer_id.take(picked),
                    block.timestamp.take(picked),
                    block.consumption.take(picked),
                    self._reasons.take(pa.array(codes - 1)),
                    self._messages.take(pa.array(codes - 1)),
                ],
                schema=SCHEMA,
            )
        )
        if malformed:
            self._rows.append(self._malformed_table(malformed))

    def add_duplicates(
        self,
        lines: npt.NDArray[np.int64],
        customer_ids: pa.Array,
        text: Callable[[npt.NDArray[np.int64]], tuple[pa.Array, pa.Array]],
        original_line: npt.NDArray[np.int64],
    ) -> None:
        """Reject rows that repeat an earlier reading (``original_line``: its line). They come
        a history shard at a time, not in file order: the first per_reason lines of all the
        shards are listed, ``text`` giving the timestamp and consumption text of those (by
        their positions in ``lines``)."""
        if len(lines) == 0:
            return
        self.by_reason[RejectReason.DUPLICATE_ROW.value] += len(lines)
        first = np.argsort(lines, kind="stable")[: self.per_reason]
        picked = pa.array(first)
        kept = pc.cast(pa.array(original_line).take(picked), pa.string())
        timestamps, consumption = text(first)
        rows = pa.table(
            [
                pa.array(lines).take(picked),
                customer_ids.take(picked),
                timestamps,
                consumption,
                pa.repeat(RejectReason.DUPLICATE_ROW.value, len(picked)),
                pc.binary_join_element_wise(
                    "same customer_id and timestamp as line ", kept, ", which was kept", ""
                ),
            ],
            schema=SCHEMA,
        )
        merged = pa.concat_tables([self._duplicates, rows]).sort_by("line")
        self._duplicates = merged.slice(0, self.per_reason)

    @property
    def first(self) -> str | None:
        """The first rejected row listed, for a message: by line, else the first period."""
        table = self._listed()
        if table.num_rows == 0:
            return None
        row = table.slice(0, 1).to_pylist()[0]
        if row["line"] is None:
            return f"{row['timestamp']} of customer {row['customer_id']}: {row['reason']}"
        return f"line {row['line']}: {row['reason']} ({row['message']})"

    def _listed(self) -> pa.Table:
        """Every row listed so far, in line order (rejected periods, which have none, last)."""
        table = pa.concat_tables([*self._rows, self._duplicates])
        return table.sort_by("line")  # nulls (periods) last

    def add_periods(
        self,
        customer_ids: list[str],
        periods: pa.Array,
        totals: list[float],
        rows: list[int],
        stored: list[int] | None = None,
    ) -> None:
        """Reject the upload's readings of whole periods whose total is implausible: one row
        each, naming how many readings it stands for. ``stored``: how many readings the
        history already held in each period, counted in its total and kept."""
        reason = RejectReason.IMPLAUSIBLE_PERIOD_TOTAL
        self.by_reason[reason.value] += sum(rows)
        room = self._room(reason)
        kept = stored if stored is not None else [0] * len(rows)
        shown = list(zip(customer_ids, periods.to_pylist(), totals, rows, kept, strict=True))
        shown = shown[:room]
        self.listed[reason.value] += len(shown)
        self._periods_left_out += len(customer_ids) - len(shown)
        if not shown:
            return
        self._rows.append(
            pa.table(
                {
                    "line": pa.nulls(len(shown), pa.int64()),
                    "customer_id": [customer_id for customer_id, *_ in shown],
                    "timestamp": [period for _, period, *_ in shown],
                    "consumption": [f"{total:.6g}" for _, _, total, *_ in shown],
                    "reason": [reason.value] * len(shown),
                    "message": [
                        self._period_message(total, count, already)
                        for _, _, total, count, already in shown
                    ],
                },
                schema=SCHEMA,
            )
        )

    def _period_message(self, total: float, count: int, stored: int) -> str:
        limit = f"more than the plausible {self._period_limit:.6g} (setting {MAX_PERIOD_TOTAL_ENV})"
        if not stored:
            return (
                f"the {count:,} readings of this customer in this period add up to "
                f"{total:.6g}, {limit}: none of them is used"
            )
        return (
            f"with the {stored:,} readings the history already holds for this customer and "
            f"period, this upload's {count:,} add up to {total:.6g}, {limit}: the upload's "
            "readings of it are not used, the stored ones are kept"
        )

    def _room(self, reason: RejectReason) -> int:
        return max(self.per_reason - self.listed[reason.value], 0)

    def _under_cap(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        listed = np.zeros(len(codes), dtype=np.bool_)
        for code in np.unique(codes):
            positions = np.flatnonzero(codes == code)
            listed[positions[: self._room(REASONS[code - 1])]] = True
        return listed

    def _write(self, table: pa.Table) -> None:
        for name in _ECHOED:
            index = table.schema.get_field_index(name)
            table = table.set_column(index, name, _defused(table.column(name)))
        self._writer.write_table(table)

    def _malformed_table(self, rows: list[MalformedRow]) -> pa.Table:
        return pa.table(
            {
                "line": [row.line for row in rows],
                "customer_id": [row.values["customer_id"] for row in rows],
                "timestamp": [row.values["timestamp"] for row in rows],
                "consumption": [row.values["consumption"] for row in rows],
                "reason": [RejectReason.MALFORMED_ROW.value] * len(rows),
                "message": [
                    f"expected {row.expected_fields} fields like the header, "
                    f"found {row.found_fields}"
                    for row in rows
                ],
            },
            schema=SCHEMA,
        )

    def close(self) -> None:
        """Write the rows listed, in line order, then, per reason with rows left out, how many
        were (the report's last rows)."""
        self.listed[RejectReason.DUPLICATE_ROW.value] = self._duplicates.num_rows
        listed = self._listed()
        if listed.num_rows:
            self._write(listed)
        unlisted = {
            reason: (f"{count - self.listed[reason]:,} more rows")
            for reason, count in sorted(self.by_reason.items())
            if count > self.listed[reason] and reason != RejectReason.IMPLAUSIBLE_PERIOD_TOTAL
        }
        if self._periods_left_out:
            unlisted[RejectReason.IMPLAUSIBLE_PERIOD_TOTAL.value] = (
                f"{self._periods_left_out:,} more periods"
            )
        if unlisted:
            self._writer.write_table(
                pa.table(
                    {
                        "line": pa.nulls(len(unlisted), pa.int64()),
                        "customer_id": [""] * len(unlisted),
                        "timestamp": [""] * len(unlisted),
                        "consumption": [""] * len(unlisted),
                        "reason": list(unlisted),
                        "message": [
                            f"{more} rejected for this reason are not listed "
                            f"(this report lists the first {self.per_reason:,} per reason)"
                            for more in unlisted.values()
                        ],
                    },
                    schema=SCHEMA,
                )
            )
        self._writer.close()
        self._file.close()

    def __enter__(self) -> RejectedRows:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _counts(codes: npt.NDArray[np.int64]) -> dict[int, int]:
    distinct, counts = np.unique(codes, return_counts=True)
    return dict(zip(distinct.tolist(), counts.tolist(), strict=True))


def _defused(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Values cut to REJECTED_VALUE_LIMIT characters, and a leading ' on any a spreadsheet
    would run as a formula."""
    long = pc.greater(pc.utf8_length(values), REJECTED_VALUE_LIMIT)
    cut = pc.binary_join_element_wise(
        pc.utf8_slice_codeunits(values, 0, REJECTED_VALUE_LIMIT - 3), "...", ""
    )
    values = pc.if_else(long, cut, values)
    formula = pc.and_(
        pc.match_substring_regex(values, _FORMULA_START),
        pc.invert(pc.match_substring_regex(values, NUMBER_PATTERN)),
    )
    return pc.if_else(formula, pc.binary_join_element_wise("'", values, ""), values)


def write_summary(path: Path, summary: ProcessingSummary) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(summary.model_dump_json(indent=2) + "\n")


def success_message(summary: ProcessingSummary) -> str:
    rejected = ""
    if summary.rows_rejected:
        reasons = ", ".join(
            f"{reason} {count:,}" for reason, count in sorted(summary.rejected_by_reason.items())
        )
        rejected = f" ({reasons}; see rejected.csv)"
    if summary.metadata is not None:
        metadata = summary.metadata
        return (
            f"Processed customer metadata {summary.source_name}: {summary.rows_read:,} rows "
            f"read, {summary.rows_accepted:,} accepted, {summary.rows_rejected:,} rejected"
            f"{rejected}. Customers: {summary.customers:,} ({summary.new_customers:,} new, "
            f"{metadata.customers_in_store:,} in the store); holiday calendar changed for "
            f"{len(metadata.calendar_changed):,}, of which {len(metadata.retrained):,} are "
            f"retrained on their history and {len(metadata.waiting_for_readings):,} have no "
            "readings yet."
        )
    changed = ""
    if summary.readings_changed:
        changed = (
            f", {summary.readings_changed:,} of them with another value than the stored one "
            "(kept: the upload's; see changed.csv)"
        )
    return (
        f"Processed {summary.source_name}: {summary.rows_read:,} rows read, "
        f"{summary.rows_accepted:,} accepted, {summary.rows_rejected:,} rejected{rejected}. "
        f"Readings: {summary.readings_new:,} new, {summary.readings_replaced:,} replacing a "
        f"stored reading of the same instant{changed}. "
        f"Customers: {summary.customers:,} ({summary.new_customers:,} new); "
        f"periods written: {summary.days_written:,} (frequency {summary.frequency})."
    )
