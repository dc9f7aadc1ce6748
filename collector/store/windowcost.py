"""Window cost's inputs, kept as columns: how many later model calls read each tool result, how
many of those reads the prompt cache served, and where the result left the conversation.

A tool result stays in the conversation, so every later model call reads it again; its
window cost is ``view_tokens x later_llm_calls``. Counting that with a join at query time
costs about a second per million calls, so every write recounts it for the traces it
touched (:func:`update_later_llm_calls`).

Most traces need one as-of join: each result is read by every model call after it. Traces
whose model calls report prompt-cache figures, or leave results out of their input, are
counted read by read:

* **context editing** (Anthropic's ``clear_tool_uses``, an agent's own clearing): a call that
  cleared ``n`` tool uses left the ``n`` oldest results of its trace out of its input;
* **compaction**: a call whose conversation was summarised (``compacted``, or more compaction
  parts in its input than the call before) no longer reads any result from before it, nor
  does any call after it;
* **prompt caching**: a result sits inside the input of the first call that read it, so a
  later call read it from the cache when its cached input reaches at least that far
  (``cache_read_tokens >= `` that first call's ``input_tokens``); a cache that covers less is
  counted as not covering it (the cost is never understated). ``cache_written``: the first
  reader wrote the cache (billed at the cache-write price).
"""

from __future__ import annotations

import duckdb

from collector.store.reach import Reach

_COUNTED_READ_BY_READ = """(cache_read_tokens IS NOT NULL OR cleared_tool_uses > 0 OR compacted
                            OR compaction_parts > 0)"""

_CHANGED = """(tool_calls.later_llm_calls IS DISTINCT FROM n.later OR tool_calls.cached_reads IS DISTINCT FROM n.cached
       OR tool_calls.cache_written IS DISTINCT FROM n.written OR tool_calls.cleared_at_ns IS DISTINCT FROM n.cleared_at
       OR tool_calls.cleared_by IS DISTINCT FROM n.cleared_by OR tool_calls.read_by_model IS DISTINCT FROM n.model)"""
_SET = """later_llm_calls = n.later, cached_reads = n.cached, cache_written = n.written, cleared_at_ns = n.cleared_at,
       cleared_by = n.cleared_by, read_by_model = n.model"""


def update_later_llm_calls(con: duckdb.DuckDBPyConnection, batches: list[str], reach: Reach) -> None:
    """Recount, for the traces this batch touched, how each tool result was read after it.

    ``batches`` names the registered Arrow tables of the batch (tool and LLM rows): their
    traces are the ones recounted. Recounting whole traces (not adding to counts) keeps
    the columns right whatever order spans arrive in, and when a batch is retried.
    ``reach``: where those traces begin in the store; as a number, it lets DuckDB skip the row
    groups that end before it (a subquery does not).
    """
    touched = " UNION ".join(f"SELECT trace_id FROM {b}" for b in batches)
    _recount(con, touched, reach)


def recount_all_later_llm_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Recount every tool call's reads (after a bulk load done in SQL)."""
    con.execute("UPDATE tool_calls SET later_llm_calls = 0 WHERE later_llm_calls IS NULL")
    first = con.execute("SELECT min(start_ns) FROM tool_calls").fetchone()
    if first and first[0] is not None:  # the bound as a number (see update_later_llm_calls)
        _recount(con, "SELECT DISTINCT trace_id FROM tool_calls", Reach.at(int(first[0])))


def _model_calls(con: duckdb.DuckDBPyConnection, touched: str, lo: int) -> tuple[int, int]:
    """(model calls of the ``touched`` traces from ``lo`` on, those of them counted read by read)."""
    found = con.execute(
        f"""WITH touched AS ({touched})
            SELECT count(*), count(*) FILTER (WHERE {_COUNTED_READ_BY_READ}) FROM llm_calls
            WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM touched)"""
    ).fetchone()
    return (int(found[0]), int(found[1])) if found else (0, 0)


