"""Putting a batch's rows into the tables, inside a transaction the caller has opened.

Rows go in bulk as Arrow tables (schemas in :mod:`collector.store.columns`), registered on
the connection and inserted ``BY NAME``. A row already stored (same key) is skipped and
counted as a duplicate, so ingesting a file twice is harmless. A table with a primary key
skips with ``INSERT OR IGNORE``; one without (a lake's tables, and the tool calls, model calls
and payloads of a file made since keys were dropped: see ``schema.sql``) with an anti-join on
the key columns, narrowed to the rows' own time span so that DuckDB reads only the row groups
near it. A lake's counters and progress are appended rather than replaced (readers take the
latest row).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.store import columns, naming, rollup
from collector.store.batch import Batch, WriteResult
from collector.store.pairing import joins
from collector.store.reach import TRACE_HORIZON_NS, Reach, since_field
from collector.store.starts import TraceStarts, firsts_of
from collector.store.windowcost import update_later_llm_calls

_WITH_START_TIME = "*, make_timestamp(start_ns // 1000) AS start_time"
_TOOL_ROW = f"{_WITH_START_TIME}, 0 AS later_llm_calls"
"""A tool row's derived columns as it goes in: read by no model call until the recount finds one."""


KEYED_TABLES: Final = frozenset({"tool_calls", "llm_calls", "payloads", "message_views", "tool_call_names"})
"""The batch tables that have a primary key in a file made before keys were dropped from the
large ones (the most a file can have)."""


REPEAT_MARGIN_NS: Final = 3600 * 10**9
"""How far from a batch's time span a stored row with a key of the batch is looked for, on a
table without a primary key, when the batch holds Claude Code calls: its tool span and its
tool_result log event share a key but not quite a start (the event's is its time less the
duration, to the millisecond, or its time alone when no duration is given), an hour apart at
most for its tools. Any other repeat (a resend, a replayed spool) has the very same start, so
other batches look within their own time span only: at thousands of spans a second, an hour
either side would have every write read millions of stored keys."""


def insert_new(
    con: duckdb.DuckDBPyConnection, table: str, source: str, keys: tuple[str, ...], keyed: bool,
    select: str = "*", by_start: bool = False, fresh: bool = False, margin_ns: int = 0,
    within: tuple[int, int] | None = None, time_column: str = "start_ns", lower_ns: int | None = None,
) -> int:  # fmt: skip
    """Insert the rows of ``source`` (a table, view or subquery) whose ``keys`` are not in ``table`` yet.

    Returns how many rows went in. ``select`` is the column list taken from ``source``.
    A ``keyed`` table (one with a primary key) skips them with ``INSERT OR IGNORE``; any other
    anti-joins on ``keys``, narrowed to the source's time span when ``by_start`` (DuckDB skips
    the other row groups, DuckLake the other files, by their min/max ``start_ns``: given as
    constants, which a subquery is not to the planner), widened by ``margin_ns`` either side, and
    drops repeats inside ``source``. ``within``: that span, when the caller knows it already.
    ``time_column``: the column that span is of (``start_ns`` unless given). ``lower_ns``: the
    lower end of the span looked in instead of its start less ``margin_ns``.

    ``fresh``: the rows are taken to be new. On a keyed table a key already stored raises
    ``duckdb.ConstraintException`` instead of being skipped (see :func:`insert_batch`); on any
    other, the keys alone are checked first, and the rows go in as they are when none repeats.
    """
    if keyed:
        verb = "INSERT" if fresh else "INSERT OR IGNORE"
        row = con.execute(f"{verb} INTO {table} BY NAME SELECT {select} FROM {source}").fetchone()
        return int(row[0]) if row else 0
    match = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    if by_start and within is None:
        span = con.execute(f"SELECT min({time_column}), max({time_column}) FROM {source}").fetchone()
        low, high = span or (None, None)
        within = (int(low), int(high)) if low is not None and high is not None else None
    if within is not None:
        low = within[0] - margin_ns if lower_ns is None else lower_ns
        match += f" AND t.{time_column} BETWEEN {low} AND {within[1] + margin_ns}"
    if fresh and not _repeats(con, table, source, keys, match):
        row = con.execute(f"INSERT INTO {table} BY NAME SELECT {select} FROM {source}").fetchone()
        return int(row[0]) if row else 0
    row = con.execute(
        f"""INSERT INTO {table} BY NAME SELECT {select}
            FROM (SELECT DISTINCT ON ({", ".join(keys)}) * FROM {source}) AS s
            WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {match})"""
    ).fetchone()
    return int(row[0]) if row else 0


