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

Segments are recycled: one whose records are all in DuckDB is renamed to a spare
(``spare-<n>.log``), and the next segment is written over it rather than into a new file.
On the machine the benchmarks run on, writing a new file cost the kernel ~7 ms a MB (new pages,
and a metadata commit at every fsync); writing over pages it has cached, ~0.1 ms. So a recycled
segment's end holds records of its last life, and each record's CRC starts from its segment's
number (:func:`_crc`): those old records do not check, and replay stops where the new ones
end. Records of spools written before recycling (CRC from 0) are read too; a segment holding
any is deleted when released, never recycled. A spool written this way is read by toolmeter
versions that recycle: stop a receiver cleanly (it writes its spool out) before going back to
an older one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import BinaryIO

from collector.errors import StoreError

_HEADER = struct.Struct(">IBI")

TRACES_PROTOBUF = 1
TRACES_JSON = 2
LOGS_PROTOBUF = 3
LOGS_JSON = 4

SEGMENT_BYTES = 16 * 1024 * 1024
"""A new segment starts once the current one is this large (about a slice the receiver writes
at once: a segment is released, and recycled, soon after it is full)."""
SPARES = 4
"""Released segments kept to be written over (see the module's docstring); at most this many
segments' bytes of disk beyond the spool's unwritten requests, while the receiver runs."""

SET_ASIDE_MAX = 100
"""Request bodies kept in a spool's ``rejected/`` folder at most."""
_KIND_SUFFIX = {TRACES_PROTOBUF: "traces.pb", TRACES_JSON: "traces.json", LOGS_PROTOBUF: "logs.pb",
                LOGS_JSON: "logs.json"}  # fmt: skip
_KINDS = frozenset(_KIND_SUFFIX)
"""The record kinds a spool holds."""

_sync = getattr(os, "fdatasync", os.fsync)
"""The body's bytes and the file's size, not its times (a metadata commit less per request)."""


def _segment_name(n: int) -> str:
    return f"spool-{n:08d}.log"


def _crc(body: bytes, segment: int) -> int:
    """A record's CRC: it starts from the segment's number, so a record left from a recycled
    segment's last life does not check in its new one."""
    return zlib.crc32(body, (segment + 1) & 0xFFFFFFFF)


