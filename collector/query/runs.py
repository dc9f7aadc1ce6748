"""Transcript size per run: what one agent run's tool results put into its context, and how that
is spread over the runs of each service.

A run is a trace. Its size is the sum of its tool results' ``view_tokens`` (what the model was
shown); its window cost, the sum of their re-reads. A service whose runs grow is the signal to
watch even when no single tool grew much: :mod:`collector.alerts.runs` alerts on it.
"""

from __future__ import annotations

from typing import Any

import duckdb

from collector.query.ranking import Filters
from collector.store.connection import rows_as_dicts

NO_SERVICE = "(no service)"
"""The service of runs whose spans name none."""

_RUNS = """
    SELECT trace_id, coalesce(any_value(service_name), '{no_service}') AS service, min(start_time) AS started,
           count(*) AS tool_calls, coalesce(sum(view_tokens), 0) AS result_tokens,
           coalesce(sum(raw_tokens), 0) AS raw_tokens,
           coalesce(sum(view_tokens * coalesce(later_llm_calls, 0)), 0) AS window_cost_tokens
    FROM tool_calls WHERE {where}
    GROUP BY trace_id
"""


def runs_sql(filters: Filters) -> tuple[str, list[Any]]:
    """One row per run (trace) in ``filters``."""
    where, params = filters.where()
    return _RUNS.format(where=where, no_service=NO_SERVICE), params


def service_runs_sql() -> str:
    """One row per run of one service, whose name (:data:`NO_SERVICE` for none) is the one parameter."""
    return _RUNS.format(where=f"coalesce(service_name, '{NO_SERVICE}') = ?", no_service=NO_SERVICE)


def run_sizes(con: duckdb.DuckDBPyConnection, filters: Filters | None = None, limit: int = 200) -> list[dict[str, Any]]:
    """The largest runs first."""
    sql, params = runs_sql(filters or Filters())
    return rows_as_dicts(con.execute(f"{sql} ORDER BY result_tokens DESC, trace_id LIMIT {int(limit)}", params))


def run_distribution(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> list[dict[str, Any]]:
    """Per service: runs, and the p50 / p95 / p99 / max of tool-result tokens per run."""
    sql, params = runs_sql(filters or Filters())
    rows = rows_as_dicts(
        con.execute(
            f"""SELECT service, n AS runs, q[1] AS result_tokens_p50, q[2] AS result_tokens_p95,
                       q[3] AS result_tokens_p99, max_tokens AS result_tokens_max, calls_per_run,
                       window_cost_tokens
                FROM (SELECT service, count(*) AS n, quantile_cont(result_tokens, [0.5, 0.95, 0.99]) AS q,
                             max(result_tokens) AS max_tokens, avg(tool_calls) AS calls_per_run,
                             sum(window_cost_tokens) AS window_cost_tokens
                      FROM ({sql}) GROUP BY service)
                ORDER BY result_tokens_p99 DESC NULLS LAST, service""",
            params,
        )
    )
    for row in rows:
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = round(v, 2)
    return rows
