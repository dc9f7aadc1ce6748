"""Tool names that reach the store in another batch than the responses they name.

The GenAI log records of one model call (the assistant message that names the tools it asks
for, the tool messages that carry only the call ids) can be exported in separate requests and
land in different batches. Names that came without their response are kept in
``tool_call_names``; :func:`name_views` gives them to the views stored without a name, and to
the calls recorded from those views as ``(unnamed)``, whichever arrives first.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from collector.store import rollup
from collector.store.batch import Batch
from collector.store.reach import TRACE_HORIZON_NS


def name_views(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
    """Name the stored views whose tool call was named in another batch, and the calls recorded
    from them as ``(unnamed)`` before the name arrived.

    Runs only for a batch that brought names without their responses, or responses without a
    name (both rare: a model call's messages are normally read together), for their traces.
    """
    traces = {r["trace_id"] for r in batch.name_rows}
    traces |= {r["trace_id"] for r in batch.message_rows if r.get("tool_name") is None}
    if not traces:
        return
    named = con.execute(_NAMED_NOW, [sorted(traces), sorted(traces)]).fetchall()
    if not named:
        return
    con.register("names_batch", pa.table({
        "trace_id": [t for t, _, _, _ in named], "tool_call_id": [c for _, c, _, _ in named],
        "tool_name": [n for _, _, n, _ in named]}))  # fmt: skip
    try:
        con.execute(
            "UPDATE message_views SET tool_name = b.tool_name FROM names_batch b "
            "WHERE message_views.trace_id = b.trace_id AND message_views.tool_call_id = b.tool_call_id"
        )
        renamed = [t for _, _, _, t in named if t is not None]
        if renamed:
            con.execute(
                "UPDATE tool_calls SET tool_name = b.tool_name FROM names_batch b "
                "WHERE tool_calls.trace_id = b.trace_id AND tool_calls.tool_call_id = b.tool_call_id "
                "AND tool_calls.origin = 'messages' AND tool_calls.tool_name = '(unnamed)' "
                f"AND tool_calls.start_ns BETWEEN {min(renamed)} AND {max(renamed)}"
            )
            rollup.invalidate(con, min(renamed) - TRACE_HORIZON_NS, max(renamed))
    finally:
        con.unregister("names_batch")


# the views of those traces stored without a name that a stored name now gives, with the start of
# a call already recorded from such a view as "(unnamed)"
_NAMED_NOW = """
    SELECT m.trace_id, m.tool_call_id, n.tool_name,
           (SELECT min(d.start_ns) FROM tool_calls d WHERE d.trace_id = m.trace_id
              AND d.tool_call_id = m.tool_call_id AND d.origin = 'messages' AND d.tool_name = '(unnamed)')
    FROM message_views m JOIN tool_call_names n USING (trace_id, tool_call_id)
    WHERE m.tool_name IS NULL AND m.trace_id IN (SELECT unnest(?::VARCHAR[]))
      AND n.trace_id IN (SELECT unnest(?::VARCHAR[]))"""
