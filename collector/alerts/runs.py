"""Run-size alerts: a service's runs put more tool-result tokens into their context than before.

A run is a trace; its size the sum of its tool results' view tokens
(:mod:`collector.query.runs`). At every day boundary of a service's runs, the runs of the
``window_days`` before are compared with those after: the alert fires when the p99 run size
grew by ``p99_run_ratio``, or the median by ``p50_run_ratio`` (default 1.5 each), with at least ``min_calls`` runs on each side
(``[defaults]`` or ``[services.NAME]`` of the rules file). Consecutive days that fire are one
episode, dated where the median run grew most. The alert names the service and the tools
that grew, by how many tokens per run; it is stored in ``alerts`` (kind ``run_growth``, the
tool that grew most as ``tool_name``, the service as ``service_name``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from functools import partial
from typing import Any

import duckdb

from collector.alerts.detection import Alert, Envelope, Finding, _alert_id, _midnight, episodes
from collector.alerts.memo import Memo, Read, windows
from collector.alerts.rules import Rule, Rules
from collector.query.runs import NO_SERVICE, service_runs_sql
from collector.store.reach import TRACE_HORIZON_NS

KIND = "run_growth"
TRACE_HORIZON = timedelta(microseconds=TRACE_HORIZON_NS // 1000)
"""How long after a run's start its calls are expected (as the window cost's count assumes)."""

_RUNS = service_runs_sql()


_SERVICE_RUNS = "toolmeter_service_runs"
"""The runs of the service being evaluated, read once (see :func:`_runs_of`)."""


@contextlib.contextmanager
def _runs_of(con: duckdb.DuckDBPyConnection, service: str) -> Iterator[None]:
    """The service's runs, read from ``tool_calls`` once and queried as :data:`_SERVICE_RUNS` for
    every window: grouping its calls by trace for each window read all of them each time, which
    grew with the days times the calls (~4 s at a million calls over 70 days, minutes at ten)."""
    runs = con.execute(f"SELECT started, result_tokens, raw_tokens, window_cost_tokens FROM ({_RUNS})",
                       [service]).to_arrow_table()  # fmt: skip
    con.register(_SERVICE_RUNS, runs)
    try:
        yield
    finally:
        con.unregister(_SERVICE_RUNS)


def _envelope(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> Envelope:
    """The runs :func:`_runs_of` read that started in [start, end)."""
    row = con.execute(
        f"""SELECT count(*), quantile_cont(result_tokens, 0.5), quantile_cont(result_tokens, 0.95),
                   quantile_cont(result_tokens, 0.99), quantile_cont(raw_tokens, 0.5),
                   quantile_cont(raw_tokens, 0.95), quantile_cont(raw_tokens, 0.99), avg(window_cost_tokens)
            FROM {_SERVICE_RUNS} WHERE started >= ? AND started < ?""",
        [start, end],
    ).fetchone()
    assert row is not None
    n, v50, v95, v99, r50, r95, r99, cost = row
    return Envelope(start.isoformat(), end.isoformat(), int(n), v50, v95, v99, r50, r95, r99, None, None, cost)


def tools_grown(con: duckdb.DuckDBPyConnection, service: str, at: datetime, window: timedelta) -> list[dict[str, Any]]:
    """Per tool: view tokens per run before and after ``at``, the tools that grew first."""
    rows = con.execute(
        """WITH r AS (SELECT trace_id, min(start_time) AS started FROM tool_calls
                      WHERE coalesce(service_name, ?) = ? GROUP BY trace_id),
           side AS (SELECT trace_id, CASE WHEN started < ? THEN 'before' ELSE 'after' END AS side
                    FROM r WHERE started >= ? AND started < ?),
           runs AS (SELECT side, count(*) AS n FROM side GROUP BY side)
           SELECT t.tool_name,
                  coalesce(sum(t.view_tokens) FILTER (WHERE s.side = 'before'), 0)
                      / greatest(any_value(b.n), 1) AS before_per_run,
                  coalesce(sum(t.view_tokens) FILTER (WHERE s.side = 'after'), 0)
                      / greatest(any_value(a.n), 1) AS after_per_run
           FROM tool_calls t JOIN side s USING (trace_id)
           LEFT JOIN runs b ON b.side = 'before' LEFT JOIN runs a ON a.side = 'after'
           GROUP BY t.tool_name""",
        [NO_SERVICE, service, at, at - window, at + window],
    ).fetchall()
    grown = [{"tool": t, "before_per_run": round(b, 1), "after_per_run": round(a, 1), "growth_per_run": round(a - b, 1)}
             for t, b, a in rows]  # fmt: skip
    grown.sort(key=lambda g: (-g["growth_per_run"], g["tool"]))
    return grown


def _alert(con: duckdb.DuckDBPyConnection, service: str, best: tuple[float, date, Finding, Envelope, Envelope],
           window: timedelta) -> Alert:  # fmt: skip
    _, day, finding, before, after = best
    at = _midnight(day)
    grown = tools_grown(con, service, at, window)
    # a tool grew when it adds a tenth more per run, and a twentieth of the runs' growth (noise in
    # the other tools' sizes is not growth)
    total = sum(g["growth_per_run"] for g in grown if g["growth_per_run"] > 0)
    grew = [g for g in grown if g["growth_per_run"] > max(0.1 * g["before_per_run"], 0.05 * total, 0)]
    leading = grew[0]["tool"] if grew else grown[0]["tool"] if grown else "(none)"
    examples = {
        side: [{"trace_id": t, "view_tokens": int(v)} for t, v in con.execute(
            f"SELECT trace_id, result_tokens FROM ({_RUNS}) WHERE started >= ? AND started < ? "
            "ORDER BY result_tokens DESC LIMIT 3", [service, lo, hi]).fetchall()]
        for side, lo, hi in (("before", at - window, at), ("after", at, at + window))
    }  # fmt: skip
    return Alert(_alert_id(f"{service}\x00runs", KIND, day), leading, KIND, at, [finding], before, after, {},
                 examples, service=service, tools_grew=grew[:10])  # fmt: skip


def services_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The services of the store's runs."""
    return [r[0] for r in con.execute(
        f"SELECT DISTINCT coalesce(service_name, '{NO_SERVICE}') FROM tool_calls ORDER BY 1").fetchall()]  # fmt: skip


