"""Queries over the store shared by the CLI and the dashboard: named functions, bound values.

Window cost: a tool result stays in the context and is re-read by every later model
call of its trace, so its cost is ``view_tokens x (LLM calls in the trace that start
after the tool call ended)``; the store keeps that count per call (``later_llm_calls``,
see ``collector.store.database``). A trace with no recorded LLM calls adds no window cost.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate, groupby
from operator import itemgetter
from typing import Any

import duckdb

from collector.errors import ConfigError
from collector.store import rollup as R
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


def ranking(
    con: duckdb.DuckDBPyConnection, filters: Filters | None = None, by: str = "view", exact: bool | None = True
) -> list[dict[str, Any]]:
    """Per tool: calls, percentiles of view and raw tokens, bytes, rates, window cost.

    Two budget rates: ``raw_over_budget_rate`` (the tool produced more than its budget; also
    ``over_budget_rate``, its older name) and ``view_over_budget_rate`` (what the model was
    shown was still over it: the budget did not hold). Calls without a budget count in neither.

    ``exact=True`` computes percentiles over every call (``quantile_cont``); ``False`` reads
    the days that have a rollup from it (percentiles within 1 %, everything else exact; see
    :mod:`collector.store.rollup`) and only the other days from the rows; ``None`` chooses
    the rollups when they stand for more than :data:`ROLLUP_WHEN_CALLS` calls. Each row says
    which in ``percentiles``: ``exact`` or ``rollup``.
    """
    if by not in RANK_METRICS:
        raise ConfigError(f"by={by!r}: choose one of {', '.join(RANK_METRICS)}")
    filters = filters or Filters()
    if exact is not True:
        days, covered_calls = rolled_days(con, filters)
        if days and (exact is False or covered_calls > ROLLUP_WHEN_CALLS):
            return _from_rollups(con, filters, by, days)
    inner, params = _calls(filters)
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
    return _rounded(rows_as_dicts(con.execute(sql, params)), "exact")


def _rounded(rows: list[dict[str, Any]], percentiles: str) -> list[dict[str, Any]]:
    for row in rows:
        for key, value in row.items():
            if isinstance(value, float) and key.endswith(("_p50", "_p95", "_p99", "_rate")):
                row[key] = round(value, 4)
        row["percentiles"] = percentiles
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


ROLLUP_WHEN_CALLS = 1_000_000
"""With ``exact=None``, rollups are read when the days they cover hold more calls than this
(below it, exact percentiles over the rows take well under a tenth of a second)."""


def _dimensions(filters: Filters) -> Filters:
    return Filters(services=filters.services, tools=filters.tools, encoding=filters.encoding)


def rolled_days(con: duckdb.DuckDBPyConnection, filters: Filters) -> tuple[list[tuple[Any, str]], int]:
    """The days wholly inside the filters' time range that have a rollup, each with the roll
    read for it (the least, should two writers have rolled it), and the calls they hold
    (([], 0) for a store without rollups)."""
    where, params = _dimensions(filters).where("s")
    try:
        rows = con.execute(
            f"""WITH d AS (SELECT day, min(roll_id) AS roll_id FROM rollup_days
                           WHERE (?::TIMESTAMP IS NULL OR day::TIMESTAMP >= ?::TIMESTAMP)
                             AND (?::TIMESTAMP IS NULL OR day < ?::TIMESTAMP::DATE) GROUP BY day)
                SELECT d.day, d.roll_id, coalesce(sum(s.calls), 0) FROM d
                LEFT JOIN tool_day_stats s ON s.day = d.day AND s.roll_id = d.roll_id AND {where}
                GROUP BY d.day, d.roll_id ORDER BY d.day""",
            [filters.since, filters.since, filters.until, filters.until, *params],
        ).fetchall()
    except duckdb.CatalogException:  # a store from before rollups
        return [], 0
    return [(d, r) for d, r, _ in rows], sum(int(n) for _, _, n in rows)


def _rolled_months(con: duckdb.DuckDBPyConnection, filters: Filters) -> list[tuple[Any, str]]:
    """The merged months wholly inside the filters' time range, each with the roll read for it
    (none in a store whose writer predates merged months: its days are read one by one)."""
    try:
        rows = con.execute(
            """SELECT month, min(roll_id) FROM tool_month_buckets
               WHERE (?::TIMESTAMP IS NULL OR month::TIMESTAMP >= ?::TIMESTAMP)
                 AND (?::TIMESTAMP IS NULL OR month + INTERVAL 1 MONTH <= ?::TIMESTAMP)
               GROUP BY month ORDER BY month""",
            [filters.since, filters.since, filters.until, filters.until],
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [(m, r) for m, r in rows]


def uncovered_calls(filters: Filters, days: list[Any]) -> tuple[str, list[Any]]:
    """The calls of ``filters`` outside the rolled ``days``: one range scan per gap, so DuckDB
    skips the row groups of rolled days by their start-time ranges."""
    import datetime as dt

    gaps: list[tuple[Any, Any]] = []
    lo = filters.since
    for day, _ in days:
        start = dt.datetime.combine(day, dt.time())
        if lo is None or lo < start:
            gaps.append((lo, start))
        lo = start + dt.timedelta(days=1)
    gaps.append((lo, filters.until))
    parts, params = [], []
    for since, until in gaps:
        where, p = Filters(since, until, filters.services, filters.tools, filters.encoding).where()
        parts.append(f"SELECT * FROM tool_calls WHERE {where}")
        params += p
    return " UNION ALL ".join(parts), params


_QUANTILES = (0.5, 0.95, 0.99)
_ESTIMATES = tuple(f"{m}_q{int(q * 100)}" for m in R.METRICS for q in _QUANTILES)
"""The percentile columns :func:`_from_rollups` reads from the histograms, per tool."""


def _from_rollups(
    con: duckdb.DuckDBPyConnection, filters: Filters, by: str, days: list[tuple[Any, str]]
) -> list[dict[str, Any]]:
    rest, rest_params = uncovered_calls(filters, days)
    months = _rolled_months(con, filters)
    merged = {m for m, _ in months}
    # histograms: a merged month's where there is one, else its days'
    day_buckets = [(d, r) for d, r in days if d.replace(day=1) not in merged]
    dims, dim_params = _dimensions(filters).where("s")
    histograms = con.execute(
        f"""
        WITH rest AS ({rest}),
        day_rolls AS (SELECT unnest(?::DATE[]) AS day, unnest(?::VARCHAR[]) AS roll_id),
        month_rolls AS (SELECT unnest(?::DATE[]) AS month, unnest(?::VARCHAR[]) AS roll_id)
        SELECT tool_name, metric, bucket, sum(calls)::BIGINT FROM (
            SELECT tool_name, metric, bucket, calls FROM tool_month_buckets s
            JOIN month_rolls USING (month, roll_id) WHERE {dims}
            UNION ALL
            SELECT tool_name, metric, bucket, calls FROM tool_day_buckets s
            JOIN day_rolls USING (day, roll_id) WHERE {dims}
            UNION ALL {R.buckets_select("rest", "tool_name")}
        ) GROUP BY ALL ORDER BY ALL""",
        [*rest_params, [d for d, _ in day_buckets], [r for _, r in day_buckets], [m for m, _ in months],
         [r for _, r in months], *dim_params, *dim_params],
    ).fetchall()  # fmt: skip
    estimates = _percentiles(histograms)
    stat_cols = ("calls", "errors", "truncated", "over_known", "over_yes", "view_over_known", "view_over_yes",
                 "raw_bytes_sum", "window_cost")  # fmt: skip
    max_cols = ("budget_max", "view_tokens_max", "raw_tokens_max", "raw_bytes_max", "view_bytes_max")
    both = ", ".join((*stat_cols, *max_cols))
    # a percentile is never above the largest size (a bucket's value is up to 1 % above its sizes)
    picks = ", ".join(f"least(pv.{c}, st.{c.rsplit('_q', 1)[0]}_max) AS {c}" for c in _ESTIMATES)
    tools = sorted(estimates)
    sql = f"""
        WITH rest AS ({rest}),
        rolls AS (SELECT unnest(?::DATE[]) AS day, unnest(?::VARCHAR[]) AS roll_id),
        parts AS (
            SELECT tool_name, {both} FROM tool_day_stats s JOIN rolls USING (day, roll_id) WHERE {dims}
            UNION ALL BY NAME SELECT tool_name, {R.STATS_SELECT} FROM rest GROUP BY tool_name
        ),
        st AS (SELECT tool_name, {", ".join(f"sum({c}) AS {c}" for c in stat_cols)},
                      {", ".join(f"max({c}) AS {c}" for c in max_cols)} FROM parts GROUP BY tool_name),
        pv AS (SELECT unnest(?::VARCHAR[]) AS tool_name,
                      {", ".join(f"unnest(?::DOUBLE[]) AS {c}" for c in _ESTIMATES)}),
        est AS (SELECT st.*, {picks} FROM st LEFT JOIN pv USING (tool_name))
        SELECT tool_name AS tool, calls::BIGINT AS calls,
               view_tokens_q50 AS view_tokens_p50, view_tokens_q95 AS view_tokens_p95,
               view_tokens_q99 AS view_tokens_p99, view_tokens_max,
               raw_tokens_q50 AS raw_tokens_p50, raw_tokens_q95 AS raw_tokens_p95,
               raw_tokens_q99 AS raw_tokens_p99, raw_tokens_max,
               raw_bytes_q99 AS raw_bytes_p99, view_bytes_q99 AS view_bytes_p99,
               raw_bytes_sum AS raw_bytes_total,
               truncated / calls AS truncated_rate,
               CASE WHEN over_known > 0 THEN over_yes / over_known END AS over_budget_rate,
               CASE WHEN over_known > 0 THEN over_yes / over_known END AS raw_over_budget_rate,
               CASE WHEN view_over_known > 0 THEN view_over_yes / view_over_known END AS view_over_budget_rate,
               budget_max AS budget_tokens, coalesce(window_cost, 0)::BIGINT AS window_cost_tokens,
               errors::BIGINT AS errors
        FROM est
        WHERE calls > 0
        ORDER BY {RANK_METRICS[by]} DESC NULLS LAST, tool
    """
    params = [*rest_params, [d for d, _ in days], [r for _, r in days], *dim_params, tools,
              *([estimates[t].get(c) for t in tools] for c in _ESTIMATES)]  # fmt: skip
    return _rounded(rows_as_dicts(con.execute(sql, params)), "rollup")


def _percentiles(histograms: list[tuple[str, str, int, int]]) -> dict[str, dict[str, float]]:
    """Per tool, each of :data:`_ESTIMATES` read from its merged histograms (rows of tool, metric,
    bucket and calls, in that order): the value at rank ``q (n - 1)``, interpolated between the
    buckets holding the ranks either side, as ``quantile_cont`` interpolates between values.
    Here rather than in SQL (a window and two as-of joins over the buckets): a ranking of a
    10M-call store took 65 ms instead of 73 on one connection (BENCHMARKS.md)."""
    estimates: dict[str, dict[str, float]] = {}
    for (tool, metric), rows in groupby(histograms, key=itemgetter(0, 1)):
        buckets, counts = zip(*((b, c) for _, _, b, c in rows), strict=True)
        through = list(accumulate(counts))
        n = through[-1]
        found = estimates.setdefault(tool, {})
        for q in _QUANTILES:
            rank = q * (n - 1)
            # the first bucket whose running count reaches the rank (1-based) below and above it
            lo = R.value_of(buckets[bisect_left(through, math.floor(rank) + 1)])
            hi = R.value_of(buckets[bisect_left(through, math.ceil(rank) + 1)])
            found[f"{metric}_q{int(q * 100)}"] = lo + (rank - math.floor(rank)) * (hi - lo)
    return estimates