def _repeats(con: duckdb.DuckDBPyConnection, table: str, source: str, keys: tuple[str, ...], match: str) -> bool:
    """Whether ``source`` repeats one of its own keys or one stored in ``table`` (``match``).
    Read on the keys alone: the anti-join of :func:`insert_new` carries every column through a
    DISTINCT ON, which for a batch of new small tool calls cost about half of inserting them."""
    found = con.execute(
        f"""SELECT EXISTS (SELECT 1 FROM {source} GROUP BY {", ".join(keys)} HAVING count(*) > 1)
                OR EXISTS (SELECT 1 FROM {source} s JOIN {table} t ON {match})"""
    ).fetchone()
    return found is None or bool(found[0])


def start_span(rows: pa.Table, column: str = "start_ns") -> tuple[int, int] | None:
    """The least and greatest ``start_ns`` (or ``column``) of ``rows`` (None when it has none)."""
    low, high = pc.min_max(rows.column(column)).values()
    return (low.as_py(), high.as_py()) if low.is_valid and high.is_valid else None


def _margin(dialects: pa.ChunkedArray) -> int:
    """:data:`REPEAT_MARGIN_NS` for a batch holding Claude Code calls, else none."""
    return REPEAT_MARGIN_NS if pc.any(pc.equal(dialects, "claude_code")).as_py() else 0


def _register(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    con.register(name, columns.table_of(rows, schema))


def _insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]] | pa.Table, keys: tuple[str, ...],
    keyed: frozenset[str], fresh: bool = False, by_start: bool = False, margin_ns: int = 0,
    time_column: str = "start_ns", lower_ns: int | None = None,
) -> int:  # fmt: skip
    """Insert ``rows`` not stored yet (see :func:`insert_new`); with ``by_start``, compared with the
    stored rows near them in ``time_column`` only, when every row has a time (a row with none
    could repeat a stored row of any time): no earlier than ``lower_ns`` when given (where the
    rows' traces begin), else than ``margin_ns`` before the rows."""
    name = f"{table}_batch"
    arrow = rows if isinstance(rows, pa.Table) else columns.table_of(rows, columns.TABLES[table])
    within = start_span(arrow, time_column) if by_start and arrow.column(time_column).null_count == 0 else None
    con.register(name, arrow)
    try:
        return insert_new(con, table, name, keys, table in keyed, fresh=fresh, margin_ns=margin_ns,
                          within=within, time_column=time_column, lower_ns=lower_ns)  # fmt: skip
    finally:
        con.unregister(name)


def _delete_calls(con: duckdb.DuckDBPyConnection, calls: list[tuple[str, str]]) -> None:
    """Delete the tool calls (trace, span) with their payloads."""
    keys = [f"{t}:{sp}" for t, sp in calls]
    for table in ("tool_calls", "payloads"):
        con.execute(f"DELETE FROM {table} WHERE trace_id || ':' || span_id IN (SELECT unnest(?::VARCHAR[]))", [keys])


def _insert_tool_rows(
    con: duckdb.DuckDBPyConnection, rows: pa.Table, keyed: frozenset[str], fresh: bool, margin_ns: int, reach: Reach
) -> int:
    """Insert tool calls from ``tool_batch`` (left registered for the window-cost recount)."""
    con.register("tool_batch", rows)
    # a call derived from the messages gives way to the tool span of the same call id (none
    # can when no row of the batch is a tool span with a call id: the query is skipped)
    ids, origins = rows.column("tool_call_id"), rows.column("origin")
    span = start_span(rows)
    high = int(span[1]) if span is not None else 0
    derived = f"d.origin = 'messages' AND d.start_ns BETWEEN {reach.so_far.lo} AND {high + TRACE_HORIZON_NS}"
    if pc.any(pc.and_(pc.is_valid(ids), pc.not_equal(origins, "messages"))).as_py() and _any(con, derived):
        gone = con.execute(
            f"""SELECT d.trace_id, d.span_id FROM tool_calls d WHERE {derived}
               AND d.trace_id IN (SELECT trace_id FROM tool_batch WHERE tool_call_id IS NOT NULL)
               AND EXISTS (SELECT 1 FROM tool_batch b
                           WHERE b.trace_id = d.trace_id AND b.tool_call_id = d.tool_call_id AND b.origin <> 'messages')"""
        ).fetchall()
        if gone:
            _delete_calls(con, [(t, sp) for t, sp in gone])
    added = insert_new(con, "tool_calls", "tool_batch", ("trace_id", "span_id"), "tool_calls" in keyed, _TOOL_ROW,
                       fresh=fresh, margin_ns=margin_ns, within=span)  # fmt: skip
    return added - min(_merge_nested(con, span), added) if span is not None else added


