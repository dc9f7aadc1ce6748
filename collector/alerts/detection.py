"""Envelope-growth alerts: a tool's results grow after a schema change (or without one).

Detection, per tool, on the calls in the store:

* **Schema change**: the day a new schema fingerprint becomes the tool's dominant one (most
  calls that day, errors excluded) and stays so: over the following window it accounts for
  at least :data:`CONFIRM_SHARE` of the tool's fingerprinted calls. Fingerprints that flap
  back and forth never reach that share, so they never count as a change.
* **Envelope**: p50/p95/p99 of view and raw tokens, truncation rate, over-budget rate and
  window cost per call, over ``window_days`` before and after the change.
* **Rule**: alert when p99 view tokens grew by ``p99_view_ratio`` (default 1.5) or the
  over-budget rate rose by ``over_budget_points`` (default 10), with at least ``min_calls``
  on each side (see :mod:`collector.alerts.rules`). Shrinking never alerts.
* **Growth without a schema change**: the same rules on consecutive windows, at day
  boundaries where the schema did not change; one alert per episode.

Alerts are stored (``alerts`` table) with their evidence: windows, counts, percentiles
before and after, the schema diff, and example calls on each side. Each finding has a
stable id, so evaluating again never duplicates it, and its state (open, acknowledged,
resolved) and delivery are kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from collector.alerts.rules import Rule, Rules

if TYPE_CHECKING:
    from collector.alerts.memo import Memo

CONFIRM_SHARE = 0.6
"""Share of the window after a change that the new fingerprint must hold."""

METRICS = ("view_tokens_p50", "view_tokens_p95", "view_tokens_p99", "raw_tokens_p50", "raw_tokens_p95",
           "raw_tokens_p99", "truncated_rate", "over_budget_rate", "window_cost_per_call")  # fmt: skip


@dataclass(frozen=True)
class Envelope:
    """A tool's figures over one window."""

    start: str
    end: str
    calls: int
    view_tokens_p50: float | None
    view_tokens_p95: float | None
    view_tokens_p99: float | None
    raw_tokens_p50: float | None
    raw_tokens_p95: float | None
    raw_tokens_p99: float | None
    truncated_rate: float | None
    over_budget_rate: float | None
    window_cost_per_call: float | None


@dataclass(frozen=True)
class Finding:
    """One rule that fired: the metric, before, after."""

    metric: str
    before: float
    after: float
    threshold: str

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before else None


@dataclass(frozen=True)
class Alert:
    alert_id: str
    tool_name: str
    kind: str
    change_at: datetime
    findings: list[Finding]
    before: Envelope
    after: Envelope
    schema: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    service: str | None = None
    """The service whose runs grew (``run_growth``; :mod:`collector.alerts.runs`)."""
    tools_grew: list[dict[str, Any]] = field(default_factory=list)
    """Its tools whose tokens per run grew, most first."""

    @property
    def summary(self) -> str:
        f = self.findings[0]
        if self.kind == "run_growth":
            ratio = f" ({f.ratio:.1f}x)" if f.ratio else ""
            grew = ", ".join(f"{g['tool']} +{g['growth_per_run']:,.0f}" for g in self.tools_grew[:3])
            which = "p99" if f.metric.endswith("p99") else "median"
            return (f"toolmeter: runs of {self.service} grew: tool-result tokens per run, {which} {f.before:,.0f} -> "
                    f"{f.after:,.0f}{ratio} from {self.change_at:%Y-%m-%d}"
                    + (f"; tools that grew (tokens per run): {grew}" if grew else ""))  # fmt: skip
        what = (
            f"{f.metric} {f.before:,.0f} -> {f.after:,.0f}"
            + (f" ({f.ratio:.1f}x)" if f.ratio and "rate" not in f.metric else "")
            if "rate" not in f.metric
            else f"{f.metric} {f.before * 100:.0f}% -> {f.after * 100:.0f}%"
        )
        cause = ""
        if self.kind == "schema_change":
            added = self.schema.get("added") or []
            cause = f" after a schema change on {self.change_at:%Y-%m-%d}" + (
                f" (fields added: {', '.join(added[:5])})" if added else ""
            )
        else:
            cause = f" from {self.change_at:%Y-%m-%d}, without a schema change"
        return f"toolmeter: {self.tool_name} envelope grew: {what}{cause}"


# --- reading the store ----------------------------------------------------------------


