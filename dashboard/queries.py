"""Dashboard queries: plain functions from a connection and filters to DataFrames.

No Streamlit here; every aggregate is computed in DuckDB with bound parameters. The few
steps done in Python (finding where a tool's dominant schema changed, diffing two field
lists) work on a handful of rows that SQL already aggregated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from typing import Any

import duckdb
import pandas as pd

from collector.alerts.detection import schema_diff, schema_fields
from collector.query import coverage as cov
from collector.query.ranking import Filters, collector_totals, ranking, rolled_days, uncovered_calls
from collector.store.database import rows_as_dicts

SIZE_METRICS = {"view_tokens": "tokens shown to the model", "raw_tokens": "tokens the tool produced",
                "raw_bytes": "bytes the tool produced"}  # fmt: skip


def _df(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> pd.DataFrame:
    return con.execute(sql, params).df()


# --- window eaters ------------------------------------------------------------------------


def tool_ranking(
    con: duckdb.DuckDBPyConnection, filters: Filters, by: str = "view", exact: bool | None = True
) -> pd.DataFrame:
    """Per-tool percentiles, rates and window cost, sorted by ``by`` (``exact``: see
    :func:`collector.query.ranking.ranking`; the ``percentiles`` column says which were read)."""
    return pd.DataFrame(ranking(con, filters, by=by, exact=exact))


def kpis(con: duckdb.DuckDBPyConnection, table: pd.DataFrame) -> dict[str, Any]:
    """Calls, window cost, the top tool's share of it, truncated results, drops and refusals.

    ``table`` is a :func:`tool_ranking` result (any order), so the ranking is computed once.
    """
    table = table.sort_values("window_cost_tokens", ascending=False) if not table.empty else table
    totals = collector_totals(con)
    calls = int(table["calls"].sum()) if not table.empty else 0
    cost = float(table["window_cost_tokens"].sum()) if not table.empty else 0.0
    top_share = float(table["window_cost_tokens"].iloc[0]) / cost if cost else 0.0
    truncated = float((table["truncated_rate"] * table["calls"]).sum()) if not table.empty else 0.0
    return {
        "calls": calls,
        "window_cost_tokens": cost,
        "top_tool": str(table["tool"].iloc[0]) if not table.empty else "",
        "top_tool_share": top_share,
        "truncated": round(truncated),
        "dropped": totals["dropped"],
        "failed": totals["failed"],
        "refused": totals["refused"],
    }


def filter_options(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Values for the sidebar filters: from the daily rollups for the days they cover, from the
    rows for the others (so the options are every value stored, at any store size)."""
    days, _ = rolled_days(con, Filters())
    rest, params = uncovered_calls(Filters(), days)
    cols = "tool_name, service_name, encoding"
    source = "tool_calls" if not days else f"(SELECT {cols} FROM tool_day_stats UNION ALL SELECT {cols} FROM ({rest}))"
    # one pass for the three lists: on a store of 10M calls 9.3-9.9 ms against 13.3-13.7 for three
    lists = ", ".join(f"list(DISTINCT {c} ORDER BY {c}) FILTER (WHERE {c} IS NOT NULL)" for c in cols.split(", "))
    row = con.execute(f"SELECT {lists} FROM {source}", params if days else []).fetchone()
    tools, services, encodings = ((v or []) for v in (row or (None, None, None)))
    return {"services": services, "tools": tools, "encodings": encodings}


def time_bounds(con: duckdb.DuckDBPyConnection) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    row = con.execute("SELECT min(start_time), max(start_time) FROM tool_calls").fetchone()
    if row is None or row[0] is None:
        return None, None
    return pd.Timestamp(row[0]), pd.Timestamp(row[1])


# --- tool detail ---------------------------------------------------------------------------


