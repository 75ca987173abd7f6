"""The upload's accepted readings, set aside per history shard while the file is read.

The job reads the upload once, block by block. What it keeps of each accepted row (the
customer's code, the instant, the value, the line) is appended to one Arrow stream per
history shard, on the job's volume; the rows' own timestamp and consumption text, which
only rejected.csv's duplicate rows need, goes once into one Arrow file in file order,
each block as it was read, and the shards' rows say where theirs is. The shards are then
taken one at a time: their duplicates found, their readings merged into the stored
history. Memory holds one block while reading and one shard's readings after, whatever
the size of the upload: a two-year backfill of 100,000 customers (72 million rows) held
about 95 bytes a reading in memory before, 6.5 GiB.

Compressed only where the volume needs it (:func:`compress_for`): uncompressed, a daily
reading takes about 74 bytes of the volume, 40 in its shard and the rest its text (a
72-million-row upload: about 5.4 GB); LZ4 makes it about 23, but took a third of the job's
time on a file of ten readings a day. The text, which only the report of duplicate rows
needs, is read back memory-mapped, and only the blocks those rows are in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fleetcast_contracts.shards import HISTORY_SHARDS, history_shard_of

SCHEMA = pa.schema(
    [
        ("code", pa.int64()),
        ("instant", pa.int64()),  # microseconds since 1970, UTC
        ("value", pa.float64()),
        ("line", pa.int64()),
        ("row", pa.int64()),  # where the row's text is in the text file
    ]
)
# As written in the upload, for rejected.csv.
TEXT_SCHEMA = pa.schema([("timestamp", pa.string()), ("consumption", pa.string())])
TEXT_FILE = "text.arrow"

# The spill's bytes for each byte of CSV when it is not compressed (74 for a daily reading
# of 32), taken high; and a gzip upload's CSV bytes for each of its own (4 for `fleetcast
# generate`'s files, 5-10 for most CSV), taken high too.
SPILL_BYTES_PER_CSV_BYTE = 2.5
GZIP_RATIO = 10
# A block with more runs of one customer's rows than this (an upload not sorted by
# customer) is sorted by shard first, so that each shard gets one batch of it.
_MOST_RUNS = 2 * HISTORY_SHARDS
_LZ4 = pa.ipc.IpcWriteOptions(compression="lz4")
_PLAIN = pa.ipc.IpcWriteOptions()


def compress_for(upload_bytes: int, gzip: bool, free_bytes: int) -> bool:
    """Whether the spill of an upload of ``upload_bytes`` (gzip or not) must be compressed
    so as to leave at least half of the volume's ``free_bytes`` to the job's outputs."""
    csv_bytes = upload_bytes * (GZIP_RATIO if gzip else 1)
    return csv_bytes * SPILL_BYTES_PER_CSV_BYTE > free_bytes / 2


class ShardSpill:
    """Accepted readings, appended in file order to the stream of their customer's shard."""

    def __init__(self, folder: Path, compressed: bool = False) -> None:
        self._folder = folder
        self._options = _LZ4 if compressed else _PLAIN
        folder.mkdir(parents=True, exist_ok=True)
        self._writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
        self._sinks: list[pa.NativeFile] = []
        self._shard_of_code = np.zeros(0, dtype=np.int64)
        self._seen = np.zeros(0, dtype=np.bool_)
        self._text_sink = pa.OSFile(str(folder / TEXT_FILE), "wb")
        self._text_writer = pa.ipc.new_file(self._text_sink, TEXT_SCHEMA, options=self._options)
        # Where each block's text starts in the text file, and where the next one will.
        self._text_starts = [0]
        self._text: pa.ipc.RecordBatchFileReader | None = None

    def add(
        self,
        customer_ids: list[str],
        codes: npt.NDArray[np.int64],
        instants: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        lines: npt.NDArray[np.int64],
        text: tuple[pa.Array, pa.Array],
        rows: npt.NDArray[np.int64],
    ) -> None:
        """Append accepted rows; ``codes`` index ``customer_ids`` (the job's, growing).
        ``text`` is the block's timestamp and consumption text, every row's, and ``rows``
        where the accepted rows are in it."""
        if len(codes) == 0:
            return
        self._know_shards(customer_ids)
        self._text_writer.write_batch(pa.record_batch(list(text), schema=TEXT_SCHEMA))
        rows = rows + self._text_starts[-1]
        self._text_starts.append(self._text_starts[-1] + len(text[0]))
        columns = (codes, instants, values, lines, rows)
        runs = np.flatnonzero(np.concatenate([[True], codes[1:] != codes[:-1]]))
        if len(runs) <= _MOST_RUNS:
            # An upload sorted by customer: each customer's run of rows goes to its shard
            # as it is, in file order, with no copy.
            first_codes = codes[runs]
            self._seen[first_codes] = True
            batch = pa.record_batch(list(columns), schema=SCHEMA)
            sizes = np.diff(runs, append=len(codes))
            for shard, start, size in zip(
                self._shard_of_code[first_codes].tolist(),
                runs.tolist(),
                sizes.tolist(),
                strict=True,
            ):
                self._writer(shard).write_batch(batch.slice(start, size))
            return
        self._seen[codes] = True
        shards = self._shard_of_code[codes]
        # A stable sort keeps each shard's rows in file order: the first of two readings of
        # one instant is the one kept.
        order = np.argsort(shards, kind="stable")
        sizes = np.bincount(shards, minlength=HISTORY_SHARDS)
        starts = np.cumsum(sizes) - sizes
        # One batch, sliced per shard: each slice is a view, written as its own batch.
        batch = pa.record_batch([column[order] for column in columns], schema=SCHEMA)
        for shard in np.flatnonzero(sizes).tolist():
            self._writer(shard).write_batch(batch.slice(starts[shard], sizes[shard]))

    def _know_shards(self, customer_ids: list[str]) -> None:
        known = len(self._shard_of_code)
        if len(customer_ids) > known:
            new = [history_shard_of(customer_id) for customer_id in customer_ids[known:]]
            self._shard_of_code = np.concatenate(
                [self._shard_of_code, np.array(new, dtype=np.int64)]
            )
            self._seen = np.concatenate([self._seen, np.zeros(len(new), dtype=np.bool_)])

    def _writer(self, shard: int) -> pa.ipc.RecordBatchStreamWriter:
        writer = self._writers.get(shard)
        if writer is None:
            sink = pa.OSFile(str(self._path(shard)), "wb")
            self._sinks.append(sink)
            writer = self._writers[shard] = pa.ipc.new_stream(sink, SCHEMA, options=self._options)
        return writer

    def _path(self, shard: int) -> Path:
        return self._folder / f"readings-{shard:04d}.arrows"

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        for sink in self._sinks:
            sink.close()
        self._text_writer.close()
        self._text_sink.close()

    @property
    def codes(self) -> npt.NDArray[np.int64]:
        """The customer codes with readings, in order."""
        return np.flatnonzero(self._seen)

    @property
    def shards(self) -> list[int]:
        """The shards with readings, in order."""
        return sorted(self._writers)

    def read(self, shard: int) -> pa.Table:
        """A shard's readings in file order (call after :meth:`close`)."""
        with pa.OSFile(str(self._path(shard))) as source:
            return pa.ipc.open_stream(source).read_all()

    def text(self, rows: npt.NDArray[np.int64]) -> tuple[pa.Array, pa.Array]:
        """The timestamp and consumption text of ``rows`` (values of the shards' ``row``),
        in their order (call after :meth:`close`). Only the blocks they are in are read."""
        if len(rows) == 0:
            return pa.array([], pa.string()), pa.array([], pa.string())
        if self._text is None:
            self._text = pa.ipc.open_file(pa.memory_map(str(self._folder / TEXT_FILE)))
        starts = np.asarray(self._text_starts)
        batch_of = np.searchsorted(starts, rows, side="right") - 1
        order = np.argsort(batch_of, kind="stable")
        # The rows of each block the text file holds, each block read once.
        groups = np.split(order, np.flatnonzero(np.diff(batch_of[order])) + 1)
        pieces = [
            self._text.get_batch(int(batch_of[group[0]])).take(
                pa.array(rows[group] - starts[batch_of[group[0]]])
            )
            for group in groups
        ]
        table = pa.Table.from_batches(pieces, schema=TEXT_SCHEMA)
        back = pa.array(np.argsort(order, kind="stable"))
        return (
            table.column("timestamp").combine_chunks().take(back),
            table.column("consumption").combine_chunks().take(back),
        )