def envelope(con: duckdb.DuckDBPyConnection, tool: str, start: datetime, end: datetime) -> Envelope:
    row = con.execute(
        """SELECT count(*),
                  quantile_cont(view_tokens, 0.5), quantile_cont(view_tokens, 0.95), quantile_cont(view_tokens, 0.99),
                  quantile_cont(raw_tokens, 0.5), quantile_cont(raw_tokens, 0.95), quantile_cont(raw_tokens, 0.99),
                  avg(CASE WHEN truncated THEN 1.0 ELSE 0.0 END),
                  avg(CASE WHEN over_budget THEN 1.0 WHEN over_budget IS NULL THEN NULL ELSE 0.0 END),
                  avg(view_tokens * coalesce(later_llm_calls, 0))
           FROM tool_calls WHERE tool_name = ? AND start_time >= ? AND start_time < ?""",
        [tool, start, end],
    ).fetchone()
    assert row is not None
    return Envelope(start.isoformat(), end.isoformat(), int(row[0]), *row[1:])


def _daily(con: duckdb.DuckDBPyConnection, tool: str) -> list[tuple[date, str | None, int]]:
    """(day, dominant fingerprint, fingerprinted calls) for each day the tool was called."""
    rows = con.execute(  # one pass over the tool's calls: days with no fingerprinted call count 0
        """WITH f AS (
               SELECT start_time::DATE AS day, schema_fingerprint AS fp,
                      count(*) FILTER (WHERE status <> 'error' AND schema_fingerprint IS NOT NULL) AS n
               FROM tool_calls WHERE tool_name = ? GROUP BY 1, 2)
           SELECT day, first(fp ORDER BY n DESC, fp) FILTER (WHERE n > 0), sum(n)
           FROM f GROUP BY day ORDER BY day""",
        [tool],
    ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def _share(con: duckdb.DuckDBPyConnection, tool: str, fp: str, start: datetime, end: datetime) -> tuple[float, int]:
    row = con.execute(
        """SELECT count(*) FILTER (WHERE schema_fingerprint = ?), count(*) FROM tool_calls
           WHERE tool_name = ? AND status <> 'error' AND schema_fingerprint IS NOT NULL
             AND start_time >= ? AND start_time < ?""",
        [fp, tool, start, end],
    ).fetchone()
    assert row is not None
    return (row[0] / row[1] if row[1] else 0.0), int(row[1])


def schema_fields(con: duckdb.DuckDBPyConnection, tool: str, fp: str) -> list[str]:
    """The field list most calls of ``fp`` have: the fingerprint keeps structure only, so one
    field's JSON type can differ between its calls (``null`` where a result held no value), and
    any one row's list would make the diff depend on which row is read first."""
    row = con.execute(
        "SELECT mode(schema_fields) FROM tool_calls WHERE tool_name = ? AND schema_fingerprint = ?", [tool, fp]
    ).fetchone()
    return list(row[0]) if row and row[0] else []


def schema_diff(before: list[str], after: list[str]) -> dict[str, list[str]]:
    """Fields added, removed and retyped between two ``path:type`` lists."""
    b = dict(f.rsplit(":", 1) for f in before)
    a = dict(f.rsplit(":", 1) for f in after)
    return {
        "added": sorted(f"{p}:{a[p]}" for p in a.keys() - b.keys()),
        "removed": sorted(f"{p}:{b[p]}" for p in b.keys() - a.keys()),
        "changed": sorted(f"{p}: {b[p]} -> {a[p]}" for p in a.keys() & b.keys() if a[p] != b[p]),
    }


def _examples(con: duckdb.DuckDBPyConnection, tool: str, start: datetime, end: datetime) -> list[dict[str, Any]]:
    rows = con.execute(
        """SELECT trace_id, span_id, view_tokens, raw_tokens FROM tool_calls
           WHERE tool_name = ? AND start_time >= ? AND start_time < ?
           ORDER BY view_tokens DESC NULLS LAST LIMIT 3""",
        [tool, start, end],
    ).fetchall()
    return [{"trace_id": r[0], "span_id": r[1], "view_tokens": r[2], "raw_tokens": r[3]} for r in rows]


# --- the rules ----------------------------------------------------------------------------


def compare(before: Envelope, after: Envelope, rule: Rule) -> list[Finding]:
    """The rules that fire for ``after`` against ``before`` (none when either side is too small)."""
    if before.calls < rule.min_calls or after.calls < rule.min_calls:
        return []
    found: list[Finding] = []

    def ratio(metric: str, threshold: float | None) -> None:
        b, a = getattr(before, metric), getattr(after, metric)
        if threshold is not None and b and a is not None and a / b >= threshold:
            found.append(Finding(metric, float(b), float(a), f"x{threshold:g}"))

    def points(metric: str, threshold: float | None) -> None:
        b, a = getattr(before, metric), getattr(after, metric)
        if threshold is not None and b is not None and a is not None and (a - b) * 100 >= threshold:
            found.append(Finding(metric, float(b), float(a), f"+{threshold:g} points"))

    ratio("view_tokens_p99", rule.p99_view_ratio)
    points("over_budget_rate", rule.over_budget_points)
    ratio("raw_tokens_p99", rule.p99_raw_ratio)
    points("truncated_rate", rule.truncated_points)
    ratio("window_cost_per_call", rule.window_cost_ratio)
    return found


def _alert_id(tool: str, kind: str, at: date) -> str:
    return hashlib.sha256(f"{tool}\x00{kind}\x00{at.isoformat()}".encode()).hexdigest()[:20]


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day)