def _recount(con: duckdb.DuckDBPyConnection, touched: str, reach: Reach) -> None:
    """Recount the tool calls of the ``touched`` traces that start where ``reach`` says or later.

    Tool calls go in with ``later_llm_calls = 0`` and the other columns null, which is what a
    trace without model calls counts to: when none of the touched traces has one (tool spans
    that arrive apart from their model calls, an MCP server's own spans), one small query
    finds that and the two recounts are skipped; the read-by-read one only runs when some
    trace needs it. Each UPDATE is bounded on its own table too: the rows to set are found by a
    join, and without a bound of its own DuckDB read the whole table to find them.
    """
    calls, read_by_read = _model_calls(con, touched, reach.so_far.lo)
    if not calls:
        return
    lo = reach.lo
    scope = f"""touched AS ({touched}),
        special AS (SELECT DISTINCT trace_id FROM llm_calls
                    WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM touched)
                      AND {_COUNTED_READ_BY_READ})"""
    con.execute(
        f"""
        UPDATE tool_calls SET {_SET} FROM (
            WITH {scope},
            c AS (SELECT trace_id, span_id, end_ns FROM tool_calls
                  WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM touched)
                    AND trace_id NOT IN (SELECT trace_id FROM special)),
            l AS (SELECT trace_id, start_ns, model,
                         row_number() OVER (PARTITION BY trace_id ORDER BY start_ns DESC) AS remaining
                  FROM llm_calls
                  WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM touched))
            SELECT c.trace_id, c.span_id, coalesce(l.remaining, 0) AS later, NULL::BIGINT AS cached,
                   NULL::BOOLEAN AS written, NULL::BIGINT AS cleared_at, NULL::VARCHAR AS cleared_by, l.model
            FROM c ASOF LEFT JOIN l ON c.trace_id = l.trace_id AND l.start_ns >= c.end_ns
        ) AS n
        WHERE tool_calls.start_ns >= {lo} AND tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
          AND {_CHANGED}
        """
    )
    if not read_by_read:
        return
    con.execute(
        f"""
        UPDATE tool_calls SET {_SET} FROM (
            WITH {scope},
            c AS (SELECT trace_id, span_id, end_ns,
                         row_number() OVER (PARTITION BY trace_id ORDER BY end_ns, span_id) AS rank
                  FROM tool_calls
                  WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM special)),
            l AS (SELECT trace_id, start_ns, model, input_tokens, cache_read_tokens, cache_write_tokens,
                         coalesce(cleared_tool_uses, 0) AS cleared,
                         coalesce(compacted, false) OR coalesce(compaction_parts, 0) >
                             coalesce(lag(compaction_parts) OVER (PARTITION BY trace_id ORDER BY start_ns), 0) AS compacts
                  FROM llm_calls
                  WHERE start_ns >= {lo} AND trace_id IN (SELECT trace_id FROM special)),
            p AS (SELECT c.trace_id, c.span_id, c.rank, l.start_ns, l.cache_read_tokens, l.cleared,
                         min(CASE WHEN l.compacts THEN l.start_ns END)
                             OVER (PARTITION BY c.trace_id, c.span_id) AS compacted_at,
                         first_value(l.input_tokens) OVER reads AS first_input,
                         first_value(l.cache_write_tokens) OVER reads AS first_written,
                         first_value(l.model) OVER reads AS model,
                         row_number() OVER reads AS nth
                  FROM c JOIN l ON l.trace_id = c.trace_id AND l.start_ns >= c.end_ns
                  WINDOW reads AS (PARTITION BY c.trace_id, c.span_id ORDER BY l.start_ns)),
            q AS (SELECT *, (compacted_at IS NULL OR start_ns < compacted_at) AND rank > cleared AS read FROM p),
            n AS (SELECT trace_id, span_id, count(*) FILTER (WHERE read) AS later,
                         CASE WHEN bool_or(cache_read_tokens IS NOT NULL) THEN
                             count(*) FILTER (WHERE read AND nth > 1 AND cache_read_tokens >= first_input) END AS cached,
                         any_value(first_written) > 0 AS written,
                         min(start_ns) FILTER (WHERE NOT read) AS cleared_at,
                         min(compacted_at) AS compacted_at, any_value(model) AS model
                  FROM q GROUP BY trace_id, span_id)
            SELECT c.trace_id, c.span_id, coalesce(n.later, 0) AS later, n.cached, n.written, n.cleared_at,
                   CASE WHEN n.cleared_at IS NULL THEN NULL
                        WHEN n.cleared_at >= n.compacted_at THEN 'compaction' ELSE 'context_edit' END AS cleared_by,
                   n.model
            FROM c LEFT JOIN n ON n.trace_id = c.trace_id AND n.span_id = c.span_id
        ) AS n
        WHERE tool_calls.start_ns >= {lo} AND tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
          AND {_CHANGED}
        """
    )