def _any(con: duckdb.DuckDBPyConnection, where: str) -> bool:
    """Whether a stored tool call ``d`` matches ``where``: a check DuckDB answers from the row
    groups' min/max values alone when none can (a call derived from the messages, in a store
    whose tool spans carry their results), before a join that reads the batch."""
    row = con.execute(f"SELECT EXISTS (SELECT 1 FROM tool_calls d WHERE {where})").fetchone()
    return bool(row and row[0])


# One call recorded by two tool spans of the same name: a span directly inside another (a tool
# decorator under a framework's own tool span), or the MCP SDK's server span of a call inside the
# client's tool span (the MCP client span between them is no tool call, so only time containment
# links them, and only when one client span contains it: parallel calls of a tool overlap).
_NESTED = """
    SELECT i.trace_id, i.span_id, any_value(o.span_id), bool_or(i.raw_bytes IS NOT NULL), count(*)
    FROM tool_calls i JOIN tool_calls o
      ON o.trace_id = i.trace_id AND o.tool_name = i.tool_name AND o.span_id <> i.span_id
    WHERE i.trace_id IN (SELECT DISTINCT trace_id FROM tool_batch)
      -- a trace's calls lie within the horizon of the batch's, and a pair holds a row of the batch
      -- (pairs of stored rows were merged when the later came): the inner started, and the outer
      -- ended, no earlier than NESTED_MARGIN_NS before the batch's first call. DuckDB skips the row
      -- groups outside by their min/max start_ns and end_ns (constants, which a subquery is not to
      -- the planner), so the query reads the last minutes of the store, not a day of it
      AND i.start_ns BETWEEN {recent} AND {high} AND o.start_ns BETWEEN {low} AND {high} AND o.end_ns >= {recent}
      AND i.origin IN ('span', 'mcp_server') AND o.origin IN ('span', 'mcp_server')
      AND (i.parent_span_id = o.span_id
           OR (i.origin = 'mcp_server' AND o.origin = 'span' AND o.start_ns <= i.start_ns AND i.end_ns <= o.end_ns))
    GROUP BY i.trace_id, i.span_id"""
NESTED_MARGIN_NS = 600 * 10**9
"""How long before a batch's first tool call a row of a nested pair (see ``_NESTED``) may have
started (the inner) or ended (the outer). The other row of a pair is in the batch, and an inner
span starts after its outer one and before that ends: the margin is slack for clocks, not for
the agent's run. Bounding the pair by the batch's time instead of :data:`TRACE_HORIZON_NS`
took the query from ~200 to ~7 ms a write into a store holding 1.4 million calls of the last
day (BENCHMARKS.md); with the horizon it read every call of that day at each write."""
NESTED_WARNING = ("one call recorded by two tool spans of the same name (a tool span inside another, or the MCP "
                  "server's tools/call span inside the client's): kept as one row, the one that holds the result")  # fmt: skip


