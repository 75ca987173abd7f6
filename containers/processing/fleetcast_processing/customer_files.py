"""Per-customer ``{customer_id}.csv`` files (``ds,y``): where they live and how they are written."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fleetcast_common.contracts.processing import HISTORY_COLUMNS
from fleetcast_common.ids import validate_customer_id
from fleetcast_common.layout import CUSTOMER_FILE_SUFFIX
from fleetcast_processing.aggregate import Frequency, Totals

HEADER = (",".join(HISTORY_COLUMNS) + "\n").encode()


def customer_file_name(customer_id: str) -> str:
    """``{customer_id}.csv``, refusing any id that is not a valid customer id.

    Valid ids are letters, digits, '_' and '-' only, so the name can never hold a path
    separator or be '.' or '..': joined to a folder it stays directly inside it.
    """
    return f"{validate_customer_id(customer_id)}{CUSTOMER_FILE_SUFFIX}"


def customer_file(folder: Path, customer_id: str) -> Path:
    return folder / customer_file_name(customer_id)


# Customers are formatted in this many groups, so that writing one group's files (on a
# second thread: file creation waits in the kernel) overlaps formatting the next.
_GROUPS = 8


@dataclass(frozen=True)
class _FormattedGroup:
    """Consecutive customers' files: ``text[offsets[i]:offsets[i + 1]]`` is customer i's rows."""

    names: list[str]
    text: memoryview
    offsets: list[int]


def write_customer_files(
    totals: Totals,
    customer_ids: Sequence[str],
    frequency: Frequency,
    folder: Path,
    same_in: Sequence[Path] = (),
) -> int:
    """Write each customer's rows of ``totals`` to ``folder/{customer_id}.csv``.

    Lines are formatted by Arrow many customers at a time into one buffer; each file is a
    header plus a slice of it. ``same_in`` folders get the same files, hard-linked where
    the file system allows (no second copy to write), else copied. Returns the number of
    customers written.
    """
    for output in (folder, *same_in):
        output.mkdir(parents=True, exist_ok=True)
    codes = totals.codes
    if len(codes) == 0:
        return 0
    # Row where each customer starts, then the end: customer i is rows bounds[i]:bounds[i+1].
    bounds = np.append(
        np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]])), len(codes)
    )
    customers = len(bounds) - 1
    folder_name, other_names = str(folder), [str(other) for other in same_in]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="customer-files") as writer:
        writes = []
        for group in np.array_split(np.arange(customers), min(_GROUPS, customers)):
            formatted = _format(totals, customer_ids, frequency, bounds[group[0] : group[-1] + 2])
            writes.append(writer.submit(_write_group, formatted, folder_name, other_names))
        for write in writes:
            write.result()  # raises the writer's error, if any
    return customers


def _format(
    totals: Totals,
    customer_ids: Sequence[str],
    frequency: Frequency,
    bounds: npt.NDArray[np.int64],
) -> _FormattedGroup:
    """Consecutive customers' files; ``bounds`` are their first rows, then the row after."""
    first, last = int(bounds[0]), int(bounds[-1])
    ds = frequency.format(totals.periods[first:last])
    y = pc.cast(pa.array(totals.values[first:last], type=pa.float64()), pa.string())
    lines = pc.binary_join_element_wise(ds, ",", y, "\n", "")
    offset_type = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    line_offsets = np.frombuffer(lines.buffers()[1], dtype=offset_type)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    return _FormattedGroup(
        names=[customer_file_name(customer_ids[int(code)]) for code in totals.codes[bounds[:-1]]],
        text=memoryview(lines.buffers()[2]),
        offsets=line_offsets[bounds - first].tolist(),
    )


def _write_group(group: _FormattedGroup, folder: str, others: Sequence[str]) -> None:
    # Plain strings rather than Path objects: this runs once per customer.
    for index, name in enumerate(group.names):
        rows = group.text[group.offsets[index] : group.offsets[index + 1]]
        written = f"{folder}/{name}"
        _write(written, rows)
        for other in others:
            _link_or_write(written, f"{other}/{name}", rows)


def _write(path: str, rows: memoryview) -> None:
    with open(path, "wb") as output:  # noqa: PTH123 (plain strings, see _write_group)
        output.write(HEADER)
        output.write(rows)


def _link_or_write(source: str, target: str, rows: memoryview) -> None:
    try:
        os.link(source, target)
    except FileExistsError:
        Path(target).unlink()
        _link_or_write(source, target, rows)
    except OSError:  # another file system, or links not supported
        _write(target, rows)