def tools_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tools the store has calls of."""
    return [r[0] for r in con.execute("SELECT DISTINCT tool_name FROM tool_calls ORDER BY 1").fetchall()]


def detect(
    con: duckdb.DuckDBPyConnection, rules: Rules, tools: list[str] | None = None, memo: Memo | None = None
) -> list[Alert]:
    """Every alert the rules raise on the store's history (``memo``: the envelopes of windows
    whose calls did not change since the last evaluation)."""
    from collector.alerts.memo import windows  # it builds on this module's Envelope

    names = tools or tools_of(con)
    alerts: list[Alert] = []
    for tool in names:
        seen = windows(con, memo, ("tool", tool), "tool_name = ?", [tool], partial(envelope, con, tool))
        env = seen.envelope
        rule = rules.for_tool(tool)
        window = timedelta(days=rule.window_days)
        surveyed = memo.survey.daily.get(tool) if memo is not None and memo.survey is not None else None
        days = _daily(con, tool) if surveyed is None else surveyed
        change_days: set[date] = set()
        previous: str | None = None
        for day, fp, _ in days:
            if fp is None:
                continue
            if previous is not None and fp != previous:
                at = _midnight(day)
                share, n = seen.of(("share", fp), at, at + window, partial(_share, con, tool, fp, at, at + window))
                if share >= CONFIRM_SHARE and n >= 1:
                    change_days.add(day)
                    before, after = env(at - window, at), env(at, at + window)
                    findings = compare(before, after, rule)
                    if findings:
                        alerts.append(Alert(
                            _alert_id(tool, "schema_change", day), tool, "schema_change", at, findings, before, after,
                            {"before": previous, "after": fp, **schema_diff(schema_fields(con, tool, previous), schema_fields(con, tool, fp))},
                            {"before": _examples(con, tool, at - window, at), "after": _examples(con, tool, at, at + window)},
                        ))  # fmt: skip
                    previous = fp
                # an unconfirmed fingerprint (flapping) leaves the dominant one as it was
            elif previous is None:
                previous = fp
        # Growth without a schema change: test the windows around every day; consecutive days
        # that fire are one episode, dated where the median moved most (p99 alone moves as
        # soon as a window holds a few grown days, so it cannot date the change).
        fired_by_day: list[tuple[date, tuple[float, date, list[Finding], Envelope, Envelope] | None]] = []
        for day, _, _ in days[1:]:
            fired = None
            if not any(abs((day - c).days) < rule.window_days for c in change_days):
                at = _midnight(day)
                before, after = env(at - window, at), env(at, at + window)
                findings = compare(before, after, rule)
                if findings:
                    score = (after.view_tokens_p50 or 0) / (before.view_tokens_p50 or 1)
                    fired = (score, day, findings, before, after)
            fired_by_day.append((day, fired))
        alerts += [_growth_alert(con, tool, best, window) for best in episodes(fired_by_day)]
    return alerts


_Fired = TypeVar("_Fired", bound=tuple[Any, ...])


def episodes(fired_by_day: list[tuple[date, _Fired | None]]) -> list[_Fired]:
    """The best of each run of consecutive days that fired (its first element the score):
    one alert per episode, dated where it scored highest."""
    out: list[_Fired] = []
    run: list[_Fired] = []
    last: date | None = None
    for day, fired in fired_by_day:
        if fired is not None and (not run or (last is not None and (day - last).days <= 1)):
            run.append(fired)
        else:
            if run:
                out.append(max(run, key=lambda e: e[0]))
            run = [fired] if fired is not None else []
        last = day
    if run:
        out.append(max(run, key=lambda e: e[0]))
    return out


def _growth_alert(
    con: duckdb.DuckDBPyConnection,
    tool: str,
    best: tuple[float, date, list[Finding], Envelope, Envelope],
    window: timedelta,
) -> Alert:
    _, day, findings, before, after = best
    at = _midnight(day)
    examples = {"before": _examples(con, tool, at - window, at), "after": _examples(con, tool, at, at + window)}
    return Alert(_alert_id(tool, "growth", day), tool, "growth", at, findings, before, after, {}, examples)