def _merge_nested(con: duckdb.DuckDBPyConnection, span: tuple[int, int]) -> int:
    """Keep one row per call recorded twice (see ``_NESTED``): the inner one when it has the raw
    result (it is nearer the tool), else the outer one. Returns the rows dropped."""
    drop: list[tuple[str, str]] = []
    keep: list[tuple[str, str]] = []
    nested = _NESTED.format(recent=span[0] - NESTED_MARGIN_NS, low=span[0] - TRACE_HORIZON_NS,
                            high=span[1] + TRACE_HORIZON_NS)  # fmt: skip
    for trace_id, inner, outer, inner_has_raw, candidates in con.execute(nested).fetchall():
        if candidates != 1:
            continue
        gone, kept = (outer, inner) if inner_has_raw else (inner, outer)
        drop.append((trace_id, gone))
        keep.append((trace_id, kept))
    if not drop:
        return 0
    _delete_calls(con, drop)
    con.execute(
        "UPDATE tool_calls SET warnings = list_append(coalesce(warnings, []::VARCHAR[]), ?) "
        "WHERE trace_id || ':' || span_id IN (SELECT unnest(?::VARCHAR[]))",
        [NESTED_WARNING, [f"{t}:{s}" for t, s in keep]],
    )
    return len(drop)


_LLM_PAIRS = f"""
    WITH l AS (SELECT * FROM llm_calls WHERE {since_field("start_ns")} AND trace_id IN (SELECT trace_id FROM llm_batch)),
    sib AS (SELECT i.trace_id, i.span_id AS inner_id, w.span_id AS outer_id,
                   count(*) OVER (PARTITION BY w.trace_id, w.span_id) AS inside
            FROM l i JOIN l w ON i.trace_id = w.trace_id AND i.span_id <> w.span_id
             AND i.parent_span_id IS NOT DISTINCT FROM w.parent_span_id
             AND w.start_ns <= i.start_ns AND i.end_ns <= w.end_ns
             AND (w.start_ns < i.start_ns OR i.end_ns < w.end_ns)
             AND i.input_tokens = w.input_tokens)
    SELECT i.trace_id, i.span_id AS inner_id, i.parent_span_id AS outer_id FROM l i
    WHERE EXISTS (SELECT 1 FROM l o WHERE o.trace_id = i.trace_id AND o.span_id = i.parent_span_id)
    UNION SELECT trace_id, inner_id, outer_id FROM sib WHERE inside = 1"""
"""(trace, inner span, outer span) of the batch's traces' model calls that are one call (below)."""
_CARRIED = ("model", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cleared_tool_uses",
            "cleared_input_tokens", "compaction_parts")  # fmt: skip


def _insert_llm_rows(con: duckdb.DuckDBPyConnection, table: pa.Table, keyed: frozenset[str], reach: Reach) -> int:
    """Insert LLM calls from ``llm_batch`` (left registered for the window-cost recount)."""
    con.register("llm_batch", table)
    span = start_span(table)
    added = insert_new(con, "llm_calls", "llm_batch", ("trace_id", "span_id"), "llm_calls" in keyed, _WITH_START_TIME,
                       margin_ns=_margin(table.column("dialect")), within=span)  # fmt: skip
    # a model-call span around another one is one call: ADK's call_llm around generate_content
    # (its parent), an instrumentation's span around the Anthropic SDK's own (its parent, or, for
    # OpenLLMetry, which never makes its span current, a sibling inside it in time, the only one,
    # both reporting the same input tokens, and not over the very same instants: two calls of
    # the agent's own are never merged without that). The inner one, which made the request,
    # is kept, with what only the outer one read (a response body's context-editing report,
    # cache figures in a spelling the inner one lacks)
    pairs = con.execute(_LLM_PAIRS.format(since=reach)).fetchall()
    if not pairs:  # the usual case: no statement more
        return added
    inner, outer = [f"{t}:{i}" for t, i, _ in pairs], [f"{t}:{o}" for t, _, o in pairs]
    carried = ", ".join(f"{c} = coalesce(llm_calls.{c}, w.{c})" for c in _CARRIED)
    con.execute(
        f"""UPDATE llm_calls SET {carried}, compacted = llm_calls.compacted OR w.compacted
            FROM (SELECT p.inner_key, o.compacted, {", ".join(f"o.{c}" for c in _CARRIED)}
                  FROM (SELECT unnest(?::VARCHAR[]) AS inner_key, unnest(?::VARCHAR[]) AS outer_key) p
                  JOIN llm_calls o ON o.trace_id || ':' || o.span_id = p.outer_key
                  WHERE o.trace_id IN (SELECT trace_id FROM llm_batch) AND {reach.since("o.start_ns")}) AS w
            WHERE llm_calls.trace_id IN (SELECT trace_id FROM llm_batch) AND {reach.since("llm_calls.start_ns")}
              AND llm_calls.trace_id || ':' || llm_calls.span_id = w.inner_key""",
        [inner, outer],
    )
    row = con.execute(
        f"""DELETE FROM llm_calls WHERE trace_id IN (SELECT trace_id FROM llm_batch) AND {reach.since("start_ns")}
           AND trace_id || ':' || span_id IN (SELECT unnest(?::VARCHAR[]))""",
        [outer],
    ).fetchone()
    wrappers = int(row[0]) if row else 0
    return added - min(wrappers, added)


