"""Daily rollups of tool calls, so a ranking over months reads thousands of rows, not millions.

Per UTC day, tool, service and encoding, ``tool_day_stats`` keeps exact counts, sums and
maxima, and ``tool_day_buckets`` a histogram of each size (view and raw tokens, raw and view
bytes) in logarithmic buckets: bucket ``k >= 1`` holds the sizes in ``(G^(k-2), G^(k-1)]``
with ``G = (1 + ALPHA) / (1 - ALPHA)``, bucket 0 the zeros. A bucket stands for
``2 G^(k-1) / (G + 1)``, within :data:`ALPHA` (1 %) of every size in it, so a percentile read
from the merged histogram is within 1 % of the exact one (``collector.query.ranking``).

A day is rolled once it is closed (:data:`CLOSED_AFTER` past its end): agent runs last
minutes, and a window-cost count can change for a day after it ends only while later LLM
calls of its traces arrive (``TRACE_HORIZON_NS``). A write that still lands in a rolled day
(a backfill, a late join) removes that day's rollup in the same transaction
(:func:`invalidate`), and the next :func:`refresh` rolls it again; retention removes the
rollups of the days it prunes. Queries never read a day half from rollups and half from
rows: days without a complete rollup are read from the rows.
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Final

import duckdb

ALPHA: Final = 0.01
"""The relative error of a percentile read from the rollups."""
GAMMA: Final = (1 + ALPHA) / (1 - ALPHA)
_LN_GAMMA: Final = math.log(GAMMA)
CLOSED_AFTER: Final = timedelta(days=1)
"""A day is rolled when it ended at least this long before the newest call in the store."""

METRICS: Final = ("view_tokens", "raw_tokens", "raw_bytes", "view_bytes")


def bucket_sql(x: str) -> str:
    """SQL for the bucket of size ``x`` (NULL stays NULL)."""
    return f"CASE WHEN {x} <= 0 THEN 0 ELSE ceil(ln({x}) / {_LN_GAMMA!r})::INTEGER + 1 END"


def value_of(bucket: int) -> float:
    """The size a bucket stands for."""
    return 0.0 if bucket == 0 else 2 * GAMMA ** (bucket - 1) / (GAMMA + 1)


STATS_SELECT: Final = """
    count(*) AS calls,
    count(*) FILTER (WHERE status = 'error') AS errors,
    count(*) FILTER (WHERE truncated) AS truncated,
    count(over_budget) AS over_known, count(*) FILTER (WHERE over_budget) AS over_yes,
    count(view_over_budget) AS view_over_known, count(*) FILTER (WHERE view_over_budget) AS view_over_yes,
    max(budget_tokens) AS budget_max,
    max(view_tokens) AS view_tokens_max, max(raw_tokens) AS raw_tokens_max,
    max(raw_bytes) AS raw_bytes_max, max(view_bytes) AS view_bytes_max,
    sum(raw_bytes) AS raw_bytes_sum,
    sum(view_tokens * coalesce(later_llm_calls, 0)) AS window_cost
