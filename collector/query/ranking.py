"""Queries over the store shared by the CLI and the dashboard: named functions, bound values.

Window cost: a tool result stays in the context and is re-read by every later model
call of its trace, so its cost is ``view_tokens x (LLM calls in the trace that start
after the tool call ended)``; the store keeps that count per call (``later_llm_calls``,
see ``collector.store.database``). A trace with no recorded LLM calls adds no window cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from collector.errors import ConfigError
from collector.store.database import rows_as_dicts

RANK_METRICS = {
    "view": "view_tokens_p99",
    "raw": "raw_tokens_p99",
    "bytes": "raw_bytes_p99",
    "cost": "window_cost_tokens",
}
"""``--by`` choices and the column each one sorts by."""


@dataclass(frozen=True)
class Filters:
    """Filters shared by every query: all optional, all bound as parameters."""

    since: datetime | None = None
    until: datetime | None = None
    services: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    encoding: str | None = None

    def where(self, alias: str = "") -> tuple[str, list[Any]]:
        """A SQL condition over ``tool_calls`` and its parameters."""
        p = f"{alias}." if alias else ""
        clauses = ["TRUE"]
        params: list[Any] = []
        if self.since is not None:
            clauses.append(f"{p}start_time >= ?")
            params.append(self.since)
        if self.until is not None:
            clauses.append(f"{p}start_time < ?")
            params.append(self.until)
        if self.services:
            clauses.append(f"{p}service_name IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(self.services))
        if self.tools:
            clauses.append(f"{p}tool_name IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(self.tools))
        if self.encoding:
            clauses.append(f"{p}encoding = ?")
            params.append(self.encoding)
        return " AND ".join(clauses), params


def _calls(filters: Filters) -> tuple[str, list[Any]]:
    where, params = filters.where("t")
    sql = f"""
        SELECT t.*, t.view_tokens * coalesce(t.later_llm_calls, 0) AS window_cost_tokens
        FROM tool_calls t WHERE {where}
    """
    return sql, params


def ranking(con: duckdb.DuckDBPyConnection, filters: Filters | None = None, by: str = "view") -> list[dict[str, Any]]:
    """Per tool: calls, percentiles of view and raw tokens, bytes, rates, window cost.

    Two budget rates: ``raw_over_budget_rate`` (the tool produced more than its budget; also
    ``over_budget_rate``, its older name) and ``view_over_budget_rate`` (what the model was
    shown was still over it: the budget did not hold). Calls without a budget count in neither.

    Percentiles are exact (``quantile_cont`` over every call).
    """
    if by not in RANK_METRICS:
        raise ConfigError(f"by={by!r}: choose one of {', '.join(RANK_METRICS)}")
    inner, params = _calls(filters or Filters())
    # one list-valued quantile per column: a single sort serves p50, p95 and p99 (half the
    # time of three separate aggregates on 10M calls)
    sql = f"""
        SELECT tool, calls,
               vq[1] AS view_tokens_p50, vq[2] AS view_tokens_p95, vq[3] AS view_tokens_p99, view_tokens_max,
               rq[1] AS raw_tokens_p50, rq[2] AS raw_tokens_p95, rq[3] AS raw_tokens_p99, raw_tokens_max,
               raw_bytes_p99, view_bytes_p99, raw_bytes_total, truncated_rate, over_budget_rate,
               over_budget_rate AS raw_over_budget_rate, view_over_budget_rate, budget_tokens,
               window_cost_tokens, errors
        FROM (
            SELECT tool_name AS tool,
                   count(*) AS calls,
                   quantile_cont(view_tokens, [0.5, 0.95, 0.99]) AS vq,
                   max(view_tokens) AS view_tokens_max,
                   quantile_cont(raw_tokens, [0.5, 0.95, 0.99]) AS rq,
                   max(raw_tokens) AS raw_tokens_max,
                   quantile_cont(raw_bytes, 0.99) AS raw_bytes_p99,
                   quantile_cont(view_bytes, 0.99) AS view_bytes_p99,
                   sum(raw_bytes) AS raw_bytes_total,
                   avg(CASE WHEN truncated THEN 1.0 ELSE 0.0 END) AS truncated_rate,
                   avg(CASE WHEN over_budget THEN 1.0 WHEN over_budget IS NULL THEN NULL ELSE 0.0 END)
                       AS over_budget_rate,
                   avg(CASE WHEN view_over_budget THEN 1.0 WHEN view_over_budget IS NULL THEN NULL ELSE 0.0 END)
                       AS view_over_budget_rate,
                   max(budget_tokens) AS budget_tokens,
                   coalesce(sum(window_cost_tokens), 0) AS window_cost_tokens,
                   count(*) FILTER (WHERE status = 'error') AS errors
            FROM ({inner})
            GROUP BY tool_name
        )
        ORDER BY {RANK_METRICS[by]} DESC NULLS LAST, tool
    """
    cur = con.execute(sql, params)
    rows = rows_as_dicts(cur)
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and key.endswith(("_p50", "_p95", "_p99", "_rate")):
                row[key] = round(value, 4)
    return rows


def collector_totals(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Sums of every collector's counters (dropped, failed, written...)."""
    # a lake appends a row per flush: each collector's latest row holds its running totals
    row = con.execute(
        """SELECT coalesce(sum(spans_seen), 0), coalesce(sum(dropped), 0), coalesce(sum(failed), 0),
                  coalesce(sum(tool_calls_written), 0), coalesce(sum(duplicates), 0), coalesce(sum(refused), 0)
           FROM (SELECT * FROM collector_stats
                 QUALIFY row_number() OVER (PARTITION BY collector_id ORDER BY updated_at DESC,
                                                         tool_calls_written + llm_calls_written DESC) = 1)"""
    ).fetchone()
    assert row is not None
    keys = ("spans_seen", "dropped", "failed", "tool_calls_written", "duplicates", "refused")
    return dict(zip(keys, (int(v) for v in row), strict=True))
