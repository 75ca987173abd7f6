"""An upload's bytes: what kind of file it is (told by its first bytes, not its name),
decompressed when it is gzip, with every read error turned into a message that says what
is wrong with the file."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from fleetcast_contracts.processing import MAX_UPLOAD_BYTES_ENV
from fleetcast_processing.errors import UnusableInputError

GZIP_MAGIC = b"\x1f\x8b"
_WHITESPACE = b" \t\r\n\f\v"
UTF8_BOM = b"\xef\xbb\xbf"
# Readings and metadata files alike; the header's most frequent one is the file's.
DELIMITERS = (",", ";", "\t")

# First bytes of formats people upload by mistake, and what to call them in the message.
_OTHER_FORMATS = (
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx workbook is one)"),
    (b"\xd0\xcf\x11\xe0", "an old Excel .xls / OLE2 file"),
    (b"PAR1", "a Parquet file"),
    (b"BZh", "bzip2-compressed"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    (b"%PDF", "a PDF document"),
    (b"\xff\xfe", "UTF-16 text (save it as UTF-8)"),
    (b"\xfe\xff", "UTF-16 text (save it as UTF-8)"),
)


class UploadReader:
    """The upload's decompressed bytes, with read errors turned into readable messages.

    A file with old Mac OS line endings (bare CRs and no LF in its first 64 KiB) is read
    with every CR turned into an LF, so the rest of the reader sees ordinary lines.

    ``max_bytes`` bounds the decompressed size: uploads are processed one at a time, so
    one huge (or highly compressed) file would hold every later upload back.
    """

    _SNIFF_SIZE = 64 * 1024

    def __init__(
        self,
        path: Path,
        stream: io.BufferedIOBase,
        compressed: bool,
        max_bytes: int | None = None,
    ) -> None:
        self.path = path
        self.compressed = compressed
        self.max_bytes = max_bytes
        self._stream = stream
        self.bytes_read = 0
        self.bare_cr_lines = False
        # Bytes read ahead of the caller: ``_pending[_offset:]`` (an offset, not slicing,
        # keeps reading many short lines linear in their size).
        self._offset = 0
        self._pending = self._read_stream(self._SNIFF_SIZE)
        if compressed and self._pending.startswith(GZIP_MAGIC):
            # Otherwise read as text, the inner gzip "contains NUL bytes".
            raise UnusableInputError(
                "the file is gzip-compressed twice (a .gz inside a .gz): decompress it once "
                "and upload the result (a .csv.gz), or upload the plain CSV."
            )
        if b"\r" in self._pending and b"\n" not in self._pending:
            self.bare_cr_lines = True
            self._pending = self._pending.replace(b"\r", b"\n")

    @classmethod
    def open(cls, path: Path, max_bytes: int | None = None) -> UploadReader:
        # The name says nothing reliable about the content: look at the first bytes.
        raw = path.open("rb")
        compressed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream: io.BufferedIOBase = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        try:
            return cls(path, stream, compressed, max_bytes)
        except BaseException:
            stream.close()
            raise

    def close(self) -> None:
        self._stream.close()

    def __enter__(self) -> UploadReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (b"" at the end)."""
        if self._offset < len(self._pending):
            data = self._pending[self._offset :]
            self._pending, self._offset = b"", 0
            return data
        return self._read_stream(size)

    def readline(self, limit: int) -> bytes:
        """One line with its LF, or ``limit`` bytes when no LF comes sooner."""
        while (
            self._pending.find(b"\n", self._offset, self._offset + limit) < 0
            and len(self._pending) - self._offset < limit
        ):
            data = self._read_stream(self._SNIFF_SIZE)
            if not data:
                break
            self._pending = self._pending[self._offset :] + data
            self._offset = 0
        start = self._offset
        end = self._pending.find(b"\n", start, start + limit)
        cut = end + 1 if end >= 0 else min(start + limit, len(self._pending))
        self._offset = cut
        return self._pending[start:cut]

    def skip_blank_lines(self) -> int:
        """Skip lines holding only whitespace; how many were skipped.

        Whole runs of them are skipped at once: a file may start with millions.
        """
        skipped = 0
        while True:
            rest = self._pending[self._offset :]
            text = rest.lstrip(_WHITESPACE)
            blank = rest[: len(rest) - len(text)]
            skipped += blank.count(b"\n")
            if text:
                # Keep the start of the line the text is on.
                self._pending, self._offset = rest, blank.rfind(b"\n") + 1
                return skipped
            self._pending, self._offset = self._read_stream(self._SNIFF_SIZE), 0
            if not self._pending:
                return skipped

    def _read_stream(self, size: int) -> bytes:
        try:
            data = self._stream.read(size)
        except EOFError as error:
            raise self._truncated() from error
        except (gzip.BadGzipFile, zlib.error) as error:
            raise UnusableInputError(
                f"the file starts like gzip but its compressed data is corrupt ({error}). "
                "Compress it again with gzip, or upload the plain CSV."
            ) from error
        self.bytes_read += len(data)
        if self.max_bytes is not None and self.bytes_read > self.max_bytes:
            unpacked = " when decompressed" if self.compressed else ""
            raise UnusableInputError(
                f"the file is larger than the processing limit of {self.max_bytes:,} bytes"
                f"{unpacked} (setting {MAX_UPLOAD_BYTES_ENV}); it was not processed, so that "
                "later uploads are not held up. Split it into smaller files and upload those."
            )
        return data.replace(b"\r", b"\n") if self.bare_cr_lines else data

    def _truncated(self) -> UnusableInputError:
        """What a gzip stream that stops before its end-of-stream marker holds: the reader
        loses the last read's data with the error, so the file is decompressed again for
        the count."""
        size = self.path.stat().st_size
        decompressed = _decompressible_bytes(self.path)
        return UnusableInputError(
            f"the gzip file is truncated: its {size:,} compressed bytes stop before gzip's "
            f"end-of-stream marker, after {decompressed:,} bytes of CSV (the rest of the file "
            "is missing). The upload was probably cut short; upload the complete file again."
        )


def check_first_bytes(first: bytes) -> bytes:
    """The file's first line without its byte order mark; raise when the first bytes are
    those of a format people upload by mistake, naming it."""
    for magic, kind in _OTHER_FORMATS:
        if first.startswith(magic):
            raise UnusableInputError(f"the file is {kind}, not a CSV text file.")
    return first.removeprefix(UTF8_BOM)


def _decompressible_bytes(path: Path, piece: int = 1 << 20) -> int:
    """How many bytes the gzip members of ``path`` decompress to before the data stops,
    counted a piece at a time (never held whole)."""
    total = 0
    inflate = zlib.decompressobj(wbits=31)
    with path.open("rb") as raw:
        while data := raw.read(piece):
            while data:
                try:
                    total += len(inflate.decompress(data, piece))
                except zlib.error:
                    return total
                data = inflate.unconsumed_tail
                if inflate.eof:  # a member ended: the next one starts in unused_data
                    data = inflate.unused_data  # (the tail holds these bytes too)
                    inflate = zlib.decompressobj(wbits=31)
    return total


def sniff_delimiter(header: str) -> str:
    """The delimiter of a file whose header line is ``header``: the one of
    :data:`DELIMITERS` it holds most of (a comma when it holds none)."""
    return max(DELIMITERS, key=header.count) if any(d in header for d in DELIMITERS) else ","