"""
"""The per-group aggregates of ``tool_day_stats``, over ``tool_calls`` rows (the ranking
computes the same over the rows no rollup covers)."""


def buckets_select(source: str, group: str) -> str:
    """Histogram rows (``group`` columns, metric, bucket, calls) of every size in ``source``."""
    parts = [
        f"SELECT {group}, '{m}' AS metric, {bucket_sql(m)} AS bucket, count(*) AS calls "
        f"FROM {source} WHERE {m} IS NOT NULL GROUP BY ALL"
        for m in METRICS
    ]
    return " UNION ALL ".join(parts)


_GROUP = "day, roll_id, tool_name, service_name, encoding"


def refresh(con: duckdb.DuckDBPyConnection) -> int:
    """Roll every closed day that has calls and no rollup (in the caller's transaction); returns how many."""
    todo = con.execute(
        f"""SELECT DISTINCT start_time::DATE FROM tool_calls
            WHERE start_time < (SELECT max(start_time)::DATE - INTERVAL {CLOSED_AFTER.days} DAY FROM tool_calls)
              AND start_time::DATE NOT IN (SELECT day FROM rollup_days)"""
    ).fetchall()
    days = [d for (d,) in todo]
    roll = uuid.uuid4().hex
    if not days:
        _roll_months(con, roll)  # a month may close with no new day to roll
        return 0
    source = (
        "(SELECT start_time::DATE AS day, $2 AS roll_id, * FROM tool_calls "
        "WHERE start_time::DATE IN (SELECT unnest($1::DATE[])))"
    )
    con.execute(f"INSERT INTO tool_day_stats SELECT {_GROUP}, {STATS_SELECT} FROM {source} GROUP BY ALL", [days, roll])
    con.execute(f"INSERT INTO tool_day_buckets {buckets_select(source, _GROUP)}", [days, roll])
    con.execute("INSERT INTO rollup_days SELECT unnest(?::DATE[]), now()::TIMESTAMP, ?", [days, roll])
    _roll_months(con, roll)
    return len(days)


def _roll_months(con: duckdb.DuckDBPyConnection, roll: str) -> None:
    """Merge the day histograms of every closed month not merged yet into one per month: a range
    of years then reads a few dozen histograms per tool, not one per day. A month is closed
    when its last day is; by then each of its days with calls has been rolled."""
    con.execute(
        f"""INSERT INTO tool_month_buckets
            WITH d AS (SELECT day, min(roll_id) AS roll_id FROM rollup_days GROUP BY day),
            m AS (SELECT DISTINCT date_trunc('month', day)::DATE AS month FROM d
                  WHERE date_trunc('month', day) + INTERVAL 1 MONTH
                        <= (SELECT max(start_time)::DATE - INTERVAL {CLOSED_AFTER.days} DAY FROM tool_calls)
                    AND date_trunc('month', day)::DATE NOT IN (SELECT month FROM tool_month_buckets))
            SELECT m.month, ? AS roll_id, b.tool_name, b.service_name, b.encoding, b.metric, b.bucket, sum(b.calls)
            FROM tool_day_buckets b JOIN d USING (day, roll_id) JOIN m ON date_trunc('month', b.day)::DATE = m.month
            GROUP BY ALL""",
        [roll],
    )


def invalidate(con: duckdb.DuckDBPyConnection, lo_ns: int, hi_ns: int) -> None:
    """Forget the rollups of the days between ``lo_ns`` and ``hi_ns`` (a write changed their rows)."""
    bounds = "BETWEEN make_timestamp(?::BIGINT // 1000)::DATE AND make_timestamp(?::BIGINT // 1000)::DATE"
    # read first: live traffic lands in days not rolled yet, and a delete (even of nothing)
    # would make concurrent lake writers conflict
    rolled = con.execute(f"SELECT count(*) FROM rollup_days WHERE day {bounds}", [lo_ns, hi_ns]).fetchone()
    if not rolled or not rolled[0]:
        return
    for table in ("rollup_days", "tool_day_stats", "tool_day_buckets"):
        con.execute(f"DELETE FROM {table} WHERE day {bounds}", [lo_ns, hi_ns])
    months = bounds.replace("::DATE AND", "::DATE - INTERVAL 31 DAY AND")  # the months of those days
    con.execute(f"DELETE FROM tool_month_buckets WHERE month {months}", [lo_ns, hi_ns])


def forget_through(con: duckdb.DuckDBPyConnection, cutoff: object) -> None:
    """Forget the rollups of the days up to the one holding ``cutoff`` (retention removed rows before it)."""
    for table in ("rollup_days", "tool_day_stats", "tool_day_buckets"):
        con.execute(f"DELETE FROM {table} WHERE day <= ?::TIMESTAMP::DATE", [cutoff])
    con.execute("DELETE FROM tool_month_buckets WHERE month <= ?::TIMESTAMP::DATE", [cutoff])
