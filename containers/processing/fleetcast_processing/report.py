"""The job's report: ``rejected.csv`` (streamed as rows are rejected) and ``summary.json``."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleetcast_common.contracts.processing import REJECTED_COLUMNS, ProcessingSummary, RejectReason
from fleetcast_processing.source import MalformedRow, RowBlock
from fleetcast_processing.validation import (
    ACCEPTED,
    IMPLAUSIBLE_CONSUMPTION,
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
_DUPLICATE = reason_code(RejectReason.DUPLICATE_ROW)


def reason_messages(latest: datetime) -> dict[RejectReason, str]:
    """What rejected.csv says about each reason (duplicates also name the line kept)."""
    return {
        RejectReason.INVALID_CUSTOMER_ID: (
            "customer_id must be 1 to 64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        ),
        RejectReason.INVALID_TIMESTAMP: (
            "timestamp is not an ISO 8601 date or date-time (like 2024-01-31 or "
            "2024-01-31T13:45:00Z)"
        ),
        RejectReason.OUT_OF_RANGE_TIMESTAMP: (
            f"timestamp is before 2000-01-01 or after {latest:%Y-%m-%dT%H:%M:%SZ} "
            "(more than a day after the job ran)"
        ),
        RejectReason.INVALID_CONSUMPTION: (
            "consumption must be a finite number (empty, text, NaN and infinity are not)"
        ),
        RejectReason.NEGATIVE_CONSUMPTION: "consumption is negative",
        RejectReason.IMPLAUSIBLE_CONSUMPTION: (
            f"consumption is above {IMPLAUSIBLE_CONSUMPTION:.0e}, too large to be a reading"
        ),
        RejectReason.DUPLICATE_ROW: "same customer_id and timestamp as an earlier row",
        RejectReason.MALFORMED_ROW: "the row has a different number of fields than the header",
    }


class RejectedRows:
    """``rejected.csv``: its header is written at once, rejected rows as they are found."""

    def __init__(self, path: Path, latest: datetime) -> None:
        self.path = path
        self.by_reason: Counter[str] = Counter()
        self.first: str | None = None
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

    def add(
        self,
        block: RowBlock,
        reasons: npt.NDArray[np.int8],
        original_line: npt.NDArray[np.int64],
    ) -> None:
        """Write the block's rejected rows (``reasons`` != 0) and its malformed rows.

        ``original_line`` is, for duplicate rows, the line of the reading that was kept.
        """
        rejected = np.flatnonzero(reasons != ACCEPTED)
        codes = reasons[rejected].astype(np.int64)
        messages = self._messages.take(pa.array(codes - 1))
        duplicate = codes == _DUPLICATE
        if duplicate.any():
            kept = pc.cast(pa.array(original_line[rejected]), pa.string())
            named = pc.binary_join_element_wise(
                "same customer_id and timestamp as line ", kept, ", which was kept", ""
            )
            messages = pc.if_else(pa.array(duplicate), named, messages)
        picked = pa.array(rejected)
        table = pa.table(
            [
                pa.array(block.lines[rejected]),
                block.customer_id.take(picked),
                block.timestamp.take(picked),
                block.consumption.take(picked),
                self._reasons.take(pa.array(codes - 1)),
                messages,
            ],
            schema=SCHEMA,
        )
        if block.malformed:
            table = pa.concat_tables([table, self._malformed_table(block.malformed)])
            table = table.sort_by("line")
        if table.num_rows == 0:
            return
        self._writer.write_table(table)
        counts = np.bincount(codes, minlength=len(REASONS) + 1)
        self.by_reason.update(
            {REASONS[code - 1].value: int(counts[code]) for code in np.flatnonzero(counts)}
        )
        if block.malformed:
            self.by_reason[RejectReason.MALFORMED_ROW.value] += len(block.malformed)
        if self.first is None:
            row = table.slice(0, 1).to_pylist()[0]
            self.first = f"line {row['line']}: {row['reason']} ({row['message']})"

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
    return (
        f"Processed {summary.source_name}: {summary.rows_read:,} rows read, "
        f"{summary.rows_accepted:,} accepted, {summary.rows_rejected:,} rejected{rejected}. "
        f"Customers: {summary.customers:,} ({summary.new_customers:,} new); "
        f"periods written: {summary.days_written:,} (frequency {summary.frequency})."
    )
