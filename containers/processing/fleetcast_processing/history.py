"""Stored history in the per-customer files of releases before history shards, and the merge.

Those files (``{customer_id}.csv``, ``ds,y``) are read for the customers an upload
touches that are not in their shard yet (:mod:`fleetcast_processing.shards`); the merged
rows then go to the shard. They are fleetcast's own output, so anything unreadable in
them fails the job rather than being dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from fleetcast_common.contracts.ids import validate_customer_id
from fleetcast_common.contracts.layout import CUSTOMER_FILE_SUFFIX
from fleetcast_common.contracts.processing import HISTORY_COLUMNS
from fleetcast_processing.aggregate import Frequency, Totals
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.upload import UTF8_BOM
from fleetcast_processing.validation import parse_consumption, parse_instants


@dataclass(frozen=True)
class _StoredFile:
    code: int
    customer_id: str
    body: bytes
    rows: int


def load_history(folder: Path, customers: Mapping[int, str], frequency: Frequency) -> Totals:
    """The stored totals of ``customers`` (code -> customer id) that have a history file.

    All files are read into one buffer and parsed in one go: a thousand small parses would
    cost more than the data in them.
    """
    stored = [
        found
        for code, customer_id in customers.items()
        if (found := _read_file(folder, code, customer_id)) is not None
    ]
    if not stored:
        return Totals.empty()

    table = _parse(b"".join(stored_file.body for stored_file in stored), stored)
    owners = np.repeat(np.arange(len(stored)), [stored_file.rows for stored_file in stored])
    ds, y = table.column("ds").combine_chunks(), table.column("y").combine_chunks()
    blank = pc.and_(pc.equal(pc.binary_length(ds), 0), pc.equal(pc.binary_length(y), 0))
    keep = pc.invert(blank).to_numpy(zero_copy_only=False)
    instants, parsed = parse_instants(ds)
    values = parse_consumption(y, decimal_comma=False)
    unreadable = keep & ~(parsed & np.isfinite(values))
    if unreadable.any():
        row = int(np.flatnonzero(unreadable)[0])
        owner = stored[int(owners[row])]
        line = row - int(np.flatnonzero(owners == owners[row])[0]) + 2
        raise UnusableInputError(
            f"the stored history of customer {owner.customer_id} ({owner.customer_id}.csv) "
            f"has an unreadable row at line {line}: ds={ds[row].as_py()!r}, "
            f"y={y[row].as_py()!r}. Fix or remove that history file and run the upload again."
        )
    codes = np.array([stored_file.code for stored_file in stored], dtype=np.int64)[owners]
    return Totals.of(codes[keep], frequency.periods(instants[keep]), values[keep])


def customer_file(folder: Path, customer_id: str) -> Path:
    """``folder/{customer_id}.csv``, refusing any id that is not a valid customer id (so the
    name never holds a path separator)."""
    return folder / f"{validate_customer_id(customer_id)}{CUSTOMER_FILE_SUFFIX}"


def _read_file(folder: Path, code: int, customer_id: str) -> _StoredFile | None:
    path = customer_file(folder, customer_id)
    if not path.is_file():
        return None
    header, _, body = path.read_bytes().removeprefix(UTF8_BOM).partition(b"\n")
    if not header.strip() and not body.strip():
        return None
    names = tuple(name.strip().lower() for name in header.decode("utf-8", "replace").split(","))
    if names != HISTORY_COLUMNS:
        raise UnusableInputError(
            f"the stored history of customer {customer_id} ({path.name}) has the header "
            f"{header[:80].decode('utf-8', 'replace').strip()!r}, not 'ds,y'. "
            "Fix or remove that history file and run the upload again."
        )
    if not body.strip():
        return None
    if not body.endswith(b"\n"):
        body += b"\n"
    return _StoredFile(code, customer_id, body, body.count(b"\n"))


def _parse(buffer: bytes, stored: list[_StoredFile]) -> pa.Table:
    malformed: list[int] = []

    def on_invalid_row(row: pcsv.InvalidRow) -> str:
        malformed.append(row.number)
        return "skip"

    table = pcsv.read_csv(
        pa.py_buffer(buffer),
        read_options=pcsv.ReadOptions(column_names=list(HISTORY_COLUMNS), use_threads=False),
        parse_options=pcsv.ParseOptions(
            ignore_empty_lines=False, invalid_row_handler=on_invalid_row
        ),
        convert_options=pcsv.ConvertOptions(
            column_types=dict.fromkeys(HISTORY_COLUMNS, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    if malformed or table.num_rows != sum(stored_file.rows for stored_file in stored):
        ends = np.cumsum([stored_file.rows for stored_file in stored])
        first = malformed[0] - 1 if malformed else int(ends[-1]) - 1
        owner = stored[int(np.searchsorted(ends, first, side="right"))]
        raise UnusableInputError(
            f"the stored history of customer {owner.customer_id} ({owner.customer_id}.csv) "
            "is not a two-column ds,y CSV. Fix or remove that history file and run the "
            "upload again."
        )
    return table


def merge(stored: Totals, uploaded: Totals) -> tuple[Totals, int]:
    """Stored and uploaded totals together; where both have a period, the upload wins.

    Returns the merged totals (sorted by customer, then period) and how many stored
    periods the upload replaced.
    """
    if len(stored) == 0:
        return uploaded, 0
    codes = np.concatenate([stored.codes, uploaded.codes])
    periods = np.concatenate([stored.periods, uploaded.periods])
    values = np.concatenate([stored.values, uploaded.values])
    from_upload = np.concatenate([np.zeros(len(stored), np.int8), np.ones(len(uploaded), np.int8)])
    order = np.lexsort((from_upload, periods, codes))
    codes, periods, values = codes[order], periods[order], values[order]
    # Each (customer, period) appears at most twice, the uploaded one last: keep the last.
    last = np.ones(len(codes), dtype=np.bool_)
    last[:-1] = (codes[1:] != codes[:-1]) | (periods[1:] != periods[:-1])
    return Totals(codes[last], periods[last], values[last]), int((~last).sum())