class Spool:
    """Append-only segments in one folder; one writer process."""

    def __init__(self, folder: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.segment_bytes = segment_bytes
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()
        self._spares = sorted(f for f in os.listdir(folder) if f.startswith("spare-") and f.endswith(".log"))
        self._closed = False
        self._prepared = 0
        self._file: BinaryIO
        self._recyclable: set[int] = set()
        """Segments this spool began itself: they hold its records only, so may be recycled."""
        self._syncing = False
        """Whether an appender is syncing for every record written until it began (see :meth:`append`)."""
        self._sync_done = threading.Condition(self._lock)
        """Notified when a sync ends, or records are cut: appenders waiting on one see whether it covered theirs."""
        self.syncs = 0
        """How many syncs the appends took (fewer than appends when they came together)."""
        self._cuts = 0
        """How many times unsynced records were cut off after a failed sync (see :meth:`_cut_unsynced`)."""
        self._waiting: collections.deque[tuple[tuple[int, int], Callable[[tuple[int, int]], None]]] = (
            collections.deque()
        )
        """(end, ``on_synced``) of the records written and not yet synced, in the spool's order."""
        segments = self.segments()
        if segments:
            self._current = segments[-1]
            self._repair(segments[-1])
            self._file = open(self._path(self._current), "ab")  # noqa: SIM115 (kept open for appends)
        else:
            self._current = -1
            self._begin_segment()
        self._synced = (self._current, self._file.tell())
        """(segment, offset) up to which the spool is on disk: what it held at start was synced then."""

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

    def append(
        self, kind: int, body: bytes, on_synced: Callable[[tuple[int, int]], None] | None = None
    ) -> tuple[int, int]:
        """Write one record and return (segment, offset after it) once it is synced to disk.

        Appends that come together share a sync (group commit): the record is written under
        the spool's lock, then one appender at a time syncs the file for every record written
        until then, and an appender whose record a sync already covered returns without one.
        A sync took ~0.4 ms on the machine the benchmarks run on, ten times the write of a
        100 KB request, and takes milliseconds on a disk that honours it: with a sync of its
        own for every request, the sync was the ceiling of a receiver that many exporters send
        to at once (``benchmarks/bench_spool.py``).

        ``on_synced`` is called with the record's position once it is synced, holding the
        spool's lock, record after record in the spool's order, whatever order their appends
        return in (the receiver queues the record for measuring there: a slice's progress is
        its last record's position, so a record queued behind a later one would be skipped and
        its segment released). It is not called for a record a failed sync cut off; it must be
        quick and must not raise.

        Raises:
            StoreError: the disk refused the write or the sync; the request must not be acknowledged.
        """
        with self._lock:
            start = None
            try:
                if self._file.tell() >= self.segment_bytes:
                    self._sync_current()  # the full segment's records are all on disk before it is left
                    self._file.close()
                    self._begin_segment()
                start = self._file.tell()
                self._file.write(_HEADER.pack(len(body), kind, _crc(body, self._current)))
                self._file.write(body)  # two writes: no copy of a large body
                self._file.flush()
            except OSError as e:
                if start is None:  # the full segment's sync failed
                    self._cut_unsynced()
                else:
                    self._undo(start)
                raise StoreError(f"cannot write to the spool in {self.folder}: {e.strerror}") from e
            mine = (self._current, self._file.tell())
            cuts = self._cuts
            if on_synced is not None:
                self._waiting.append((mine, on_synced))
        self._sync_to(mine, cuts)
        return mine

    def _sync_to(self, mine: tuple[int, int], cuts: int) -> None:
        """Return once the record ending at ``mine`` is on disk (see :meth:`append`).

        One appender syncs at a time; the others wait for its sync to end and return if it
        covered their record, else one of them syncs next. The sync runs outside ``_lock``,
        so appenders keep writing meanwhile and the next sync covers them all, and on a
        duplicate of the file's descriptor, which stays valid when an appender starts a new
        segment and closes this one meanwhile."""
        with self._lock:
            while True:
                if self._synced >= mine:
                    return  # a sync that began after this record was written covered it
                if self._cuts != cuts:  # a failed sync cut it off, with every unsynced record
                    raise StoreError(f"cannot sync the spool in {self.folder}: an earlier sync failed")
                if not self._syncing:
                    break
                self._sync_done.wait()
            try:
                fd = os.dup(self._file.fileno())
            except OSError as e:  # out of descriptors: no sync began, so none is waited for; the
                # record stays, handed on by the next sync (its resend is then a duplicate, ignored)
                raise StoreError(f"cannot sync the spool in {self.folder}: {e.strerror}") from e
            upto = (self._current, self._file.tell())
            self._syncing = True
        synced = False
        try:
            _sync(fd)
            synced = True
        except OSError as e:
            raise StoreError(f"cannot sync the spool in {self.folder}: {e.strerror}") from e
        finally:
            os.close(fd)
            with self._lock:  # whatever happened: the next appender may sync
                self._syncing = False
                try:
                    if synced:
                        self._synced_to(upto)
                    elif self._current == upto[0]:  # else a new segment began, having synced this one
                        self._cut_unsynced()
                finally:
                    self._sync_done.notify_all()

    def _sync_current(self) -> None:
        """Sync the current segment (holding ``_lock``): every record written to it so far is on disk."""
        upto = (self._current, self._file.tell())
        _sync(self._file.fileno())
        self._synced_to(upto)
        self._sync_done.notify_all()

    def _synced_to(self, upto: tuple[int, int]) -> None:
        """Note a sync of every record up to ``upto`` (holding ``_lock``) and hand those records on."""
        self.syncs += 1
        self._synced = max(self._synced, upto)
        waiting = self._waiting
        while waiting and waiting[0][0] <= self._synced:
            end, on_synced = waiting.popleft()
            on_synced(end)

    def _cut_unsynced(self) -> None:
        """After a failed sync (holding ``_lock``), cut the current segment back to what is known to
        be on disk: after a failed ``fsync`` Linux may report the next one clean though the data
        never got there, so nothing written before it is acknowledged; the appenders waiting on
        those records see ``_cuts`` change and answer 503, and their exporters send them again."""
        segment, offset = self._synced
        self._cuts += 1
        self._waiting.clear()  # every record not synced yet was in this segment, after offset
        self._undo(offset if segment == self._current else 0)
        self._sync_done.notify_all()

    def _begin_segment(self) -> None:
        """Start the next segment (holding ``_lock``, or at start): over a spare when there is one."""
        self._current += 1
        path = self._path(self._current)
        while self._spares:
            try:
                os.replace(os.path.join(self.folder, self._spares.pop()), path)
            except OSError:
                continue  # gone (deleted by hand): the next one, or a new file
            self._file = open(path, "r+b")  # noqa: SIM115 (written from its start, over its last life)
            break
        else:
            self._file = open(path, "ab")  # noqa: SIM115
        self._recyclable.add(self._current)
        self._sync_folder()  # the new name lasts: what fsync-ed records are in must be found at replay

    def prepare_spares(self) -> None:
        """Write spares ahead, as zeros (a receiver does this in the background as it starts).

        A receiver that runs for days writes over recycled segments; this lets its first
        :data:`SPARES` segments do so too, which a burst right after a start gains most from.
        Costs :data:`SPARES` segments of disk while the receiver runs (:meth:`close` deletes them).
        """
        zeros = bytes(1024 * 1024)
        while True:
            with self._lock:
                if self._closed or len(self._spares) >= SPARES:
                    return
                self._prepared += 1
                name = f"spare-new-{self._prepared:04d}.log"
            path = os.path.join(self.folder, name)
            try:
                with open(path, "xb") as f:
                    for _ in range(-(-self.segment_bytes // len(zeros))):
                        f.write(zeros)
                    f.flush()
                    os.fsync(f.fileno())
            except FileExistsError:
                continue  # one left by an earlier run: it is a spare already
            except OSError:
                with contextlib.suppress(OSError):
                    os.remove(path)
                return  # no room to spare: segments are written as new files, as without spares
            with self._lock:
                if self._closed:
                    with contextlib.suppress(OSError):
                        os.remove(path)
                    return
                self._spares.insert(0, name)

    def _sync_folder(self) -> None:
        with contextlib.suppress(OSError):  # not every platform opens a folder
            fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

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
                if kind not in _KINDS:
                    return  # no record: the zeros of a prepared spare (an empty body's CRC from 0 is 0)
                body = f.read(length)
                # the CRC from 0 (a spool from before recycling) only when the segment's does not check
                if len(body) < length or (crc != _crc(body, n) and crc != zlib.crc32(body)):
                    return  # torn tail (never acknowledged), or the end of a recycled segment's records
                pos += _HEADER.size + length
                yield n, pos, kind, body

    def replay(self, segment: int, offset: int) -> Iterator[tuple[int, int, int, bytes]]:
        """Every record after (segment, offset): (segment, end offset, kind, body)."""
        for n in self.segments():
            if n < segment:
                continue
            yield from self._records(n, offset if n == segment else 0)

    def release(self, segment: int) -> None:
        """Let go of the segments before ``segment``, everything in them being in DuckDB: kept as
        spares to write over (:data:`SPARES` at most), else deleted."""
        with self._lock:
            for n in self.segments():
                if n >= segment or n == self._current:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    if n in self._recyclable and len(self._spares) < SPARES:
                        spare = f"spare-{n:08d}.log"
                        os.replace(self._path(n), os.path.join(self.folder, spare))
                        self._spares.insert(0, spare)
                    else:
                        os.remove(self._path(n))
                self._recyclable.discard(n)

    def close(self) -> None:
        """Close the current segment and delete the spares: a stopped receiver holds no disk but
        its unwritten requests."""
        with self._lock:
            self._closed = True
            self._file.close()
            for spare in self._spares:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.folder, spare))
            self._spares.clear()
