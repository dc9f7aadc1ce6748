"""What-if budgets: the stored raw results of a window replayed through the adapter.

For each tool given a budget, every call of the window whose whole raw result is stored
goes through :func:`collector.adapter.shape` with that budget (and optionally a shape and a
strategy), and the figures are set beside the recorded ones for the same calls: tokens,
p99, window cost (view tokens x later LLM calls of the trace), truncation rate, and what
the new views would leave out (error lines, list items, lines). With ``keep_last``, a result
re-read by more than that many later LLM calls is counted as compacted after them (its
:func:`collector.adapter.compaction.stub` in the window instead).

A call cannot be replayed when no raw result is stored, or only its head and tail (over the
payload cap): those are counted with the reason, never guessed.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

import duckdb
from opentelemetry import trace

from collector.adapter import Policy, Scope, shape
from collector.adapter.compaction import stub
from collector.adapter.handles import Stored, new_handle
from collector.adapter.text import ERROR_LINE
from collector.adapter.view import tokens
from collector.errors import InputError
from collector.store.payloads import load_payload

MAX_CALLS_PER_TOOL = 2000
"""Calls replayed per tool at most (the newest); the figures say how many were."""


@dataclass(frozen=True)
class Budget:
    """A what-if budget for one tool: tokens, and optionally the shape and strategy to use."""

    tokens: int
    shape: str | None = None
    strategy: str | None = None


def parse_budget(spec: str) -> tuple[str, Budget]:
    """``TOOL=TOKENS[:SHAPE[:STRATEGY]]`` -> (tool, Budget).

    Raises:
        InputError: the spec is not of that form, or names an unknown shape or strategy.
    """
    tool, sep, rest = spec.partition("=")
    parts = rest.split(":")
    if not sep or not tool or not parts[0].isdigit() or len(parts) > 3:
        raise InputError(f"--budget {spec!r}: write TOOL=TOKENS, TOOL=TOKENS:SHAPE or TOOL=TOKENS:SHAPE:STRATEGY "
                         "(search_orders=800, fetch_logs=2000:diagnostic, get_page=3000:document:head)")  # fmt: skip
    budget = Budget(int(parts[0]), parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None)
    try:
        Policy(budget.tokens, budget.shape or "document", strategy=budget.strategy or "head_tail")
    except Exception as e:
        raise InputError(f"--budget {spec!r}: {e}") from None
    return tool, budget


class _Discard:
    """A handle store that keeps nothing: a replay needs handles in its views, not the results.
    Its handles are drawn from ``seed`` (the call), so a replay's views, and their token
    counts, are the same every time."""

    def __init__(self, seed: str) -> None:
        self._random = random.Random(seed)

    def put(self, stored: Stored) -> str:
        return new_handle(self._random.randrange)

    def get(self, handle: str) -> Stored | None:
        return None


@dataclass
class Outcome:
    """One tool's recorded figures beside its replayed ones, over the same calls."""

    tool: str
    budget: Budget
    calls: int = 0
    replayed: int = 0
    not_replayed: dict[str, int] = field(default_factory=dict)
    before: list[int] = field(default_factory=list)
    after: list[int] = field(default_factory=list)
    window_before: int = 0
    window_after: int = 0
    truncated_before: int = 0
    truncated_after: int = 0
    lost_error_lines: int = 0
    lost_items: int = 0
    lost_lines: int = 0

    def figures(self) -> dict[str, Any]:
        n = max(self.replayed, 1)
        return {
            "tool": self.tool, "budget_tokens": self.budget.tokens, "shape": self.budget.shape,
            "strategy": self.budget.strategy, "calls": self.calls, "replayed": self.replayed,
            "not_replayed": dict(self.not_replayed),
            "tokens_before": sum(self.before), "tokens_after": sum(self.after),
            "p99_before": p99(self.before), "p99_after": p99(self.after),
            "window_cost_before": self.window_before, "window_cost_after": self.window_after,
            "window_cost_saved": self.window_before - self.window_after,
            "truncated_rate_before": self.truncated_before / n if self.replayed else None,
            "truncated_rate_after": self.truncated_after / n if self.replayed else None,
            "lost_error_lines": self.lost_error_lines, "lost_items": self.lost_items, "lost_lines": self.lost_lines,
        }  # fmt: skip


