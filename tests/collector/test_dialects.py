"""Each attribute dialect, shaped as its owners document it, read through real SDK spans."""

import json

import pytest

from collector.dialects.spans import LLM, TOOL, classify, extract_llm_call, extract_tool_call
from collector.model import SpanData
from collector.store.database import read_connection


def span(name: str, **attrs) -> SpanData:  # type: ignore[no-untyped-def]
    return SpanData(name=name, trace_id="1" * 32, span_id="2" * 16, start_ns=10, end_ns=20, attributes=attrs,
                    resource={"service.name": "svc"})  # fmt: skip


GEN_AI_TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "get_weather",
    "gen_ai.tool.call.id": "call_abc",
    "gen_ai.tool.call.arguments": '{"city": "Paris"}',
    "gen_ai.tool.call.result": '{"temp_c": 11}',
}
OPENINFERENCE_TOOL = {
    "openinference.span.kind": "TOOL",
    "tool.name": "get_weather",
    "input.value": '{"city": "Paris"}',
    "output.value": '{"temp_c": 11}',
}
TRACELOOP_TOOL = {
    "traceloop.span.kind": "tool",
    "traceloop.entity.name": "get_weather",
    "traceloop.entity.input": '{"city": "Paris"}',
    "traceloop.entity.output": '{"temp_c": 11}',
}


@pytest.mark.parametrize(
    ("name", "attrs", "dialect"),
    [
        ("execute_tool get_weather", GEN_AI_TOOL, "gen_ai"),
        ("get_weather", OPENINFERENCE_TOOL, "openinference"),
        ("get_weather.tool", TRACELOOP_TOOL, "traceloop"),
    ],
)
def test_tool_dialects(name: str, attrs: dict, dialect: str) -> None:  # type: ignore[type-arg]
    s = span(name, **attrs)
    assert classify(s.name, s.attributes) == TOOL
    call, issues = extract_tool_call(s)
    assert not issues
    assert (call.tool_name, call.dialect, call.raw, call.arguments) == (
        "get_weather",
        dialect,
        '{"temp_c": 11}',
        '{"city": "Paris"}',
    )
    assert call.service_name == "svc"


def test_gen_ai_tool_name_from_span_name_alone() -> None:
    s = span("execute_tool lookup", **{"gen_ai.operation.name": "execute_tool"})
    call, issues = extract_tool_call(s)
    assert call.tool_name == "lookup" and not issues


def test_toolmeter_namespace_wins() -> None:
    s = span(
        "execute_tool get_weather",
        **GEN_AI_TOOL,
        **{"toolmeter.tool.name": "weather_v2", "toolmeter.raw": "RAW", "toolmeter.view": "VIEW",
           "toolmeter.budget.tokens": 300, "toolmeter.truncated": True, "toolmeter.retained": "0-2",
           "toolmeter.shape": "record", "toolmeter.raw.bytes": 3},
    )  # fmt: skip
    call, _ = extract_tool_call(s)
    assert (call.tool_name, call.raw, call.view, call.budget_tokens, call.truncated, call.retained, call.shape) == (
        "weather_v2", "RAW", "VIEW", 300, True, ((0, 2),), "record",
    )  # fmt: skip


def test_structured_result_attribute_is_measured_as_json() -> None:
    s = span("execute_tool t", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": ["a", "b"]})
    call, _ = extract_tool_call(s)
    assert call.raw == json.dumps(["a", "b"])


def test_a_span_with_no_tool_name_is_kept_and_said() -> None:
    s = span("do_something", **{"openinference.span.kind": "TOOL", "output.value": "x"})
    call, issues = extract_tool_call(s)
    assert call.tool_name == "(unnamed)"
    assert issues and issues[0].field == "gen_ai.tool.name" and "Set gen_ai.tool.name" in issues[0].message


@pytest.mark.parametrize(
    ("name", "attrs", "model", "tokens"),
    [
        ("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                         "gen_ai.response.model": "gpt-4o-2024-08-06", "gen_ai.usage.input_tokens": 1200,
                         "gen_ai.usage.output_tokens": 80}, "gpt-4o-2024-08-06", (1200, 80)),
        ("ChatCompletion", {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o",
                            "llm.token_count.prompt": 900, "llm.token_count.completion": 40}, "gpt-4o", (900, 40)),
        ("openai.chat", {"llm.request.type": "chat", "gen_ai.request.model": "gpt-4o",
                         "llm.usage.prompt_tokens": 700, "llm.usage.completion_tokens": 30}, "gpt-4o", (700, 30)),
    ],
)  # fmt: skip
def test_llm_dialects(name: str, attrs: dict, model: str, tokens: tuple) -> None:  # type: ignore[type-arg]
    s = span(name, **attrs)
    assert classify(s.name, s.attributes) == LLM
    call, issues = extract_llm_call(s)
    assert (call.model, call.input_tokens, call.output_tokens) == (model, *tokens)
    assert not issues


def test_other_spans_are_ignored() -> None:
    assert classify("GET /api", {"http.method": "GET"}) is None
    assert classify("invoke_agent x", {"gen_ai.operation.name": "invoke_agent"}) is None
    assert classify("chain", {"openinference.span.kind": "CHAIN"}) is None


def test_every_dialect_through_real_spans_into_duckdb(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    tracer = provider.get_tracer("dialects")
    for i, attrs in enumerate((GEN_AI_TOOL, OPENINFERENCE_TOOL, TRACELOOP_TOOL)):
        with tracer.start_as_current_span(f"span{i}", attributes=attrs):
            pass
    assert processor.force_flush()
    with read_connection(db_path) as con:
        got = con.execute("SELECT dialect, tool_name, raw_tokens FROM tool_calls ORDER BY dialect").fetchall()
    assert got == [("gen_ai", "get_weather", 7), ("openinference", "get_weather", 7), ("traceloop", "get_weather", 7)]


def test_an_empty_result_is_a_zero_byte_result() -> None:
    s = span("execute_tool t", **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": ""})
    call, _ = extract_tool_call(s)
    assert call.raw == ""
