"""One tool call recorded by two tool spans of the same name is one row."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.trace import set_span_in_context

from collector import record_tool_result
from collector.store.database import read_connection
from collector.store.insertion import NESTED_WARNING

ROOT = Path(__file__).resolve().parents[2]


def calls(db: str) -> list[tuple[object, ...]]:
    with read_connection(db) as con:
        return con.execute(
            "SELECT tool_name, raw_bytes, view_bytes, list_contains(warnings, ?) FROM tool_calls ORDER BY start_ns",
            [NESTED_WARNING],
        ).fetchall()


def test_a_tool_span_directly_inside_one_of_the_same_name_is_the_same_call(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    tracer = provider.get_tracer("agent")
    raw = json.dumps([{"id": i} for i in range(300)])
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    with tracer.start_as_current_span("invoke_agent"):
        # the framework's tool span, carrying what the model got; the tool's own span inside it
        with tracer.start_as_current_span("execute_tool search", attributes=attrs) as outer:
            with tracer.start_as_current_span("execute_tool search", attributes=attrs) as inner:
                record_tool_result(inner, raw=raw, view=raw[:500], truncated=True)
            outer.set_attribute("gen_ai.tool.call.result", raw[:500])
        # two calls of one tool side by side (parallel, overlapping): two calls
        for i in range(2):
            with tracer.start_as_current_span("execute_tool search", attributes=attrs) as span:
                span.set_attribute("gen_ai.tool.call.result", f"result {i}")
    assert processor.force_flush()
    assert calls(db_path) == [("search", len(raw), 500, True), ("search", 8, 8, False), ("search", 8, 8, False)]


@pytest.mark.slow
def test_an_mcp_call_inside_the_clients_tool_span_is_one_call(tmp_path: Path) -> None:
    db = str(tmp_path / "mcp.duckdb")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "adapter" / "mcp_client.py"), db, "--wrapped"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = calls(db)
    assert [r[0] for r in rows] == ["list_orders", "read_result", "filter_result", "read_result"]
    listed = rows[0]
    assert listed[1] > 40_000 and listed[2] < 8_000 and listed[3], "the server's row, shaped by the adapter"
    # read_result's server span carries no result: the client's span, which does, is the row kept
    assert rows[1][1] is not None and rows[1][3]


@pytest.mark.slow
def test_an_mcp_server_span_without_its_result_says_how_to_record_it(tmp_path: Path) -> None:
    db = str(tmp_path / "mcp.duckdb")
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "adapter" / "mcp_client.py"), db],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with read_connection(db) as con:
        rows = con.execute("SELECT tool_name, raw_bytes, warnings FROM tool_calls ORDER BY start_ns").fetchall()
    (listed, *rest) = rows
    assert listed[1] is not None and not any("tools/call span carries no result" in w for w in listed[2])
    assert rest and all(r[1] is None and any("shape_call_result" in w for w in r[2]) for r in rest)


HOUR_NS = 3600 * 10**9


@pytest.mark.parametrize("inner_first", [True, False], ids=["inner-written-first", "outer-written-first"])
def test_a_pair_split_over_two_writes_is_one_call(provider_with, db_path: str, inner_first: bool) -> None:  # type: ignore[no-untyped-def]
    """The second span of a pair arrives in a later write: the pair is found by the rows of that
    write, also when the outer span began long before it (a tool that ran for hours) and the store
    holds calls of the day before."""
    provider, processor = provider_with()
    tracer = provider.get_tracer("agent")
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    now = time.time_ns()
    for i in range(3):  # earlier calls, hours before: other traces
        old = tracer.start_span("execute_tool search", attributes=attrs, start_time=now - (20 - i) * HOUR_NS)
        old.set_attribute("gen_ai.tool.call.result", f"old {i}")
        old.end(end_time=now - (20 - i) * HOUR_NS + 10**9)
    assert processor.force_flush()
    raw = json.dumps([{"id": i} for i in range(300)])
    outer = tracer.start_span("execute_tool search", attributes=attrs, start_time=now - 2 * HOUR_NS)
    inner = tracer.start_span("execute_tool search", attributes=attrs, context=set_span_in_context(outer),
                              start_time=now - 10**9)  # fmt: skip
    record_tool_result(inner, raw=raw, view=raw[:500], truncated=True)
    outer.set_attribute("gen_ai.tool.call.result", raw[:500])
    first, second = (inner, outer) if inner_first else (outer, inner)
    first.end(end_time=now if first is inner else now + 10**9)
    assert processor.force_flush()
    second.end(end_time=now if second is inner else now + 10**9)
    assert processor.force_flush()
    rows = calls(db_path)
    assert rows[:3] == [("search", 5, 5, False)] * 3
    assert rows[3:] == [("search", len(raw), 500, True)], "the pair is one row, the inner one, with the result"
