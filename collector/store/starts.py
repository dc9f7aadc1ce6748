"""Where each trace of a file store's last day begins, kept in memory by the store's writer.

A write that brings model calls or views reads the stored rows of the traces it touches, from
where those traces begin (:mod:`collector.store.reach`). Finding that with a read meant reading
the trace ids of the whole last day at every write (~20 ms a write at 50,000 stored calls, ~50
at 390,000, one-off timings; a busy receiver's day is millions). :class:`TraceStarts` reads the
day once, then keeps, from each write it commits, each trace's earliest time, so a write looks
its traces up instead.

What it holds is only right while nobody else writes the file: another process (a ``toolmeter
ingest``, a ``prune``), or an older version, may write between two of this writer's
transactions. So each transaction first compares the file with how this writer left it (the
file's and its log's size and time, and the row counts of the three tables that place a trace in
time): when they differ, the map is read again when next needed. A trace with rows removed since
(retention) keeps its earlier start: a bound earlier than needed reads more, never less. A lake
has many writers at once and keeps no map.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

MAX_TRACES = 500_000
"""Traces kept at most (~150 bytes each): past it the map is read again, the last day's traces only;
a day of more (millions of calls in short runs) and the writer keeps none: it finds where its
traces begin with a read, as without the map."""

_FIRSTS = pa.schema([("trace_id", pa.string()), ("t", pa.int64())])
TIMED = (("tool_calls", "start_ns"), ("llm_calls", "start_ns"), ("message_views", "llm_start_ns"))
"""The tables whose rows place a trace in time, with their time column (a payload's time is its call's)."""
TIMELESS = " OR ".join(
    f"EXISTS (SELECT 1 FROM {table} WHERE {column} IS NULL)" for table, column in (*TIMED, ("payloads", "start_ns"))
)
"""SQL: whether the store holds rows with no time (written by a version that did not keep one)."""
_COUNTS = "SELECT " + ", ".join(f"(SELECT count(*) FROM {table})" for table, _ in TIMED)
_DAY = " UNION ALL ".join(
    f"SELECT trace_id, {column} AS t FROM {table} WHERE {column} >= {{since}}" for table, column in TIMED
)


class TraceStarts:
    """The earliest stored time of each trace with a row at :attr:`since` or later, in one file store."""

    def __init__(self, path: str) -> None:
        self._files = (path, path + ".wal")
        self._lock = threading.Lock()
        self._first: dict[str, int] | None = None
        """Trace id -> earliest stored time; None: to be read (first use, or the file changed)."""
        self.since = 0
        """The map holds every trace with a stored row at this time or later."""
        self._left: tuple[object, ...] | None = None
        """How this writer left the file after its last transaction (see :meth:`_mark`)."""
        self._pending: dict[str, int] = {}
        self._timeless = False
        """The store holds rows with no time: the map cannot bound the reads (see reach.py)."""
        self._pending_timeless = False
        self._off = False
        """Set for good once the day held more than :data:`MAX_TRACES` traces."""

    @property
    def keeping(self) -> bool:
        """Whether the map is kept now (a write then notes its traces: see :meth:`note`)."""
        return self._first is not None

    @contextlib.contextmanager
    def around(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        """One write transaction on ``con``: the map is dropped when the file is not as this writer
        left it; what the transaction noted is kept once it commits."""
        with self._lock:
            if self._first is not None and not self._as_left(con):
                self._first = None
        committed = False
        try:
            yield
            committed = True
        finally:
            with self._lock:
                self._close(con, committed)

    def _close(self, con: duckdb.DuckDBPyConnection, committed: bool) -> None:
        pending, self._pending = self._pending, {}
        timeless, self._pending_timeless = self._pending_timeless, False
        if not committed or self._first is None:
            self._left = None
            return
        self._timeless = self._timeless or timeless
        _keep_earliest(self._first, pending)
        if len(self._first) > MAX_TRACES:  # read again: the day's traces alone, if it holds few enough
            self._first, self._left = None, None
            return
        try:
            self._left = self._mark(con)  # after the commit, while the file is still attached
        except duckdb.Error:
            self._first, self._left = None, None

    def _as_left(self, con: duckdb.DuckDBPyConnection) -> bool:
        try:
            return self._mark(con) == self._left
        except duckdb.Error:  # cannot tell: taken as changed, so the map is read again when next needed
            return False

    def _mark(self, con: duckdb.DuckDBPyConnection) -> tuple[object, ...]:
        """The file as it is: its and its log's size, time and inode, and the tables' row counts."""
        stats: list[tuple[int, int, int] | None] = []
        for path in self._files:
            try:
                s = os.stat(path)
                stats.append((s.st_size, s.st_mtime_ns, s.st_ino))
            except OSError:
                stats.append(None)
        return (*stats, con.execute(_COUNTS).fetchone())

    def first(self, con: duckdb.DuckDBPyConnection, traces: Iterable[str], since: int) -> tuple[bool, int | None]:
        """(known, the earliest stored time of ``traces`` at ``since`` or later, None when none has
        one); not known (False) when the map cannot say: it does not reach back to ``since``, or
        holds too many traces. Reads the day at ``since`` first when the map is to be read."""
        with self._lock:
            if self._first is None and not self._off:
                self._load(con, since)
            if self._first is None or since < self.since or self._timeless:
                return False, None
            found = [t for t in map(self._first.get, traces) if t is not None]
            return True, max(min(found), since) if found else None

    def _load(self, con: duckdb.DuckDBPyConnection, since: int) -> None:
        table = con.execute(f"SELECT trace_id, min(t) AS t FROM ({_DAY.format(since=since)}) GROUP BY trace_id").arrow()
        if isinstance(table, pa.RecordBatchReader):
            table = table.read_all()
        if table.num_rows > MAX_TRACES:
            self._off = True
            return
        self._first = dict(zip(table.column("trace_id").to_pylist(), table.column("t").to_pylist(), strict=True))
        self.since = since
        row = con.execute(f"SELECT {TIMELESS}").fetchone()
        self._timeless = row is None or bool(row[0])

    def note(self, firsts: Mapping[str, int], timeless: bool) -> None:
        """The earliest time of each trace in a batch being written, and whether some of its rows have
        no time (kept if its transaction commits)."""
        with self._lock:
            self._pending_timeless = self._pending_timeless or timeless
            _keep_earliest(self._pending, firsts)


def _keep_earliest(into: dict[str, int], firsts: Mapping[str, int]) -> None:
    """Each trace of ``firsts`` in ``into`` with the earlier of its two times."""
    for trace, t in firsts.items():
        if t < into.get(trace, t + 1):
            into[trace] = t


def firsts_of(tables: list[pa.Table], views: list[dict[str, object]]) -> tuple[dict[str, int], bool]:
    """The earliest time of each trace in a batch (its tool and model calls' ``start_ns``, its views'
    ``llm_start_ns``), and whether some of them have no time."""
    parts = [pa.table({"trace_id": t.column("trace_id"), "t": t.column("start_ns")}).cast(_FIRSTS) for t in tables]
    if views:
        parts.append(pa.table({"trace_id": [v["trace_id"] for v in views], "t": [v.get("llm_start_ns") for v in views]},
                              schema=_FIRSTS))  # fmt: skip
    if not parts:
        return {}, False
    rows = pa.concat_tables(parts)
    grouped = rows.filter(pc.is_valid(rows.column("t"))).group_by("trace_id").aggregate([("t", "min")])
    firsts = dict(zip(grouped.column("trace_id").to_pylist(), grouped.column("t_min").to_pylist(), strict=True))
    return firsts, rows.column("t").null_count > 0
