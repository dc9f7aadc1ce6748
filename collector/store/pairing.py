"""Which stored calls and views a batch's write made joinable: the store's half of the view joins.

A model call's input carries the tool responses the model was shown (the views); a write that
brings a view or a call still measured against its raw result looks, in the same transaction,
for the stored calls whose view has now arrived (``pending_joins``), for the views no call
claims (the conversation join: calls derived from the messages, or matched to id-less calls),
and for those id-less calls. :class:`collector.joins.ViewJoins` measures what it finds.

The queries read the rows of the batch's traces only, from where those traces begin in the
store (:class:`collector.store.reach.Reach`: DuckDB skips the older row groups by their min/max
time). Each join is found from key columns first, and the rows (payloads, views) are read for
what was found only, through a filter DuckDB evaluates in the scan (``list_contains``:
an IN-subquery is a join, so the scan reads every column of every row first). Joining the
whole rows at once read every stored payload and view at each write: ~70 us a call at 200,000
calls with their model calls, growing with the store (``benchmarks/bench_flush.py --views``).
"""

from __future__ import annotations

from typing import Any

import duckdb

from collector.store.batch import WriteResult
from collector.store.connection import rows_as_dicts
from collector.store.reach import Reach, since_field

_ANY_VIEW = f"SELECT EXISTS (SELECT 1 FROM message_views WHERE {since_field('llm_start_ns')})"
"""Whether any view is stored within reach: in a store fed tool spans alone (no model input, so
no view) the answer is no at once, and the batch's trace ids are not sent to DuckDB (~1 us an id:
~7 ms of a write of 6,700 such spans, one-off timing)."""
_VIEWED_TRACES = f"""
    SELECT DISTINCT trace_id FROM message_views
    WHERE {since_field("llm_start_ns")} AND trace_id IN (SELECT unnest(?::VARCHAR[]))"""
_PENDING_KEYS = f"""
    SELECT t.trace_id, t.span_id
    FROM (SELECT trace_id, span_id, tool_call_id FROM tool_calls
          WHERE {since_field("start_ns")} AND view_source = 'raw' AND tool_call_id IS NOT NULL
            AND trace_id IN (SELECT unnest($traces))) t
    JOIN (SELECT trace_id, tool_call_id FROM message_views
          WHERE {since_field("llm_start_ns")} AND trace_id IN (SELECT unnest($traces))) m
      USING (trace_id, tool_call_id)"""
"""The stored calls of the viewed traces still measured against their raw result whose view is now stored."""
_PENDING_JOINS = f"""
    SELECT t.*, m.bytes AS message_bytes, m.tokens AS message_tokens, m.blob_id AS message_blob_id,
           m.inline AS message_inline, p.inline AS raw_inline, p.inline_codec AS raw_inline_codec,
           p.blob_id AS raw_blob_id, p.cut AS raw_cut, p.head_bytes AS raw_head_bytes, p.tail_bytes AS raw_tail_bytes
    FROM (SELECT * FROM tool_calls WHERE {since_field("start_ns")} AND list_contains($traces, trace_id)
          AND list_contains($calls, trace_id || ':' || span_id)) t
    JOIN (SELECT * FROM message_views WHERE {since_field("llm_start_ns")} AND list_contains($traces, trace_id)) m
      USING (trace_id, tool_call_id)
    LEFT JOIN (SELECT * FROM payloads WHERE {since_field("start_ns")} AND kind = 'raw' AND list_contains($traces, trace_id)) p
      ON p.trace_id = t.trace_id AND p.span_id = t.span_id"""
"""Those calls (:data:`_PENDING_KEYS`), with their view and their raw payload."""
_IDLESS_CALLS = f"""
    SELECT t.*, p.inline AS raw_inline, p.inline_codec AS raw_inline_codec, p.blob_id AS raw_blob_id,
           p.cut AS raw_cut, p.head_bytes AS raw_head_bytes, p.tail_bytes AS raw_tail_bytes
    FROM (SELECT * FROM tool_calls WHERE {since_field("start_ns")} AND tool_call_id IS NULL AND view_source = 'raw'
          AND list_contains($traces, trace_id)) t
    LEFT JOIN (SELECT * FROM payloads WHERE {since_field("start_ns")} AND kind = 'raw' AND list_contains($traces, trace_id)) p
      ON p.trace_id = t.trace_id AND p.span_id = t.span_id"""
_UNCLAIMED_KEYS = f"""
    SELECT m.trace_id, m.tool_call_id FROM message_views m
    WHERE {since_field("m.llm_start_ns")} AND m.trace_id IN (SELECT unnest($traces))
      AND NOT EXISTS (SELECT 1 FROM tool_calls t WHERE t.trace_id = m.trace_id AND t.tool_call_id = m.tool_call_id
                      AND t.origin IS DISTINCT FROM 'messages' AND {since_field("t.start_ns")}
                      AND t.trace_id IN (SELECT unnest($traces)))"""
"""The views of the viewed traces that no call claims (by its id)."""
_UNCLAIMED_VIEWS = f"""
    SELECT m.*, (SELECT any_value(d.span_id) FROM tool_calls d WHERE d.trace_id = m.trace_id
                   AND d.tool_call_id = m.tool_call_id AND d.origin = 'messages' AND {since_field("d.start_ns")}
                   AND list_contains($traces, d.trace_id)) AS derived_span_id
    FROM message_views m
    WHERE {since_field("m.llm_start_ns")} AND list_contains($traces, m.trace_id)
      AND list_contains($views, m.trace_id || ':' || m.tool_call_id)"""
"""Those views (:data:`_UNCLAIMED_KEYS`), with the call derived from each, if any."""


def joins(con: duckdb.DuckDBPyConnection, written: WriteResult, join_traces: list[str], reach: Reach) -> WriteResult:
    """``written`` with the joins the batch made possible (see :class:`WriteResult`); ``reach``:
    where the batch's traces begin in the store."""

    def found(keys_query: str, rows_query: str, keys_name: str) -> tuple[list[str], list[dict[str, Any]]]:
        """(traces, rows) of a join: its keys from the key columns, then the rows of those keys only."""
        pairs = con.execute(keys_query.format(since=reach), {"traces": viewed}).fetchall()
        if not pairs:
            return [], []
        traces = sorted({t for t, _ in pairs})
        keys = [f"{a}:{b}" for a, b in pairs]
        return traces, rows_as_dicts(con.execute(rows_query.format(since=reach), {"traces": traces, keys_name: keys}))

    # read in the same transaction as the write: the late joins see exactly what is stored;
    # both start from a view of the message inputs, so traces without one need neither
    any_view = con.execute(_ANY_VIEW.format(since=reach.so_far)).fetchone()
    if not (any_view and any_view[0]):
        return written
    viewed = [row[0] for row in con.execute(_VIEWED_TRACES.format(since=reach.so_far), [join_traces]).fetchall()]
    if not viewed:
        return written
    _, pending = found(_PENDING_KEYS, _PENDING_JOINS, "calls")
    claiming, unclaimed = found(_UNCLAIMED_KEYS, _UNCLAIMED_VIEWS, "views")
    # id-less calls are matched to the views no call claims, of their own trace only: read
    # them for those traces (none, usually), not for every trace the batch touched
    idless = rows_as_dicts(con.execute(_IDLESS_CALLS.format(since=reach), {"traces": claiming})) if claiming else []
    return WriteResult(written.tool_calls, written.llm_calls, written.duplicates, pending_joins=pending,
                       idless_calls=idless, unclaimed_views=unclaimed)  # fmt: skip
