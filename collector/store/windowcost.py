"""Window cost's input, kept as a column: how many LLM calls of its trace follow each tool call.

A tool result stays in the conversation, so every later model call reads it again; its
window cost is ``view_tokens x later_llm_calls``. Counting that with a join at query time
costs about a second per million calls, so every write recounts it for the traces it
touched (:func:`update_later_llm_calls`).
"""

from __future__ import annotations

import duckdb

TRACE_HORIZON_NS = 24 * 3600 * 10**9
"""How far before a batch's earliest span a tool call may lie and still have its window
cost updated by that batch's LLM calls. Bounds the work of each write (DuckDB skips older
row groups by their min/max start time); agent runs last minutes, not days."""


def update_later_llm_calls(con: duckdb.DuckDBPyConnection, batches: list[str]) -> None:
    """Recount, for the traces this batch touched, how many LLM calls follow each tool call.

    ``batches`` names the registered Arrow tables of the batch (tool and LLM rows): their
    traces are the ones recounted. Recounting whole traces (not adding to counts) keeps
    the column right whatever order spans arrive in, and when a batch is retried.
    """
    touched = " UNION ".join(f"SELECT trace_id FROM {b}" for b in batches)
    starts = " UNION ALL ".join(f"SELECT start_ns FROM {b}" for b in batches)
    con.execute(
        f"""
        UPDATE tool_calls SET later_llm_calls = n.later FROM (
            WITH touched AS ({touched}),
            lo AS (SELECT min(start_ns) - {TRACE_HORIZON_NS} AS lo FROM ({starts})),
            c AS (SELECT trace_id, span_id, end_ns FROM tool_calls
                  WHERE start_ns >= (SELECT lo FROM lo) AND trace_id IN (SELECT trace_id FROM touched)),
            l AS (SELECT trace_id, start_ns,
                         row_number() OVER (PARTITION BY trace_id ORDER BY start_ns DESC) AS remaining
                  FROM llm_calls
                  WHERE start_ns >= (SELECT lo FROM lo) AND trace_id IN (SELECT trace_id FROM touched))
            SELECT c.trace_id, c.span_id, coalesce(l.remaining, 0) AS later
            FROM c ASOF LEFT JOIN l ON c.trace_id = l.trace_id AND l.start_ns >= c.end_ns
        ) AS n
        WHERE tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
          AND tool_calls.later_llm_calls IS DISTINCT FROM n.later
        """
    )


def recount_all_later_llm_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Recount ``later_llm_calls`` for every tool call (after a bulk load done in SQL)."""
    con.execute(
        """
        UPDATE tool_calls SET later_llm_calls = n.later FROM (
            WITH l AS (SELECT trace_id, start_ns,
                              row_number() OVER (PARTITION BY trace_id ORDER BY start_ns DESC) AS remaining
                       FROM llm_calls)
            SELECT c.trace_id, c.span_id, coalesce(l.remaining, 0) AS later
            FROM tool_calls c ASOF LEFT JOIN l ON c.trace_id = l.trace_id AND l.start_ns >= c.end_ns
        ) AS n
        WHERE tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
        """
    )