def _record_counters(con: duckdb.DuckDBPyConnection, batch: Batch, lake: bool, written: WriteResult) -> None:
    """Store the receiver's progress and the collector's counters with the batch."""
    # one row per collector (file), or appended per batch (lake: replacing a row would make
    # every writer's commit touch the same rows)
    replace = "" if lake else "OR REPLACE "
    if batch.progress is not None:
        con.execute(
            f'INSERT {replace}INTO receiver_progress (receiver_id, segment, "offset", updated_at) '
            "VALUES (?, ?, ?, now()::TIMESTAMP)",
            list(batch.progress),
        )
    if batch.stats is None:
        return
    # cumulative counters as of before this batch, plus what this batch did
    stats = dict(batch.stats)
    stats["tool_calls_written"] = stats.get("tool_calls_written", 0) + written.tool_calls
    stats["llm_calls_written"] = stats.get("llm_calls_written", 0) + written.llm_calls
    stats["duplicates"] = stats.get("duplicates", 0) + written.duplicates
    cols = ", ".join(stats)
    marks = ", ".join("?" for _ in stats)
    con.execute(
        f"INSERT {replace}INTO collector_stats ({cols}, updated_at) VALUES ({marks}, now()::TIMESTAMP)",
        list(stats.values()),
    )


def _invalidate_rollups(con: duckdb.DuckDBPyConnection, starts: Sequence[int | None]) -> None:
    """Rolled days the rows that start at ``starts`` (and the window-cost recount they cause)
    change lose their rollup."""
    known = [s for s in starts if s is not None]
    if known:
        rollup.invalidate(con, min(known) - TRACE_HORIZON_NS, max(known))


