"""Dashboard queries: plain functions from a connection and filters to DataFrames.

No Streamlit here; every aggregate is computed in DuckDB with bound parameters.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from collector.report import Filters, collector_totals, ranking


def tool_ranking(con: duckdb.DuckDBPyConnection, filters: Filters, by: str = "view") -> pd.DataFrame:
    """Per-tool percentiles, rates and window cost, sorted by ``by``."""
    return pd.DataFrame(ranking(con, filters, by=by))


def kpis(con: duckdb.DuckDBPyConnection, filters: Filters) -> dict[str, float]:
    """Calls, window cost, the top tool's share of it, truncated results, drops."""
    table = tool_ranking(con, filters, by="cost")
    totals = collector_totals(con)
    calls = int(table["calls"].sum()) if not table.empty else 0
    cost = float(table["window_cost_tokens"].sum()) if not table.empty else 0.0
    top_share = float(table["window_cost_tokens"].iloc[0]) / cost if cost else 0.0
    truncated = float((table["truncated_rate"] * table["calls"]).sum()) if not table.empty else 0.0
    return {
        "calls": calls,
        "window_cost_tokens": cost,
        "top_tool_share": top_share,
        "truncated": round(truncated),
        "dropped": totals["dropped"],
        "failed": totals["failed"],
    }


def filter_options(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Values for the sidebar filters."""

    def values(column: str) -> list[str]:
        rows = con.execute(
            f"SELECT DISTINCT {column} FROM tool_calls WHERE {column} IS NOT NULL ORDER BY 1"  # column is ours
        ).fetchall()
        return [r[0] for r in rows]

    return {"services": values("service_name"), "tools": values("tool_name"), "encodings": values("encoding")}


def time_bounds(con: duckdb.DuckDBPyConnection) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    row = con.execute("SELECT min(start_time), max(start_time) FROM tool_calls").fetchone()
    if row is None or row[0] is None:
        return None, None
    return pd.Timestamp(row[0]), pd.Timestamp(row[1])