def size_histogram(con: duckdb.DuckDBPyConnection, filters: Filters, tool: str, metric: str) -> pd.DataFrame:
    """Counts of calls per log-spaced size bin (10 bins per decade): columns lo, hi, calls, errors.

    Only sizes above zero have a place on a log axis: empty results (most failed calls) are
    counted by :func:`size_percentiles` as ``empty``, not drawn as 1-token bars.
    """
    if metric not in SIZE_METRICS:
        raise ValueError(f"metric={metric!r}: choose one of {', '.join(SIZE_METRICS)}")
    where, params = filters.where()
    sql = f"""
        WITH v AS (SELECT {metric} AS x, status = 'error' AS failed FROM tool_calls
                   WHERE {where} AND tool_name = ? AND {metric} > 0),
        b AS (SELECT floor(log10(x) * 10) AS bin, count(*) AS calls, count(*) FILTER (WHERE failed) AS errors
              FROM v GROUP BY bin)
        SELECT power(10, bin / 10) AS lo, power(10, (bin + 1) / 10) AS hi, calls, errors FROM b ORDER BY bin
    """
    return _df(con, sql, [*params, tool])


def size_percentiles(
    con: duckdb.DuckDBPyConnection, filters: Filters, tool: str, metric: str
) -> dict[str, float | None]:
    """p50, p95, p99, max of ``metric``, the tool's budget, and the calls off the histogram's
    log axis: ``empty`` (size 0; ``empty_errors`` of them failed) and ``unknown`` (not measured)."""
    if metric not in SIZE_METRICS:
        raise ValueError(f"metric={metric!r}: choose one of {', '.join(SIZE_METRICS)}")
    where, params = filters.where()
    row = con.execute(
        f"""SELECT quantile_cont({metric}, 0.5), quantile_cont({metric}, 0.95), quantile_cont({metric}, 0.99),
                   max({metric}), max(budget_tokens), count(*), count(*) FILTER (WHERE {metric} = 0),
                   count(*) FILTER (WHERE {metric} = 0 AND status = 'error'), count(*) - count({metric})
            FROM tool_calls WHERE {where} AND tool_name = ?""",
        [*params, tool],
    ).fetchone()
    assert row is not None
    keys = ("p50", "p95", "p99", "max", "budget_tokens", "calls", "empty", "empty_errors", "unknown")
    return dict(zip(keys, row, strict=True))


def declared_budget(con: duckdb.DuckDBPyConnection, tool: str) -> int | None:
    """The largest budget the tool declared on any call (whatever the filters), or None."""
    row = con.execute("SELECT max(budget_tokens) FROM tool_calls WHERE tool_name = ?", [tool]).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def daily_envelope(con: duckdb.DuckDBPyConnection, filters: Filters, tool: str) -> pd.DataFrame:
    """Per day: calls, p50/p99 of view and raw tokens, truncation and over-budget rates,
    and the day's dominant schema fingerprint (errors excluded from the schema)."""
    where, params = filters.where()
    sql = f"""
        WITH c AS (SELECT * FROM tool_calls WHERE {where} AND tool_name = ?),
        fp AS (
            SELECT day, first(schema_fingerprint ORDER BY n DESC, schema_fingerprint) AS schema_fingerprint
            FROM (
                SELECT start_time::DATE AS day, schema_fingerprint, count(*) AS n
                FROM c WHERE schema_fingerprint IS NOT NULL AND status <> 'error' GROUP BY 1, 2
            ) GROUP BY day
        )
        SELECT start_time::DATE AS day, count(*) AS calls,
               quantile_cont(view_tokens, 0.5) AS view_p50, quantile_cont(view_tokens, 0.99) AS view_p99,
               quantile_cont(raw_tokens, 0.99) AS raw_p99,
               avg(CASE WHEN truncated THEN 1.0 ELSE 0.0 END) AS truncated_rate,
               avg(CASE WHEN over_budget THEN 1.0 WHEN over_budget IS NULL THEN NULL ELSE 0.0 END) AS over_budget_rate,
               any_value(fp.schema_fingerprint) AS fingerprint
        FROM c LEFT JOIN fp ON fp.day = c.start_time::DATE
        GROUP BY 1 ORDER BY 1
    """
    return _df(con, sql, [*params, tool])


@dataclass(frozen=True)
class SchemaChange:
    """The day a new fingerprint became a tool's dominant one, and what changed."""

    day: date
    before: str
    after: str
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]


