"""An agent that bounds its tools with the adapter, traced with the OpenTelemetry SDK into toolmeter:
its calls are stored with declared truncation, exact ranges and the handle, and replayed so."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from collector.adapter import MemoryHandles, Policy, Scope, read_result, shape
from collector.store.database import read_connection
from tests.adapter.test_shaping import orders
from tests.dashboard.test_app import APP

ORDERS = Policy(1500, "list", fields=("id", "date", "status", "amount"), sort_key="date", descending=True)
LOGS = Policy(400, "diagnostic")


def run_agent(provider) -> tuple[dict[str, object], dict[str, object]]:  # type: ignore[no-untyped-def]
    """Two tool calls shaped by the adapter, each followed by a model call, in one trace."""
    tracer = provider.get_tracer("support-agent")
    store = MemoryHandles()
    run = Scope("run-7", "customer-17")
    shaped = {}
    with tracer.start_as_current_span("invoke_agent support"):
        for name, policy, raw in (
            ("list_orders", ORDERS, orders()),
            ("fetch_logs", LOGS, "\n".join(f"2026-11-20T10:00:{i % 60:02d}Z INFO request {i} served" for i in range(4000))
             + "\n2026-11-20T10:01:00Z ERROR refund worker crashed"),
        ):  # fmt: skip
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
            with tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs):
                s = shape(raw, policy, run, store=store)
                shaped[name] = {"view": s.view, "retained": s.retained, "handle": s.handle,
                                "items": s.retained_items, "shown": s.items_shown}  # fmt: skip
            with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                pass
        # the handle pages on in the same run
        page = read_result(store, shaped["list_orders"]["handle"], run, offset=shaped["list_orders"]["shown"])  # type: ignore[arg-type]
        assert page["offset"] == shaped["list_orders"]["shown"]
    return shaped["list_orders"], shaped["fetch_logs"]


def test_shaped_calls_are_stored_as_declared(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    listed, logged = run_agent(provider)
    assert processor.force_flush()
    with read_connection(db_path) as con:
        cur = con.execute(
            """SELECT tool_name, truncated, truncation_source, retained_ranges, retained_source, view_tokens,
                      budget_tokens, view_over_budget, shape, shape_source, handle, items_total, items_shown,
                      retained_items, view_source
               FROM tool_calls ORDER BY start_ns"""
        )
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    first, second = rows
    assert first["tool_name"] == "list_orders" and first["truncated"] is True
    assert first["truncation_source"] == "declared" and first["retained_source"] == "declared"
    assert [tuple(r) for r in first["retained_ranges"]] == list(listed["retained"])  # type: ignore[arg-type]
    assert first["view_tokens"] == counter.count(listed["view"]).tokens <= 1500 == first["budget_tokens"]
    assert first["view_over_budget"] is False and first["shape"] == "list" and first["shape_source"] == "declared"
    assert first["handle"] == listed["handle"] and first["items_total"] == 312
    assert first["items_shown"] == listed["shown"] == len(json.loads(listed["view"])["items"])  # type: ignore[arg-type]
    assert [tuple(r) for r in first["retained_items"]] == list(listed["items"])  # type: ignore[arg-type]
    assert second["shape"] == "diagnostic" and second["truncated"] is True and second["handle"] == logged["handle"]
    assert [tuple(r) for r in second["retained_ranges"]] == list(logged["retained"])  # type: ignore[arg-type]


def test_the_replay_page_shows_declared_truncation_and_the_handle(
    provider_with, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    listed, _ = run_agent(provider)
    assert processor.force_flush()
    provider.shutdown()
    with read_connection(db_path) as con:
        trace_id, span_id = con.execute(
            "SELECT trace_id, span_id FROM tool_calls WHERE tool_name = 'list_orders'"
        ).fetchone()  # type: ignore[misc]
    monkeypatch.setenv("TOOLMETER_DB", db_path)
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params["trace"] = trace_id
    at.query_params["span"] = span_id
    at.run()
    at.switch_page("app_pages/replay.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    banner = at.warning[0].value
    assert "Truncated" in banner and "declared" in banner
    first_range = listed["retained"][0]  # type: ignore[index]
    assert f"{first_range[0]:,}–{first_range[1]:,}" in banner
    text = " ".join(m.value for m in at.markdown)
    assert f"list items shown **{listed['shown']} of 312** (declared" in text
    assert str(listed["handle"]) in text