def insert_batch(
    con: duckdb.DuckDBPyConnection, batch: Batch, lake: bool, fresh: bool = False, keyed: frozenset[str] | None = None,
    trace_starts: TraceStarts | None = None,
) -> WriteResult:  # fmt: skip
    """Insert ``batch`` (in the caller's transaction); returns what went in and what may join now.

    ``keyed``: the batch tables that have a primary key (default: none on a lake, all on a file).
    ``trace_starts``: where the store's traces begin, kept by its writer (see :mod:`.starts`).

    ``fresh``: the batch's tool calls and payloads are taken to be new. Into a keyed table they
    go with a plain ``INSERT``, which checks the keys about 2.5x faster than ``INSERT OR IGNORE``
    in DuckDB 1.5.5 but raises ``duckdb.ConstraintException`` on a key already stored (a span
    sent twice, a spool replayed); the caller then rolls back and writes the batch again without
    ``fresh``. Into any other, their keys are checked alone first (see :func:`insert_new`).
    Model calls and message views are never taken to be new: every later model call of a
    conversation repeats its tool messages, so their keys are often stored already.
    """
    keyed = (frozenset() if lake else KEYED_TABLES) if keyed is None else keyed
    tools = llms = 0
    registered: list[str] = []
    tool_table = batch.arrow("tool_calls")
    llm_table = columns.table_of(batch.llm_rows, columns.LLM_CALLS) if batch.llm_rows else None
    starts = tool_table.column("start_ns").to_pylist() if tool_table is not None else []
    starts += [r.get("start_ns") for r in batch.llm_rows]
    known = [int(s) for s in starts if s is not None]
    times = known + [int(r["llm_start_ns"]) for r in batch.message_rows if r.get("llm_start_ns") is not None]
    tables = [t for t in (tool_table, llm_table) if t is not None]
    reach = Reach.of(con, batch, tables, min(times, default=None), trace_starts)
    if llm_table is not None or batch.message_rows:
        reach.find()  # its model calls and views need it: the reads of its tool calls use it too
    # how far off a repeat of the batch's calls (and so of their payloads) may be stored
    margin = _margin(tool_table.column("dialect")) if tool_table is not None else 0
    if tool_table is not None:
        tools = _insert_tool_rows(con, tool_table, keyed, fresh, margin, reach)
        registered.append("tool_batch")
    if llm_table is not None:
        llms = _insert_llm_rows(con, llm_table, keyed, reach)
        registered.append("llm_batch")
    if registered and known:
        update_later_llm_calls(con, registered, reach)
        _invalidate_rollups(con, known)
    for name in registered:
        con.unregister(name)
    payload_table = batch.arrow("payloads")
    if payload_table is not None:
        # only stored payloads near the batch's calls are looked at (see schema.date_old_payloads),
        # as far off as a repeat of the calls' own rows is
        _insert_rows(con, "payloads", payload_table, ("trace_id", "span_id", "kind"), keyed, fresh, True, margin)
    # a view or a name is repeated by every later model call of its run: a stored view lies where
    # its trace begins or later, a name within the run's horizon of the batch's (DuckDB skips the
    # other row groups by their time)
    if batch.message_rows:
        _insert_rows(con, "message_views", batch.message_rows, ("trace_id", "tool_call_id"), keyed, by_start=True,
                     margin_ns=TRACE_HORIZON_NS, time_column="llm_start_ns", lower_ns=reach.lo)  # fmt: skip
    if batch.name_rows:
        _insert_rows(con, "tool_call_names", batch.name_rows, ("trace_id", "tool_call_id"), keyed, by_start=True,
                     margin_ns=TRACE_HORIZON_NS, time_column="asked_ns")  # fmt: skip
    naming.name_views(con, batch)
    if batch.issue_rows:
        _register(con, "issue_batch", batch.issue_rows, columns.INGEST_ISSUES)
        con.execute("INSERT INTO ingest_issues BY NAME SELECT now()::TIMESTAMP AS logged_at, * FROM issue_batch")
        con.unregister("issue_batch")
    written = WriteResult(tools, llms, batch.tool_count - tools + len(batch.llm_rows) - llms)
    _record_counters(con, batch, lake, written)
    if trace_starts is not None and trace_starts.keeping:
        trace_starts.note(*firsts_of(tables, batch.message_rows))
    if not batch.join_traces:
        return written
    return joins(con, written, batch.join_traces, reach)


def replace_tool_rows(
    con: duckdb.DuckDBPyConnection,
    rows: list[dict[str, Any]],
    payload_rows: list[dict[str, Any]],
    drop: list[tuple[str, str]],
    lake: bool,
    keyed: frozenset[str] | None = None,
) -> None:
    """Rewrite stored tool-call rows (after a late join), in the caller's transaction.

    The ``drop`` (trace, span) calls go first, with their payloads; ``payload_rows`` not
    stored yet are added. ``keyed`` as for :func:`insert_batch`.
    """
    keyed = (frozenset() if lake else KEYED_TABLES) if keyed is None else keyed
    if drop:
        _delete_calls(con, drop)
    _register(con, "tool_batch", rows, columns.TOOL_CALLS)
    updated = [f.name for f in columns.TOOL_CALLS if f.name not in ("trace_id", "span_id")]
    assignments = ", ".join(f'"{c}" = b."{c}"' for c in updated)
    starts = [int(r["start_ns"]) for r in rows if r.get("start_ns") is not None]
    # the stored rows lie at the rows' own start: DuckDB reads only the row groups there
    near = f" AND tool_calls.start_ns BETWEEN {min(starts)} AND {max(starts)}" if len(starts) == len(rows) else ""
    con.execute(
        f"UPDATE tool_calls SET {assignments} FROM tool_batch b "
        f"WHERE tool_calls.trace_id = b.trace_id AND tool_calls.span_id = b.span_id{near}"
    )
    con.unregister("tool_batch")
    _invalidate_rollups(con, [r.get("start_ns") for r in rows])
    if payload_rows:
        _insert_rows(con, "payloads", payload_rows, ("trace_id", "span_id", "kind"), keyed, by_start=True)