def diff_fields(before: list[str], after: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(added, removed, type-changed) between two ``path:type`` field lists."""
    diff = schema_diff(before, after)
    return tuple(diff["added"]), tuple(diff["removed"]), tuple(diff["changed"])


def schema_changes(con: duckdb.DuckDBPyConnection, filters: Filters, tool: str) -> list[SchemaChange]:
    """Days on which the tool's dominant schema fingerprint changed, with the field diff."""
    days = daily_envelope(con, filters, tool)
    changes: list[SchemaChange] = []
    previous: str | None = None
    for day, fp in zip(days["day"], days["fingerprint"], strict=True):
        if not isinstance(fp, str):
            continue
        if previous is not None and fp != previous:
            added, removed, changed = diff_fields(schema_fields(con, tool, previous), schema_fields(con, tool, fp))
            changes.append(SchemaChange(pd.Timestamp(day).date(), previous, fp, added, removed, changed))
        previous = fp
    return changes


def largest_calls(con: duckdb.DuckDBPyConnection, filters: Filters, tool: str, limit: int = 20) -> pd.DataFrame:
    """The tool's largest calls by view tokens, for links into the replay."""
    where, params = filters.where()
    sql = f"""
        SELECT trace_id, span_id, start_time, service_name, view_tokens, raw_tokens, raw_bytes,
               truncated, over_budget, view_over_budget, status
        FROM tool_calls WHERE {where} AND tool_name = ?
        ORDER BY view_tokens DESC NULLS LAST, raw_tokens DESC NULLS LAST LIMIT ?
    """
    return _df(con, sql, [*params, tool, limit])


# --- trace replay --------------------------------------------------------------------------

TRACE_ORDERS = {
    "largest": "max_view_tokens DESC NULLS LAST",
    "truncated": "truncated_calls DESC, max_view_tokens DESC NULLS LAST",
    "newest": "started DESC",
}


def find_traces(
    con: duckdb.DuckDBPyConnection,
    filters: Filters,
    order: str = "largest",
    trace_id: str = "",
    tool: str | None = None,
    limit: int = 50,
) -> pd.DataFrame:
    """Traces with tool calls, matching a trace-id prefix and/or containing ``tool``."""
    if order not in TRACE_ORDERS:
        raise ValueError(f"order={order!r}: choose one of {', '.join(TRACE_ORDERS)}")
    where, params = filters.where()
    extra = ""
    if trace_id:
        extra += " AND trace_id LIKE ? || '%'"
        params.append(trace_id.strip().lower())
    if tool:
        extra += " AND trace_id IN (SELECT trace_id FROM tool_calls WHERE tool_name = ?)"
        params.append(tool)
    # Pick candidate traces with a top-N over calls (cheap), then aggregate only those:
    # grouping every trace of a million-call store first would take seconds.
    pick = {
        "largest": f"SELECT trace_id FROM tool_calls WHERE {where}{extra} ORDER BY view_tokens DESC NULLS LAST LIMIT ?",
        "newest": f"SELECT trace_id FROM tool_calls WHERE {where}{extra} ORDER BY start_ns DESC LIMIT ?",
        "truncated": f"""SELECT trace_id FROM tool_calls WHERE {where}{extra} AND truncated GROUP BY trace_id
                         ORDER BY count(*) DESC, max(view_tokens) DESC NULLS LAST LIMIT ?""",
    }[order]
    sql = f"""
        WITH candidates AS (SELECT DISTINCT trace_id FROM ({pick}))
        SELECT trace_id, min(start_time) AS started, any_value(service_name) AS service,
               count(*) AS tool_calls, max(view_tokens) AS max_view_tokens,
               sum(view_tokens) AS view_tokens, count(*) FILTER (WHERE truncated) AS truncated_calls,
               string_agg(DISTINCT tool_name, ', ' ORDER BY tool_name) AS tools
        FROM tool_calls WHERE trace_id IN (SELECT trace_id FROM candidates)
        GROUP BY trace_id ORDER BY {TRACE_ORDERS[order]} LIMIT ?
    """
    return _df(con, sql, [*params, limit * 20, limit])


def trace_steps(con: duckdb.DuckDBPyConnection, trace_id: str) -> pd.DataFrame:
    """Every LLM call and tool call of a trace, in time order."""
    sql = """
        SELECT 'llm' AS kind, span_id, start_ns, end_ns, start_time, model AS name, input_tokens, output_tokens,
               NULL::BIGINT AS view_tokens, NULL::BIGINT AS raw_tokens, NULL::BIGINT AS raw_bytes,
               NULL::BIGINT AS view_bytes, NULL::BOOLEAN AS truncated, NULL AS status,
               NULL::BOOLEAN AS view_over_budget
        FROM llm_calls WHERE trace_id = ?
        UNION ALL
        SELECT 'tool', span_id, start_ns, end_ns, start_time, tool_name, NULL, NULL,
               view_tokens, raw_tokens, raw_bytes, view_bytes, truncated, status, view_over_budget
        FROM tool_calls WHERE trace_id = ?
        ORDER BY start_ns, kind
    """
    return _df(con, sql, [trace_id, trace_id])


def tool_call(con: duckdb.DuckDBPyConnection, trace_id: str, span_id: str) -> dict[str, Any] | None:
    """Every stored figure of one tool call."""
    cur = con.execute("SELECT * FROM tool_calls WHERE trace_id = ? AND span_id = ?", [trace_id, span_id])
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([d[0] for d in cur.description], row, strict=True))


