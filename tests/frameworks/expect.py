"""What every framework test checks, against the store a driver run filled.

For every call a tool made: recognised once with the right name; raw tokens equal to
tiktoken's count of what the tool returned; the view joined wherever the trace carries it
(and where it cannot be, the row says why); every model call counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.measure.tokens import TokenCounter
from collector.store.database import read_connection

COLUMNS = ("tool_name", "tool_call_id", "raw_bytes", "raw_tokens", "view_bytes", "view_tokens", "view_source",
           "truncated", "truncation_kind", "warnings", "dialect", "shape", "schema_fingerprint", "view_join", "origin",
           "raw_wrapper")  # fmt: skip


@dataclass
class Outcome:
    tool: str
    rows: list[dict[str, Any]]
    returned: list[str]


def tool_rows(db: str) -> list[dict[str, Any]]:
    with read_connection(db) as con:
        cur = con.execute(f"SELECT {', '.join(COLUMNS)} FROM tool_calls ORDER BY start_ns")
        return [dict(zip(COLUMNS, r, strict=True)) for r in cur.fetchall()]


def llm_count(db: str) -> int:
    with read_connection(db) as con:
        row = con.execute("SELECT count(*) FROM llm_calls").fetchone()
    return int(row[0]) if row else 0


def llm_usage(db: str) -> list[tuple[int | None, int | None, int | None]]:
    """(input tokens, output tokens, cache reads) of every model call, in time order."""
    with read_connection(db) as con:
        rows = con.execute("SELECT input_tokens, output_tokens, cache_read_tokens FROM llm_calls ORDER BY start_ns")
        return [(r[0], r[1], r[2]) for r in rows.fetchall()]


def reported_usage(run: Any) -> list[tuple[int, int, int]]:
    """(prompt, completion, cached) tokens the fake model reported, in order."""
    return [
        (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"]) for u in run.usages
    ]


def check_cache_reads(run: Any, emitted: bool = True) -> None:
    """Every model call's cache reads as the fake model reported them (``prompt_tokens_details.
    cached_tokens``), where the instrumentation passes them on; None where it does not."""
    stored = [u[2] for u in llm_usage(run.db)]
    if emitted:
        assert stored == [u[2] for u in reported_usage(run)]
        assert [u[0] for u in llm_usage(run.db)] == [u[0] for u in reported_usage(run)]  # cached reads included
    else:
        assert stored == [None] * len(stored)


def shown_to_model(requests: list[dict[str, Any]]) -> dict[str, str]:
    """Tool call id -> the content of its tool message, as the model first received it."""
    shown: dict[str, str] = {}
    for body in requests:
        for m in body.get("messages") or []:
            if m.get("role") == "tool" and m.get("tool_call_id") not in shown:
                content = m.get("content")
                if isinstance(content, list):  # content parts
                    content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
                shown[m["tool_call_id"]] = content if isinstance(content, str) else str(content)
    return shown


def check_run(run: Any, counter: TokenCounter, *, raw: bool = True, view: bool = True) -> list[dict[str, Any]]:
    """Assert the Done-when of every call of ``run``; ``raw``/``view`` False skip those checks."""
    rows = tool_rows(run.db)
    problems = []
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_name.setdefault(r["tool_name"], []).append(r)
    assert set(by_name) == set(run.returned), f"tools recorded {sorted(by_name)}, called {sorted(run.returned)}"
    shown = shown_to_model(run.model_requests)
    for name, values in run.returned.items():
        got = by_name[name]
        if len(got) != len(values):
            problems.append(f"{name}: {len(got)} rows for {len(values)} calls")
            continue
        for r, value in zip(sorted(got, key=lambda r: r["tool_call_id"] or ""), values, strict=True):
            if raw and r["raw_tokens"] != counter.count(value).tokens:
                problems.append(f"{name}: raw_tokens {r['raw_tokens']} != tiktoken {counter.count(value).tokens} "
                                f"(raw_bytes {r['raw_bytes']} vs {len(value.encode())}); warnings {r['warnings']}")  # fmt: skip
            if view:
                if r["view_source"] != "message":
                    problems.append(
                        f"{name}: view not joined (view_source {r['view_source']}); warnings {r['warnings']}"
                    )
                elif r["tool_call_id"] in shown and r["view_tokens"] != counter.count(shown[r["tool_call_id"]]).tokens:
                    problems.append(f"{name}: view_tokens {r['view_tokens']} != what the model was sent")
    assert not problems, "\n".join(problems)
    return rows
