"""Finding rows that repeat an earlier accepted reading (same customer, same instant).

Every accepted reading is remembered as one 64-bit key plus the line it came from (12
bytes), in a few sorted runs merged like a binary counter, so checking a block costs a
handful of binary searches rather than a Python set of millions of tuples. This is the
only state that grows with the upload's row count rather than with customers x periods.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


_Run = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint32]]
# Lines are kept as 32-bit numbers: 12 bytes per accepted reading in all.
MAX_LINE = np.iinfo(np.uint32).max


@dataclass
class SeenReadings:
    """Keys of accepted readings and the line each was first accepted from."""

    _runs: list[_Run] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(keys) for keys, _ in self._runs)

    def first_lines(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The line each key was accepted from, -1 for keys not seen before."""
        found = np.full(len(keys), -1, dtype=np.int64)
        for run_keys, run_lines in self._runs:
            at = np.searchsorted(run_keys, keys)
            inside = at < len(run_keys)
            hit = np.zeros(len(keys), dtype=np.bool_)
            hit[inside] = run_keys[at[inside]] == keys[inside]
            found[hit] = run_lines[at[hit]]
        return found

    def add(self, keys: npt.NDArray[np.int64], lines: npt.NDArray[np.int64]) -> None:
        """Remember new keys (unique, sorted, none seen before)."""
        if len(keys) == 0:
            return
        if int(lines.max()) > MAX_LINE:
            raise ValueError(f"line numbers above {MAX_LINE:,} are not supported")
        self._runs.append((keys, lines.astype(np.uint32)))
        # Merge while the newest run is at least half the size of the one before it: that
        # keeps about log2(n) runs, and each key is merged about log2(n) times.
        while len(self._runs) > 1 and 2 * len(self._runs[-1][0]) >= len(self._runs[-2][0]):
            newer = self._runs.pop()
            self._runs.append(_merge(self._runs.pop(), newer))


def _merge(older: _Run, newer: _Run) -> _Run:
    """Two sorted runs with no key in common as one sorted run, without a full sort."""
    (older_keys, older_lines), (newer_keys, newer_lines) = older, newer
    if older_keys[-1] < newer_keys[0]:  # sorted uploads: the newer run simply follows
        return np.concatenate([older_keys, newer_keys]), np.concatenate([older_lines, newer_lines])
    size = len(older_keys) + len(newer_keys)
    at = np.searchsorted(older_keys, newer_keys) + np.arange(len(newer_keys))
    from_older = np.ones(size, dtype=np.bool_)
    from_older[at] = False
    keys = np.empty(size, dtype=np.int64)
    keys[at] = newer_keys
    keys[from_older] = older_keys
    lines = np.empty(size, dtype=np.uint32)
    lines[at] = newer_lines
    lines[from_older] = older_lines
    return keys, lines


def is_strictly_increasing(values: npt.NDArray[np.int64]) -> bool:
    return bool(np.all(values[1:] > values[:-1]))


@dataclass(frozen=True)
class Duplicates:
    """For the rows given to :func:`find_duplicates`: which repeat a reading, and of which line."""

    repeated: npt.NDArray[np.bool_]
    original_line: npt.NDArray[np.int64]


def find_duplicates(
    seen: SeenReadings, keys: npt.NDArray[np.int64], lines: npt.NDArray[np.int64]
) -> Duplicates:
    """Mark rows whose key was accepted earlier (in this block or before) and remember the rest.

    ``keys`` and ``lines`` are the block's otherwise-accepted rows, in file order.
    """
    if is_strictly_increasing(keys):  # the usual sorted upload: no repeats inside the block
        unique_keys, first_index = keys, np.arange(len(keys))
        inverse = first_index
    else:
        unique_keys, first_index, inverse = np.unique(keys, return_index=True, return_inverse=True)
    first_in_block = np.zeros(len(keys), dtype=np.bool_)
    first_in_block[first_index] = True
    earlier = seen.first_lines(unique_keys)
    block_first_lines = lines[first_index]
    original = np.where(earlier >= 0, earlier, block_first_lines)[inverse]
    repeated = ~first_in_block | (earlier[inverse] >= 0)
    is_new = earlier < 0
    seen.add(unique_keys[is_new], block_first_lines[is_new])
    return Duplicates(repeated, original)