def detect_run_growth(
    con: duckdb.DuckDBPyConnection, rules: Rules, services: list[str] | None = None, memo: Memo | None = None
) -> list[Alert]:
    """Every run-size alert the rules raise on the store's history (of ``services``, or all;
    ``memo``: as :func:`collector.alerts.detection.detect`'s)."""
    alerts: list[Alert] = []
    for service in services_of(con) if services is None else services:
        rule = rules.for_service(service)
        if rule.p99_run_ratio is None and rule.p50_run_ratio is None:
            continue
        # a run's calls come after its start: its size can change for a day after a window ends
        env = windows(con, memo, ("runs", service), f"coalesce(service_name, '{NO_SERVICE}') = ?", [service],
                      partial(_envelope, con), reach=TRACE_HORIZON).envelope  # fmt: skip
        with _runs_of(con, service):
            alerts += _service_alerts(con, service, rule, env)
    return alerts


def _service_alerts(con: duckdb.DuckDBPyConnection, service: str, rule: Rule, env: Read) -> list[Alert]:
    """The run-size alerts of ``service``, whose runs :func:`_runs_of` read."""
    window = timedelta(days=rule.window_days)
    days = [r[0] for r in con.execute(f"SELECT DISTINCT started::DATE FROM {_SERVICE_RUNS} ORDER BY 1").fetchall()]
    fired_by_day: list[tuple[date, tuple[float, date, Finding, Envelope, Envelope] | None]] = []
    for day in days[1:]:
        at = _midnight(day)
        before, after = env(at - window, at), env(at, at + window)
        fired = None
        if before.calls >= rule.min_calls and after.calls >= rule.min_calls:
            findings = [
                Finding(metric, float(b), float(a), f"x{threshold:g}")
                for metric, b, a, threshold in (
                    ("run_tokens_p99", before.view_tokens_p99, after.view_tokens_p99, rule.p99_run_ratio),
                    ("run_tokens_p50", before.view_tokens_p50, after.view_tokens_p50, rule.p50_run_ratio),
                )
                if threshold is not None and b and a is not None and a / b >= threshold
            ]
            if findings:
                score = (after.view_tokens_p50 or 0) / (before.view_tokens_p50 or 1)
                fired = (score, day, findings[0], before, after)
        fired_by_day.append((day, fired))
    return [_alert(con, service, best, window) for best in episodes(fired_by_day)]
