"""A durable, append-only spool of accepted OTLP request bodies.

The receiver acknowledges a request only once its body is here and ``fsync``-ed: that is
what "safe" means. Measuring and writing to DuckDB happen later, in the background; the
position up to which the spool has been written to DuckDB is stored in DuckDB itself, in
the same transaction as the rows (``receiver_progress``). After a crash, the receiver
replays the spool from that position. Rows are keyed by (trace id, span id) and inserted
with ``INSERT OR IGNORE``, so a record replayed twice is not counted twice.

File format: segments ``spool-<n>.log``; each record is a 9-byte header (big-endian body
length, kind, CRC-32 of the body) and the body. A torn record at the end of the last
segment (a crash during ``append``, before the acknowledgement) is cut off at recovery.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Iterator

from collector.errors import StoreError

_HEADER = struct.Struct(">IBI")

TRACES_PROTOBUF = 1
TRACES_JSON = 2
LOGS_PROTOBUF = 3
LOGS_JSON = 4

SEGMENT_BYTES = 64 * 1024 * 1024

SET_ASIDE_MAX = 100
"""Request bodies kept in a spool's ``rejected/`` folder at most."""
_KIND_SUFFIX = {TRACES_PROTOBUF: "traces.pb", TRACES_JSON: "traces.json", LOGS_PROTOBUF: "logs.pb",
                LOGS_JSON: "logs.json"}  # fmt: skip
"""A new segment starts once the current one is this large."""


def _segment_name(n: int) -> str:
    return f"spool-{n:08d}.log"


class Spool:
    """Append-only segments in one folder; one writer process."""

    def __init__(self, folder: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        segments = self.segments()
        self._current = segments[-1] if segments else 0
        if segments:
            self._repair(segments[-1])
        self._file = open(self._path(self._current), "ab")  # noqa: SIM115 (kept open for appends)

    def _path(self, n: int) -> str:
        return os.path.join(self.folder, _segment_name(n))

    def segments(self) -> list[int]:
        names = [f for f in os.listdir(self.folder) if f.startswith("spool-") and f.endswith(".log")]
        return sorted(int(f[6:-4]) for f in names)

    def _repair(self, n: int) -> None:
        """Cut a torn record off the end of segment ``n``."""
        good = 0
        for _, end, _, _ in self._records(n, 0):
            good = end
        if os.path.getsize(self._path(n)) != good:
            with open(self._path(n), "r+b") as f:
                f.truncate(good)

    def append(self, kind: int, body: bytes) -> tuple[int, int]:
        """Write one record and fsync it; return (segment, offset after it).

        Raises:
            StoreError: the disk refused the write; the request must not be acknowledged.
        """
        header = _HEADER.pack(len(body), kind, zlib.crc32(body))
        with self._lock:
            start = None
            try:
                if self._file.tell() >= self.segment_bytes:
                    self._file.close()
                    self._current += 1
                    self._file = open(self._path(self._current), "ab")  # noqa: SIM115
                start = self._file.tell()
                self._file.write(header)  # two writes: no copy of a large body
                self._file.write(body)
                self._file.flush()
                os.fsync(self._file.fileno())
                return self._current, self._file.tell()
            except OSError as e:
                self._undo(start)
                raise StoreError(f"cannot write to the spool in {self.folder}: {e.strerror}") from e

    def set_aside(self, segment: int, offset: int, kind: int, body: bytes) -> str:
        """Keep the body of a request the store refused in ``rejected/`` (for a report; the
        spool moves on past it); returns where, or why it was not kept. At most
        :data:`SET_ASIDE_MAX` are kept: a fault that refuses every request must not fill the disk."""
        folder = os.path.join(self.folder, "rejected")
        try:
            os.makedirs(folder, exist_ok=True)
            if len(os.listdir(folder)) >= SET_ASIDE_MAX:
                return f"its body was not kept: {folder} holds {SET_ASIDE_MAX} set-aside requests already"
            path = os.path.join(folder, f"request-{segment:08d}-{offset:012d}.{_KIND_SUFFIX.get(kind, 'bin')}")
            with open(path, "wb") as f:
                f.write(body)
            return f"its body is kept in {path}"
        except OSError as e:
            return f"its body could not be kept in {folder}: {e.strerror}"

    def _undo(self, start: int | None) -> None:
        """Forget a record that failed half-way (holding ``_lock``).

        Its bytes may sit in the file's buffer or half on disk; flushed later, before the next
        record, they would read as a torn record and hide every record after it at replay. So
        the buffer is dropped (closing discards it even when the flush fails), the segment cut
        back to where the record began, and the file opened again.
        """
        with contextlib.suppress(OSError):
            self._file.close()
        if start is not None:
            with contextlib.suppress(OSError):
                os.truncate(self._path(self._current), start)
        with contextlib.suppress(OSError):
            self._file = open(self._path(self._current), "ab")  # noqa: SIM115

    def _records(self, n: int, offset: int) -> Iterator[tuple[int, int, int, bytes]]:
        try:
            f = open(self._path(n), "rb")  # noqa: SIM115
        except FileNotFoundError:
            return
        with f:
            f.seek(offset)
            pos = offset
            while True:
                header = f.read(_HEADER.size)
                if len(header) < _HEADER.size:
                    return
                length, kind, crc = _HEADER.unpack(header)
                body = f.read(length)
                if len(body) < length or zlib.crc32(body) != crc:
                    return  # torn tail: never acknowledged
                pos += _HEADER.size + length
                yield n, pos, kind, body

    def replay(self, segment: int, offset: int) -> Iterator[tuple[int, int, int, bytes]]:
        """Every record after (segment, offset): (segment, end offset, kind, body)."""
        for n in self.segments():
            if n < segment:
                continue
            yield from self._records(n, offset if n == segment else 0)

    def release(self, segment: int) -> None:
        """Delete segments before ``segment``: everything in them is in DuckDB."""
        for n in self.segments():
            if n < segment and n != self._current:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(n))

    def close(self) -> None:
        with self._lock:
            self._file.close()
