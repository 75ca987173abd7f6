"""``changed.csv``: accepted readings that replaced a stored reading with another value.

Two uploads that disagree about one customer's reading at one instant are a fact the
people who send the files must hear of: the later upload's value is kept (an upload
corrects what it names), and each such reading is counted, and the first of them listed
with the value it replaced, beside rejected.csv.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pcsv

from fleetcast_contracts.processing import CHANGED_COLUMNS, CHANGED_ROWS_LISTED

SCHEMA = pa.schema(
    [
        ("line", pa.int64()),
        ("customer_id", pa.string()),
        ("timestamp", pa.string()),  # the instant, in UTC
        ("stored", pa.float64()),
        ("uploaded", pa.float64()),
    ]
)
assert tuple(SCHEMA.names) == CHANGED_COLUMNS


class ChangedReadings:
    """The changed readings of one job: counted, the first ``limit`` by line kept for the
    report. They come a history shard at a time, not in line order."""

    def __init__(self, limit: int = CHANGED_ROWS_LISTED) -> None:
        self.limit = limit
        self.count = 0
        self._listed = SCHEMA.empty_table()

    def add(
        self,
        lines: npt.NDArray[np.int64],
        customer_ids: pa.Array,
        instants_us: npt.NDArray[np.int64],
        stored: npt.NDArray[np.float64],
        uploaded: npt.NDArray[np.float64],
    ) -> None:
        if len(lines) == 0:
            return
        self.count += len(lines)
        first = pa.array(np.argsort(lines, kind="stable")[: self.limit])
        stamps = np.datetime_as_string(instants_us.astype("datetime64[us]"), timezone="UTC")
        rows = pa.table(
            [
                pa.array(lines),
                customer_ids,
                pa.array(stamps.astype(str), type=pa.string()),
                pa.array(stored),
                pa.array(uploaded),
            ],
            schema=SCHEMA,
        ).take(first)
        self._listed = pa.concat_tables([self._listed, rows]).sort_by("line").slice(0, self.limit)

    def write(self, path: Path) -> None:
        """The listed rows in line order, under a header (written when none changed too, so
        that the report's files are always the same)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            out.write((",".join(CHANGED_COLUMNS) + "\n").encode())
            pcsv.write_csv(
                self._listed,
                out,
                write_options=pcsv.WriteOptions(include_header=False, quoting_style="needed"),
            )