REMAINDER = "rest of the input (reported input − tool results)"
"""The occupancy chart's remainder: what the LLM call reported minus the tool results it held
(system prompt, messages, the model's own turns), measured by subtraction, not counted."""


def context_occupancy(con: duckdb.DuckDBPyConnection, trace_id: str) -> pd.DataFrame:
    """For each LLM call of a trace: tokens in the window by source.

    Each tool's results count from the first LLM call after they ended until the call whose
    input left them out (context editing, compaction: ``cleared_at_ns``); :data:`REMAINDER`
    is the call's reported input tokens minus those results (when the call reported them).
    Columns: step, llm_span_id, source, tokens.
    """
    sql = """
        WITH l AS (
            SELECT span_id, start_ns, input_tokens, row_number() OVER (ORDER BY start_ns) AS step
            FROM llm_calls WHERE trace_id = ?
        ),
        t AS (SELECT tool_name, end_ns, cleared_at_ns, coalesce(view_tokens, 0) AS tokens
              FROM tool_calls WHERE trace_id = ?),
        per_tool AS (
            SELECT l.step, l.span_id, t.tool_name AS source, sum(t.tokens) AS tokens
            FROM l JOIN t ON t.end_ns <= l.start_ns AND (t.cleared_at_ns IS NULL OR l.start_ns < t.cleared_at_ns)
            GROUP BY ALL
        ),
        rest AS (
            SELECT l.step, l.span_id, ? AS source,
                   greatest(l.input_tokens - coalesce(sum(p.tokens), 0), 0) AS tokens
            FROM l LEFT JOIN per_tool p ON p.step = l.step
            WHERE l.input_tokens IS NOT NULL GROUP BY l.step, l.span_id, l.input_tokens
        )
        SELECT step, span_id AS llm_span_id, source, tokens FROM per_tool
        UNION ALL SELECT step, span_id, source, tokens FROM rest
        ORDER BY step, source
    """
    return _df(con, sql, [trace_id, trace_id, REMAINDER])


