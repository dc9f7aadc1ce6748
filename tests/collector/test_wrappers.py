"""Framework envelopes around results: raw is what the tool returned, the envelope's cost is kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from collector.dialects.spans import TOOL, classify, extract_tool_call, name_from_span_name
from collector.dialects.wrappers import unwrap
from collector.measure.measurement import infer_retained, measure
from collector.model import SpanData

RESULT = json.dumps([{"order_id": f"A-{i}", "status": "refunded", "total": i * 1.5} for i in range(40)])
SMALL = "Order A-10001: shipped on 2026-11-19 via DHL."


def span(name: str, attrs: dict[str, Any]) -> SpanData:
    return SpanData(name, "ab" * 16, "cd" * 8, 1_000, 2_000, attrs)


def langchain_message(content: Any, call_id: str = "call_1") -> str:
    return json.dumps({"type": "tool", "data": {"content": content, "additional_kwargs": {}, "type": "tool",
                                                "name": "search_orders", "id": None, "tool_call_id": call_id,
                                                "artifact": None, "status": "success"}})  # fmt: skip


def langchain_constructor(content: Any, call_id: str = "call_2") -> str:
    return json.dumps({"output": {"lc": 1, "type": "constructor",
                                  "id": ["langchain", "schema", "messages", "ToolMessage"],
                                  "kwargs": {"content": content, "type": "tool", "name": "get_status",
                                             "tool_call_id": call_id, "status": "success"}},
                       "kwargs": {"tags": ["seq:step:1"], "name": "get_status"}})  # fmt: skip


@pytest.mark.parametrize(
    ("value", "key", "text", "wrapper", "call_id"),
    [
        (langchain_message(SMALL), "output.value", SMALL, "langchain_message", "call_1"),
        (langchain_message(RESULT), "output.value", RESULT, "langchain_message", "call_1"),
        (langchain_constructor(SMALL), "gen_ai.tool.call.result", SMALL, "langchain_constructor", "call_2"),
        (json.dumps([{"type": "text", "text": SMALL}]), "gen_ai.tool.call.result", SMALL, "content_blocks", None),
        (json.dumps([{"text": SMALL}]), "gen_ai.tool.call.result", SMALL, "content_blocks", None),
        (json.dumps({"toolUseId": "tooluse_9", "status": "success", "content": [{"text": SMALL}]}),
         "gen_ai.tool.call.result", SMALL, "strands_tool_result", "tooluse_9"),
        (json.dumps({"content": [{"type": "text", "text": RESULT}], "structuredContent": {"rows": 40},
                     "isError": False}), "gen_ai.tool.call.result", RESULT, "mcp_call_tool_result", None),
        (json.dumps({"content": [], "structuredContent": {"rows": 40}, "isError": False}),
         "gen_ai.tool.call.result", '{"rows": 40}', "mcp_call_tool_result", None),
        (json.dumps({"result": SMALL}), "gcp.vertex.agent.tool_response", SMALL, "adk_function_response", None),
        (json.dumps(SMALL), "gen_ai.tool.call.result", SMALL, "json_string", None),
        (json.dumps(RESULT), "ai.toolCall.result", RESULT, "json_string", None),
        # langchain content given as blocks
        (langchain_message([{"type": "text", "text": SMALL}]), "output.value", SMALL, "langchain_message", "call_1"),
    ],
)  # fmt: skip
def test_unwrap_each_envelope(value: str, key: str, text: str, wrapper: str, call_id: str | None) -> None:
    got = unwrap(value, key)
    assert (got.text, got.wrapper, got.call_id, got.problem) == (text, wrapper, call_id, None)


@pytest.mark.parametrize(
    "value",
    [RESULT, SMALL, json.dumps({"result": SMALL}), json.dumps({"output": {"rows": 3}}), '{"content": "x"}', "[1, 2]",
     '"unterminated', json.dumps([{"text": SMALL, "score": 3}])],
)  # fmt: skip
def test_values_that_are_not_envelopes_are_measured_as_given(value: str) -> None:
    got = unwrap(value, "gen_ai.tool.call.result")
    assert (got.text, got.wrapper, got.problem) == (value, None, None)


def test_an_envelope_that_cannot_be_opened_says_why() -> None:
    blocks = json.dumps([{"type": "image", "data": "iVBOR", "mimeType": "image/png"}])
    got = unwrap(blocks, "gen_ai.tool.call.result")
    assert got.text == blocks and got.wrapper is None and "image" in (got.problem or "")
    call, issues = extract_tool_call(span("execute_tool screenshot", {"gen_ai.operation.name": "execute_tool",
                                                                      "gen_ai.tool.call.result": blocks}))  # fmt: skip
    assert call.raw == blocks
    assert any(
        "measured as given, wrapper included" in i.message and i.field == "gen_ai.tool.call.result" for i in issues
    )


def test_strings_as_given_where_the_owner_records_them_so() -> None:
    quoted = '"quoted"'
    assert unwrap(quoted, "langfuse.observation.output", json_strings=False).text == quoted
    oi = {"openinference.span.kind": "TOOL", "tool.name": "t", "output.value": quoted, "output.mime_type": "text/plain"}
    assert extract_tool_call(span("t", oi))[0].raw == quoted
    oi["output.mime_type"] = "application/json"
    assert extract_tool_call(span("t", oi))[0].raw == "quoted"


def test_langchain_tool_span_measures_the_content_and_keeps_the_envelope_cost(counter) -> None:  # type: ignore[no-untyped-def]
    attrs = {"openinference.span.kind": "TOOL", "tool.name": "search_orders", "input.value": "refunded",
             "output.value": langchain_message(RESULT, "call_search_1"), "output.mime_type": "application/json"}  # fmt: skip
    call, issues = extract_tool_call(span("search_orders", attrs))
    assert not issues
    assert (call.raw, call.tool_call_id, call.raw_wrapper) == (RESULT, "call_search_1", "langchain_message")
    row = measure(call, counter).row()
    wrapped = attrs["output.value"]
    assert row["raw_tokens"] == counter.count(RESULT).tokens and row["raw_bytes"] == len(RESULT)
    assert row["wrapper_bytes"] == len(wrapped.encode()) - len(RESULT)
    assert row["wrapper_tokens"] == counter.count(wrapped).tokens - counter.count(RESULT).tokens
    assert row["shape"] == "list" and row["schema_fields"] and "$[].order_id:string" in row["schema_fields"]


def test_traceloop_langchain_wrapper_gives_the_call_id(counter) -> None:  # type: ignore[no-untyped-def]
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_status", "traceloop.span.kind": "tool",
             "gen_ai.tool.call.result": langchain_constructor(SMALL, "call_get_status_3")}  # fmt: skip
    call, _ = extract_tool_call(span("execute_tool get_status", attrs))
    assert (call.raw, call.tool_call_id, call.raw_wrapper) == (SMALL, "call_get_status_3", "langchain_constructor")
    row = measure(call, counter).row()
    assert row["raw_tokens"] == counter.count(SMALL).tokens and row["wrapper_tokens"] > 0


def test_ai_sdk_string_result_is_not_read_as_truncated(counter) -> None:  # type: ignore[no-untyped-def]
    # JSON.stringify(output) on the tool span; the decoded text in the next call's input
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs",
             "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.result": json.dumps("line 1\nline 2 \"quoted\"\n")}  # fmt: skip
    call, _ = extract_tool_call(span("execute_tool fetch_logs", attrs), view='line 1\nline 2 "quoted"\n')
    row = measure(call, counter).row()
    assert row["truncated"] is False and row["raw_wrapper"] == "json_string"


@pytest.mark.parametrize(
    ("name", "tool"),
    [("execute_tool search_orders", "search_orders"), ("running tool: fetch_logs", "fetch_logs"),
     ("running tool fetch_logs", "fetch_logs"), ("tool.get_status", "get_status"), ("get_status.tool", "get_status"),
     ("mcp__github__create_issue", "mcp__github__create_issue"), ("chat gpt-4o", None), ("agent run", None)],
)  # fmt: skip
def test_tool_names_from_span_names(name: str, tool: str | None) -> None:
    assert name_from_span_name(name) == tool


def test_more_conventions() -> None:
    # tool.X spans with the GenAI keys and no operation name; OpenInference's tool.id
    attrs = {"gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "call_7", "gen_ai.output": "42 rows"}
    assert classify("tool.lookup", attrs) == TOOL
    call, _ = extract_tool_call(span("tool.lookup", attrs))
    assert (call.tool_name, call.tool_call_id, call.raw) == ("lookup", "call_7", "42 rows")
    oi = {"openinference.span.kind": "TOOL", "tool.id": "call_8", "output.value": "x"}
    call, _ = extract_tool_call(span("my_tool.tool", oi))
    assert (call.tool_name, call.tool_call_id) == ("my_tool", "call_8")
    assert classify("call_llm", {"gen_ai.operation.name": "call_llm"}) == "llm"
    adk = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_status", "gen_ai.tool.call.id": "adk-1",
           "gcp.vertex.agent.tool_call_args": '{"order_id": "A-1"}',
           "gcp.vertex.agent.tool_response": json.dumps({"result": SMALL})}  # fmt: skip
    call, _ = extract_tool_call(span("execute_tool get_status", adk))
    assert (call.raw, call.arguments, call.raw_wrapper) == (SMALL, '{"order_id": "A-1"}', "adk_function_response")


def test_strands_truncation_note_is_declared_truncation(counter) -> None:  # type: ignore[no-untyped-def]
    raw = "\n".join(f"line {i} of a long log with enough text to find" for i in range(400))
    view = raw[:2000] + "\n\n... [truncated: 15,210 chars removed] ...\n\n" + raw[-2000:]
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs", "gen_ai.tool.call.result": raw}
    call, _ = extract_tool_call(span("execute_tool fetch_logs", attrs), view=view)
    row = measure(call, counter).row()
    assert (row["truncated"], row["truncation_source"], row["truncation_kind"]) == (True, "declared", "head_tail")


def test_ranges_are_contiguous_in_raw_and_view_and_all_kept() -> None:
    raw = b"".join(f"row {i:05d} with a little text to make it long\n".encode() for i in range(3000))
    # adjacent in the raw, but a note between them in the view: two ranges, not one
    view = raw[0:500] + b"[...note...]\n" + raw[500:1000]
    assert infer_retained(raw, view).ranges == ((0, 500), (500, 1000))
    # every kept piece is stored: 600 pieces of one row each
    row = len(raw) // 3000
    pieces = [raw[k * 5 * row : k * 5 * row + row] for k in range(600)]
    ret = infer_retained(raw, b"~\n".join(pieces))
    assert len(ret.ranges) == 600 and ret.retained_bytes == 600 * row


def test_coverage_is_stored(counter) -> None:  # type: ignore[no-untyped-def]
    raw = "\n".join(f"line {i} of a long log with enough text to find" for i in range(400))
    view = raw[:1000] + "\n[truncated: 399 more lines; ask for offset=1000]"
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs", "gen_ai.tool.call.result": raw}
    call, _ = extract_tool_call(span("execute_tool fetch_logs", attrs), view=view)
    row = measure(call, counter).row()
    assert row["retained_ranges"] == [[0, 1000]]
    assert row["retained_coverage"] == pytest.approx(1000 / len(view.encode()))


def test_event_spans_under_a_tool_span_are_not_calls() -> None:
    # BeeAI through OpenInference: the tool span, and a TOOL-kind child span per emitter event
    call = {"openinference.span.kind": "TOOL", "tool.name": "get_status", "output.value": SMALL}
    assert classify("get_status", call) == TOOL
    for event in ("start", "success", "finish", "error", "retry"):
        child = {"openinference.span.kind": "TOOL", "input.value": "{}", "metadata.path": "tool.get_status." + event}
        assert classify(event, child) is None
