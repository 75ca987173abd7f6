"""Finding rows that repeat an earlier accepted reading (same customer, same instant).

A history shard's accepted rows at a time (fleetcast_processing.spill): every customer's
readings are in its shard, so a repeat is always found with its original.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# key = customer code << 41 | milliseconds since 2000-01-01: 41 bits of milliseconds last
# until 2069 and 22 bits of code allow 4 million customers. Two readings of one customer
# less than a millisecond apart count as the same reading.
_MS_BITS = 41
_EPOCH_2000_US = 946_684_800_000_000
MAX_CUSTOMERS = 1 << (63 - _MS_BITS)


def reading_keys(
    codes: npt.NDArray[np.int64], instants_us: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Keys for (customer code, instant) pairs; instants must already be 2000 or later."""
    milliseconds = (instants_us - _EPOCH_2000_US) // 1000
    return (codes << _MS_BITS) | milliseconds


def is_strictly_increasing(values: npt.NDArray[np.int64]) -> bool:
    return bool(np.all(values[1:] > values[:-1]))


@dataclass(frozen=True)
class Deduplicated:
    """Of one shard's accepted rows: those kept and those repeating an earlier reading."""

    # Positions of the rows kept, in (customer code, instant) order, and their keys
    # (:func:`reading_keys`).
    kept: npt.NDArray[np.int64]
    keys: npt.NDArray[np.int64]
    # Positions of the repeats, and for each the line of the reading that was kept.
    repeated: npt.NDArray[np.int64]
    original_line: npt.NDArray[np.int64]


def deduplicate(
    codes: npt.NDArray[np.int64],
    instants_us: npt.NDArray[np.int64],
    lines: npt.NDArray[np.int64],
) -> Deduplicated:
    """Keep the first (lowest line) of the rows that share a customer and instant.

    The rows are in file order, so a stable sort by key puts each key's first line first.
    """
    keys = reading_keys(codes, instants_us)
    if is_strictly_increasing(keys):  # the usual sorted upload: nothing repeats
        empty = np.zeros(0, dtype=np.int64)
        return Deduplicated(np.arange(len(keys), dtype=np.int64), keys, empty, empty)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.concatenate([[True], sorted_keys[1:] != sorted_keys[:-1]])
    if first.all():  # none repeated, only out of order (customers come in file order)
        empty = np.zeros(0, dtype=np.int64)
        return Deduplicated(order, sorted_keys, empty, empty)
    group = np.cumsum(first) - 1
    kept = order[first]
    return Deduplicated(kept, sorted_keys[first], order[~first], lines[kept][group[~first]])