def context_events(con: duckdb.DuckDBPyConnection, trace_id: str) -> pd.DataFrame:
    """The LLM calls of a trace whose input left tool results out: step (as in
    :func:`context_occupancy`), kind (``context edit`` or ``compaction``), the tool uses and
    input tokens cleared (where reported), and the results that left the window there."""
    sql = """
        WITH l AS (
            SELECT span_id, start_ns, cleared_tool_uses, cleared_input_tokens,
                   coalesce(compacted, false) OR coalesce(compaction_parts, 0) >
                       coalesce(lag(compaction_parts) OVER (ORDER BY start_ns), 0) AS compacts,
                   row_number() OVER (ORDER BY start_ns) AS step
            FROM llm_calls WHERE trace_id = ?
        )
        SELECT l.step, CASE WHEN l.compacts THEN 'compaction' ELSE 'context edit' END AS kind,
               l.cleared_tool_uses, l.cleared_input_tokens,
               (SELECT count(*) FROM tool_calls t WHERE t.trace_id = ? AND t.cleared_at_ns = l.start_ns) AS results_left
        FROM l WHERE l.compacts OR l.cleared_tool_uses > 0
        ORDER BY l.step
    """
    return _df(con, sql, [trace_id, trace_id])


# --- alerts --------------------------------------------------------------------------------


def alerts(
    con: duckdb.DuckDBPyConnection, states: tuple[str, ...] = ("open", "acknowledged"), filters: Filters | None = None
) -> list[dict[str, Any]] | None:
    """Alerts in the given states, newest change first, evidence decoded; None when the
    store predates alerts. ``filters`` keeps the alerts of its tools whose change falls in
    its time range (alerts are per tool, across services: the service filter does not apply)."""
    exists = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'alerts'").fetchone()
    if not exists or not exists[0]:
        return None
    cur = con.execute(
        "SELECT * FROM alerts WHERE state IN (SELECT unnest(?::VARCHAR[])) ORDER BY change_at DESC, tool_name, kind = 'run_growth', kind",
        [list(states)],
    )
    rows = rows_as_dicts(cur)
    if filters is not None:
        rows = [r for r in rows if (not filters.tools or r["tool_name"] in filters.tools)
                and (filters.since is None or r["change_at"] >= filters.since)
                and (filters.until is None or r["change_at"] < filters.until)]  # fmt: skip
    for row in rows:
        if isinstance(row.get("evidence"), str):
            row["evidence"] = json.loads(row["evidence"])
    return rows


def before_after_histogram(con: duckdb.DuckDBPyConnection, tool: str, evidence: dict[str, Any]) -> pd.DataFrame:
    """View-token histograms (10 log bins a decade) of the windows before and after an alert's
    change: columns side, lo, calls. Every bin between the smallest and the largest is present
    (empty ones with 0 calls, so a step line drops between clusters); empty results, which a
    log axis cannot place, are one row with ``lo`` 0."""
    sql = """
        WITH v AS (
            SELECT CASE WHEN start_time < ?::TIMESTAMP THEN 'before' ELSE 'after' END AS side, view_tokens AS x
            FROM tool_calls WHERE tool_name = ? AND start_time >= ?::TIMESTAMP AND start_time < ?::TIMESTAMP
              AND view_tokens IS NOT NULL),
        b AS (SELECT side, CASE WHEN x > 0 THEN floor(log10(x) * 10)::INT END AS bin, count(*) AS calls
              FROM v GROUP BY ALL),
        span AS (SELECT min(bin) AS lo, max(bin) AS hi FROM b),
        grid AS (SELECT s.side, g.bin FROM (SELECT DISTINCT side FROM b) s, span,
                 LATERAL (SELECT unnest(range(span.lo, span.hi + 1)) AS bin) g WHERE span.lo IS NOT NULL)
        SELECT grid.side, power(10, grid.bin / 10) AS lo, coalesce(b.calls, 0) AS calls
        FROM grid LEFT JOIN b ON b.side = grid.side AND b.bin = grid.bin
        UNION ALL SELECT side, 0, calls FROM b WHERE bin IS NULL
        ORDER BY side, lo
    """
    b, a = evidence["before"], evidence["after"]
    return _df(con, sql, [a["start"], tool, b["start"], a["end"]])


# --- coverage ------------------------------------------------------------------------------


def coverage(con: duckdb.DuckDBPyConnection, filters: Filters) -> list[dict[str, Any]]:
    """Per service and dialect: shares of tool calls with a raw, a view, a call id, and the hints
    (``collector.query.coverage``). Only the time range and services apply: LLM calls have no tool or encoding."""
    return cov.coverage(con, Filters(since=filters.since, until=filters.until, services=filters.services))
