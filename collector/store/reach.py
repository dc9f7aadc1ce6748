"""How far back in the store the traces of a batch reach: the lower time bound of a write's reads.

A write reads the stored rows of the traces it touches: it recounts their window cost, pairs
their model calls, joins their views to their calls. A trace's earlier rows may lie anywhere
within ``TRACE_HORIZON_NS`` before the batch, so bounding those reads by the horizon made every
write read a day of rows: more the higher the rate, whatever the traces. :class:`Reach` first
finds where the touched traces' stored rows begin, and the reads after it start there: for the
traces of an agent run of minutes, the last minutes of the store. A file store's writer looks
that up in what it keeps (:mod:`collector.store.starts`); a lake, or a writer that cannot say,
finds it with one narrow read (the trace and time columns of the last day).

The bound is a constant in the SQL (DuckDB skips the row groups that end before it by their
min/max time; a subquery would not let it), and a plain comparison: ``t >= lo OR t IS NULL``
made DuckDB read every row group. Rows stored with no time (by a version that did not keep
one) are looked at too, as before, in a store that holds any, and then every read keeps the
horizon and the ``IS NULL``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.store.batch import Batch
from collector.store.starts import TIMED, TIMELESS, TraceStarts

TRACE_HORIZON_NS = 24 * 3600 * 10**9
"""How far before a batch's earliest span a stored row of its traces is still read by its write
(its window cost recounted, its model calls paired, its view joined). Agent runs last minutes,
not days; rows of a trace older than this are left as they are."""

_FIRST = """
    WITH touched AS (SELECT DISTINCT unnest(?::VARCHAR[]) AS trace_id)
    SELECT {timeless}, least({firsts})"""


class Reach:
    """The lower bound of a write's reads of the stored rows of ``traces()``, the batch's traces.

    ``first_ns``: the earliest time of the batch's own rows (None: none has one, and no stored
    row is too old). Found at the first use (a write that reads no stored rows of its traces
    does not pay for it), then kept for the rest of the write.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection | None,
        traces: Callable[[], Iterable[str]],
        first_ns: int | None,
        found: tuple[int, bool] | None = None,
        starts: TraceStarts | None = None,
    ) -> None:
        self._con = con
        self._traces = traces
        self._starts = starts
        """Where the store's traces begin, kept by its writer (a file store): looked up, not read."""
        self.first_ns = first_ns
        self.horizon = first_ns - TRACE_HORIZON_NS if first_ns is not None else -(2**63)
        """The earliest time a row of the batch's traces may have to be read at all."""
        self._found = found

    @classmethod
    def of(
        cls,
        con: duckdb.DuckDBPyConnection,
        batch: Batch,
        tables: Sequence[pa.Table],
        first_ns: int | None,
        starts: TraceStarts | None = None,
    ) -> Reach:
        """Where the traces of ``batch`` begin (``tables``: its tool and model calls, as Arrow;
        ``first_ns``: the earliest time of its rows): every trace a write reads the stored rows of
        is one of its rows' traces."""

        def traces() -> set[str]:
            found = {t for table in tables for t in pc.unique(table.column("trace_id")).to_pylist()}
            return found | {r["trace_id"] for r in batch.message_rows} | set(batch.join_traces)

        return cls(con, traces, first_ns, starts=starts)

    @classmethod
    def at(cls, lo: int, timeless: bool = False) -> Reach:
        """A bound known already: ``lo``; ``timeless``: rows with no time are read too."""
        return cls(None, tuple, lo + TRACE_HORIZON_NS, found=(lo, timeless))

    @property
    def so_far(self) -> Reach:
        """This bound when found already, else the horizon (rows with no time read too, as the
        store may hold some): for a read that asks whether there is anything to read at all,
        which the bound is not worth finding for (a batch of tool calls of traces whose model
        calls are written apart, where the answer is no)."""
        return self if self._found is not None else Reach.at(self.horizon, timeless=True)

    def find(self) -> Reach:
        """Find the bound now (a read that only asks whether there is anything to read then uses it)."""
        self._find()
        return self

    def _find(self) -> tuple[int, bool]:
        if self._found is None:
            traces = sorted(set(self._traces()))
            if self.first_ns is None or not traces:  # no time to bound by: every row, as before
                self._found = (self.horizon, True)
            else:
                assert self._con is not None  # a bound made with `at` is found already
                self._found = self._kept(self._con, self.first_ns, traces) or self._read(
                    self._con, self.first_ns, traces
                )
        return self._found

    def _kept(self, con: duckdb.DuckDBPyConnection, first_ns: int, traces: list[str]) -> tuple[int, bool] | None:
        """The bound from the writer's map of where traces begin; None when there is none or it cannot
        say (the store holds rows with no time, among others: then :meth:`_read` keeps the horizon)."""
        if self._starts is None:
            return None
        known, stored = self._starts.first(con, traces, self.horizon)
        return (first_ns if stored is None else min(first_ns, stored), False) if known else None

    def _read(self, con: duckdb.DuckDBPyConnection, first_ns: int, traces: list[str]) -> tuple[int, bool]:
        """The bound from one narrow read of the last day (see the module's docstring)."""
        firsts = ", ".join(
            f"(SELECT min({column}) FROM {table} WHERE {column} >= {self.horizon} "
            f"AND trace_id IN (SELECT trace_id FROM touched))"
            for table, column in TIMED
        )
        row = con.execute(_FIRST.format(timeless=TIMELESS, firsts=firsts), [traces]).fetchone()
        timeless, stored = (bool(row[0]), row[1]) if row else (False, None)
        return (self.horizon if timeless else first_ns if stored is None else min(first_ns, int(stored))), timeless

    @property
    def lo(self) -> int:
        """No stored row of the batch's traces that a write reads starts before this."""
        return self._find()[0]

    def since(self, column: str) -> str:
        """SQL: ``column`` (a time) at :attr:`lo` or later, or, in a store holding rows with no
        time, none."""
        lo, timeless = self._find()
        return f"({column} >= {lo} OR {column} IS NULL)" if timeless else f"{column} >= {lo}"

    def __getitem__(self, column: str) -> str:
        """:meth:`since`, for the ``{since[column]}`` fields of a query template (:func:`since_field`)."""
        return self.since(column)


def since_field(column: str) -> str:
    """A field of a query template that :meth:`Reach.since` fills in at each write:
    ``template.format(since=reach)``."""
    return "{since[" + column + "]}"