def p99(values: list[int]) -> int | None:
    """Nearest-rank 99th percentile (a value that occurred), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(0.99 * len(ordered)) - 1, 0)]


def _calls(
    con: duckdb.DuckDBPyConnection, tool: str, since_ns: int | None, until_ns: int | None
) -> list[tuple[Any, ...]]:
    return con.execute(
        """SELECT trace_id, span_id, view_tokens, coalesce(later_llm_calls, 0), shape, coalesce(truncated, false)
           FROM tool_calls WHERE tool_name = ? AND view_tokens IS NOT NULL
             AND (? IS NULL OR start_ns >= ?) AND (? IS NULL OR start_ns < ?)
           ORDER BY start_ns DESC, trace_id, span_id LIMIT ?""",
        [tool, since_ns, since_ns, until_ns, until_ns, MAX_CALLS_PER_TOOL],
    ).fetchall()


def _outside(raw: bytes, retained: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """(error lines, lines) of ``raw`` not wholly inside the retained byte ranges; error lines
    are those a diagnostic view keeps (:data:`collector.adapter.text.ERROR_LINE`)."""
    errors = lines = 0
    start = 0
    for end in [m.end() for m in re.finditer(rb"\n", raw)] + ([len(raw)] if not raw.endswith(b"\n") else []):
        if end > start and not any(a <= start and end <= b + 1 for a, b in retained):
            lines += 1
            if ERROR_LINE.search(raw[start:end].decode("utf-8", errors="replace")):
                errors += 1
        start = end
    return errors, lines


def whatif(con: duckdb.DuckDBPyConnection, db_path: str, budgets: dict[str, Budget], *,
           since_ns: int | None = None, until_ns: int | None = None, keep_last: int | None = None) -> list[Outcome]:  # fmt: skip
    """Replay the window's stored raw results of each tool in ``budgets`` through its budget."""
    outcomes = []
    for tool, budget in budgets.items():
        out = Outcome(tool, budget)
        for trace_id, span_id, view_tokens, later, recorded_shape, truncated in _calls(con, tool, since_ns, until_ns):
            out.calls += 1
            raw = load_payload(con, db_path, trace_id, span_id, "raw")
            reason = "no raw result stored" if raw is None else ("raw stored as head and tail only" if raw.cut else "")
            if raw is None or reason:
                out.not_replayed[reason] = out.not_replayed.get(reason, 0) + 1
                continue
            policy = Policy(budget.tokens, budget.shape or recorded_shape or "document",
                            strategy=budget.strategy or "head_tail")  # fmt: skip
            text = raw.head.decode("utf-8", errors="replace")
            shaped = shape(text, policy, Scope("whatif"), store=_Discard(trace_id + span_id), span=trace.INVALID_SPAN)
            out.replayed += 1
            out.before.append(int(view_tokens))
            out.after.append(shaped.view_tokens)
            out.window_before += int(view_tokens) * int(later)
            reread = shaped.view_tokens * int(later)
            if keep_last is not None and later > keep_last:
                stub_tokens = min(tokens(stub(shaped.view, tool, "", 0)), shaped.view_tokens)
                reread = shaped.view_tokens * keep_last + stub_tokens * (int(later) - keep_last)
            out.window_after += reread
            out.truncated_before += bool(truncated)
            out.truncated_after += shaped.truncated
            if shaped.items_total is not None:
                out.lost_items += shaped.items_total - (shaped.items_shown or 0)
            elif shaped.truncated:
                errors, lines = _outside(raw.head, shaped.retained)
                out.lost_error_lines += errors
                out.lost_lines += lines
        outcomes.append(out)
    return outcomes


def suggestions(con: duckdb.DuckDBPyConnection, share: float, window_tokens: int) -> list[dict[str, Any]]:
    """Per tool, the budget that keeps its p99 view under ``share`` of a ``window_tokens`` window
    (a budget bounds every view, so the p99 too); None where the p99 is already under it."""
    if not 0 < share <= 1 or window_tokens <= 0:
        raise InputError(f"share={share!r} must be in (0, 1] and window={window_tokens!r} a positive token count")
    cap = int(share * window_tokens)
    rows = con.execute(
        """SELECT tool_name, count(*), quantile_disc(view_tokens, 0.99) FROM tool_calls
           WHERE view_tokens IS NOT NULL GROUP BY tool_name ORDER BY 3 DESC, 1"""
    ).fetchall()
    return [{"tool": tool, "calls": n, "p99": p, "limit": cap, "suggested_budget": cap if p > cap else None}
            for tool, n, p in rows]  # fmt: skip
