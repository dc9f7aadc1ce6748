"""Langfuse, MLflow, Vercel AI SDK, Pydantic AI and Claude Code, shaped as their owners emit them.

Each span below is written from the library's own source or documentation, cited above it;
attribute values have the types those libraries give them (MLflow JSON-encodes every value,
Claude Code sends numbers as strings).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.dialects.claude_code import (
    classify_log,
    llm_call_from_log,
    llm_call_from_log_with_issues,
    synthetic_span_id,
    synthetic_trace_id,
    tool_call_from_log,
)
from collector.dialects.spans import LLM, TOOL, classify, extract_llm_call, extract_tool_call
from collector.model import LogData, SpanData
from collector.store.database import read_connection

RESULT = '[{"order_id": 1, "status": "refunded"}, {"order_id": 2, "status": "refunded"}]'
ARGS = '{"status": "refunded"}'


def span(name: str, attrs: dict[str, Any], status: str = "unset") -> SpanData:
    return SpanData(name=name, trace_id="1" * 32, span_id="2" * 16, start_ns=10, end_ns=20, attributes=attrs,
                    resource={"service.name": "svc"}, status_code=status)  # fmt: skip


# --- tool spans -----------------------------------------------------------------------

# Langfuse Python SDK v3: langfuse/_client/attributes.py (create_span_attributes /
# create_generation_attributes with observation_type="tool"); _serialize keeps strings as
# they are and JSON-encodes anything else; the observation name is the OTel span name.
LANGFUSE_TOOL = {
    "langfuse.observation.type": "tool",
    "langfuse.observation.input": ARGS,
    "langfuse.observation.output": RESULT,
    "langfuse.observation.metadata.source": "orders-db",
    "langfuse.environment": "production",
}

# MLflow: mlflow/tracing/constant.py (SpanAttributeKey) and mlflow/tracing/utils
# dump_span_attribute_value, which json.dumps every attribute, the span type included.
# @mlflow.trace(span_type=SpanType.TOOL) names the span after the function.
MLFLOW_TOOL = {
    "mlflow.traceRequestId": json.dumps("tr-0f8d2e"),
    "mlflow.spanType": json.dumps("TOOL"),
    "mlflow.spanFunctionName": json.dumps("search_orders"),
    "mlflow.spanInputs": json.dumps({"status": "refunded"}),
    "mlflow.spanOutputs": json.dumps(RESULT),  # the tool returned the JSON text as a str
}

# Vercel AI SDK: content/docs/03-ai-sdk-core/60-telemetry.mdx ("Tool call spans") and
# packages/ai/src/telemetry/open-telemetry-integration.ts (onToolCallStart/Finish:
# 'ai.toolCall.args' = JSON.stringify(input), 'ai.toolCall.result' = JSON.stringify(output)).
VERCEL_TOOL = {
    "operation.name": "ai.toolCall",
    "ai.operationId": "ai.toolCall",
    "ai.toolCall.name": "search_orders",
    "ai.toolCall.id": "call_9f2",
    "ai.toolCall.args": ARGS,
    "ai.toolCall.result": json.dumps(json.loads(RESULT), separators=(",", ":")),
}

# Pydantic AI: pydantic_ai/_tool_manager.py (_call_function_tool) with
# InstrumentationNames.for_version(2) from pydantic_ai/_instrumentation.py: span
# "running tool", tool_arguments / tool_response, no gen_ai.operation.name.
PYDANTIC_V2_TOOL = {
    "gen_ai.tool.name": "search_orders",
    "gen_ai.tool.call.id": "call_pyd",
    "tool_arguments": ARGS,
    "logfire.msg": "running tool: search_orders",
    "logfire.json_schema": json.dumps({"type": "object", "properties": {"tool_arguments": {"type": "object"}}}),
    "tool_response": RESULT,
}
# ... and version 3+: span "execute_tool {name}" with the GenAI argument/result keys, still
# without gen_ai.operation.name.
PYDANTIC_V3_TOOL = {
    "gen_ai.tool.name": "search_orders",
    "gen_ai.tool.call.id": "call_pyd",
    "gen_ai.tool.call.arguments": ARGS,
    "logfire.msg": "running tool: search_orders",
    "gen_ai.tool.call.result": RESULT,
}


@pytest.mark.parametrize(
    ("name", "attrs", "dialect", "call_id"),
    [
        ("search_orders", LANGFUSE_TOOL, "langfuse", None),
        ("search_orders", MLFLOW_TOOL, "mlflow", None),
        ("ai.toolCall", VERCEL_TOOL, "vercel_ai", "call_9f2"),
        ("running tool", PYDANTIC_V2_TOOL, "pydantic_ai", "call_pyd"),
        ("execute_tool search_orders", PYDANTIC_V3_TOOL, "pydantic_ai", "call_pyd"),
    ],
)
def test_tool_spans_of_each_dialect(name: str, attrs: dict[str, Any], dialect: str, call_id: str | None) -> None:
    s = span(name, attrs)
    assert classify(s.name, s.attributes) == TOOL
    call, issues = extract_tool_call(s)
    assert not issues
    assert (call.tool_name, call.dialect, call.tool_call_id, call.service_name) == (
        "search_orders",
        dialect,
        call_id,
        "svc",
    )
    assert json.loads(call.raw) == json.loads(RESULT)  # type: ignore[arg-type]
    assert json.loads(call.arguments) == json.loads(ARGS)  # type: ignore[arg-type]


def test_langfuse_string_output_is_measured_as_given() -> None:
    # Langfuse's _serialize does not JSON-encode strings: no decoding
    s = span("fetch_page", {"langfuse.observation.type": "tool", "langfuse.observation.output": '"quoted"'})
    call, _ = extract_tool_call(s)
    assert call.raw == '"quoted"'


# --- MLflow JSON decoding ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("outputs", "measured"),
    [
        (json.dumps("hello"), "hello"),  # a JSON string: the text it encodes
        (json.dumps("line 1\nline \u00e9 2", ensure_ascii=False), "line 1\nline \u00e9 2"),
        (json.dumps({"rows": [1, 2]}), '{"rows": [1, 2]}'),  # an object: its JSON text
        (json.dumps([1, 2, 3]), "[1, 2, 3]"),
        ("42", "42"),
        ("null", "null"),
        (json.dumps(""), ""),  # an empty string result: 0 bytes
    ],
)
def test_mlflow_outputs_are_json_decoded(outputs: str, measured: str) -> None:
    s = span("t", {"mlflow.spanType": '"TOOL"', "mlflow.spanOutputs": outputs})
    call, issues = extract_tool_call(s)
    assert call.raw == measured and not issues


def test_mlflow_output_that_is_not_json_is_measured_as_given_and_said() -> None:
    cut = json.dumps("a long result " * 20)[:128]  # cut by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT=128
    s = span("t", {"mlflow.spanType": '"TOOL"', "mlflow.spanOutputs": cut})
    call, issues = extract_tool_call(s)
    assert call.raw == cut
    assert [i.field for i in issues] == ["mlflow.spanOutputs"] and "not valid JSON" in issues[0].message
    assert any(w.startswith("mlflow.spanOutputs:") for w in call.warnings)


def test_mlflow_cut_output_is_flagged_against_the_attribute_length(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "128")
    cut = json.dumps("x" * 500)[:128]
    call, _ = extract_tool_call(span("t", {"mlflow.spanType": '"TOOL"', "mlflow.spanOutputs": cut}))
    assert any("exactly 128 characters" in w for w in call.warnings)


def test_mlflow_span_type_is_read_plain_too() -> None:
    # some exporters (and MLflow's own OTLP translation) give the type unquoted
    assert classify("t", {"mlflow.spanType": "TOOL"}) == TOOL
    assert classify("t", {"mlflow.spanType": "CHAT_MODEL"}) == LLM


def test_vercel_string_result_is_json_decoded() -> None:
    # JSON.stringify("done") is '"done"'; the model was given done
    s = span("ai.toolCall", {**VERCEL_TOOL, "ai.toolCall.result": '"done"'})
    call, _ = extract_tool_call(s)
    assert call.raw == "done"


def test_vercel_failed_tool_call_has_no_result_and_error_status() -> None:
    # onToolCallFinish: on failure recordSpanError sets status ERROR and no ai.toolCall.result
    attrs = {k: v for k, v in VERCEL_TOOL.items() if k != "ai.toolCall.result"}
    s = SpanData(name="ai.toolCall", trace_id="1" * 32, span_id="3" * 16, start_ns=1, end_ns=2, attributes=attrs,
                 status_code="error", status_message="rate limited")  # fmt: skip
    call, _ = extract_tool_call(s)
    assert (call.raw, call.status, call.error) == (None, "error", "rate limited")


# --- LLM spans ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "attrs", "dialect", "model", "tokens"),
    [
        # Langfuse: create_generation_attributes (usage_details JSON-encoded by _serialize);
        # keys starting "input" add up, as Langfuse itself sums them
        ("openai-chat", {"langfuse.observation.type": "generation", "langfuse.observation.model.name": "gpt-4o",
                         "langfuse.observation.usage_details": json.dumps(
                             {"input": 1000, "input_cache_read": 200, "output": 50, "total": 1250})},
         "langfuse", "gpt-4o", (1200, 50)),
        # MLflow: SpanAttributeKey.CHAT_USAGE / MODEL, JSON-encoded like every MLflow attribute
        ("ChatCompletion", {"mlflow.spanType": '"CHAT_MODEL"', "mlflow.llm.model": '"gpt-4o-mini"',
                            "mlflow.chat.tokenUsage": json.dumps(
                                {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940})},
         "mlflow", "gpt-4o-mini", (900, 40)),
        # Vercel AI SDK 5+: open-telemetry-integration.ts onStepStart/onStepFinish
        ("ai.generateText.doGenerate", {"operation.name": "ai.generateText.doGenerate support-bot",
                                        "ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4o",
                                        "ai.model.provider": "openai.chat", "gen_ai.system": "openai.chat",
                                        "gen_ai.request.model": "gpt-4o", "ai.response.model": "gpt-4o-2024-08-06",
                                        "gen_ai.response.model": "gpt-4o-2024-08-06", "ai.usage.inputTokens": 700,
                                        "ai.usage.outputTokens": 30, "gen_ai.usage.input_tokens": 700,
                                        "gen_ai.usage.output_tokens": 30},
         "vercel_ai", "gpt-4o-2024-08-06", (700, 30)),
        # Vercel AI SDK 4 ("basic LLM span information": ai.usage.promptTokens/completionTokens)
        ("ai.streamText.doStream", {"ai.operationId": "ai.streamText.doStream", "ai.model.id": "claude-3-5-haiku",
                                    "ai.usage.promptTokens": 500, "ai.usage.completionTokens": 20},
         "vercel_ai", "claude-3-5-haiku", (500, 20)),
        # Vercel AI SDK 3 (the deprecated gen_ai.usage.prompt_tokens / completion_tokens)
        ("ai.generateObject.doGenerate", {"ai.operationId": "ai.generateObject.doGenerate",
                                          "gen_ai.request.model": "gpt-4-turbo", "gen_ai.usage.prompt_tokens": 300,
                                          "gen_ai.usage.completion_tokens": 12},
         "vercel_ai", "gpt-4-turbo", (300, 12)),
        # Pydantic AI: _instrumentation.py open_model_request_span ("chat {model}", GenAI keys)
        ("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.system": "openai",
                         "gen_ai.request.model": "gpt-4o", "gen_ai.response.model": "gpt-4o-2024-08-06",
                         "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80,
                         "gen_ai.agent.name": "support", "model_request_parameters": "{}"},
         "gen_ai", "gpt-4o-2024-08-06", (1200, 80)),
    ],
)  # fmt: skip
def test_llm_spans_of_each_dialect(
    name: str, attrs: dict[str, Any], dialect: str, model: str, tokens: tuple[int, int]
) -> None:
    s = span(name, attrs)
    assert classify(s.name, s.attributes) == LLM
    call, issues = extract_llm_call(s)
    assert (call.dialect, call.model, call.input_tokens, call.output_tokens) == (dialect, model, *tokens)
    assert not issues


def test_a_bad_usage_object_is_an_issue_naming_the_field() -> None:
    s = span("gen", {"langfuse.observation.type": "generation", "langfuse.observation.usage_details": "{not json"})
    call, issues = extract_llm_call(s)
    assert call.input_tokens is None
    assert [i.field for i in issues] == ["langfuse.observation.usage_details"]
    s = span("gen", {"mlflow.spanType": '"LLM"', "mlflow.chat.tokenUsage": '{"input_tokens": "many"}'})
    call, issues = extract_llm_call(s)
    assert call.input_tokens is None and issues[0].field == "mlflow.chat.tokenUsage"


# --- agent, chain and workflow spans are neither tool calls nor LLM calls ------------------


@pytest.mark.parametrize(
    ("name", "attrs"),
    [
        # GenAI agent span (gen_ai.operation.name = invoke_agent) with its run's total usage
        ("invoke_agent support", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                                  "gen_ai.usage.input_tokens": 5000, "gen_ai.tool.call.result": RESULT}),
        # Pydantic AI versions 1-2 agent run: agent/__init__.py _run_span_end_attributes puts
        # usage.opentelemetry_attributes() (the run's totals) on the span, no operation name
        ("agent run", {"agent_name": "support", "gen_ai.usage.input_tokens": 5000, "gen_ai.usage.output_tokens": 300,
                       "final_result": RESULT, "logfire.msg": "support run"}),
        ("invoke_agent support", {"gen_ai.agent.name": "support", "gen_ai.usage.input_tokens": 5000,
                                  "pydantic_ai.all_messages": "[]", "final_result": RESULT}),
        ("Agent", {"openinference.span.kind": "AGENT", "output.value": RESULT}),
        ("RunnableSequence", {"openinference.span.kind": "CHAIN", "output.value": RESULT}),
        ("support.workflow", {"traceloop.span.kind": "workflow", "traceloop.entity.output": RESULT}),
        ("planner.agent", {"traceloop.span.kind": "agent", "traceloop.entity.output": RESULT}),
        ("lookup.task", {"traceloop.span.kind": "task", "traceloop.entity.output": RESULT}),
        ("support-agent", {"langfuse.observation.type": "agent", "langfuse.observation.output": RESULT,
                           "langfuse.observation.usage_details": json.dumps({"input": 5000, "output": 300})}),
        ("pipeline", {"langfuse.observation.type": "chain", "langfuse.observation.output": RESULT}),
        ("step", {"langfuse.observation.type": "span", "langfuse.observation.output": RESULT}),
        ("agent", {"mlflow.spanType": '"AGENT"', "mlflow.spanOutputs": json.dumps(RESULT)}),
        ("chain", {"mlflow.spanType": '"CHAIN"', "mlflow.spanOutputs": json.dumps(RESULT)}),
        ("workflow", {"mlflow.spanType": '"WORKFLOW"', "mlflow.spanOutputs": json.dumps(RESULT)}),
        # Vercel AI SDK: the ai.generateText/ai.streamText span totals the usage of its steps
        ("ai.generateText", {"operation.name": "ai.generateText", "ai.operationId": "ai.generateText",
                             "ai.usage.inputTokens": 5000, "ai.usage.outputTokens": 300,
                             "ai.response.toolCalls": "[]", "ai.model.id": "gpt-4o"}),
        ("ai.streamText", {"ai.operationId": "ai.streamText", "ai.usage.promptTokens": 5000}),
        ("ai.embed.doEmbed", {"ai.operationId": "ai.embed.doEmbed", "ai.usage.tokens": 10}),
        # Claude Code beta tracing: the interaction span (the tool_result log events are read instead)
        ("claude_code.interaction", {"span.type": "claude_code.interaction", "user_prompt_length": 40}),
    ],
)  # fmt: skip
def test_agent_chain_and_workflow_spans_are_not_calls(name: str, attrs: dict[str, Any]) -> None:
    assert classify(name, attrs) is None


def test_only_the_tool_span_of_an_agent_tree_is_a_tool_call() -> None:
    # a Langfuse agent observation wrapping a tool observation with the same output
    tree = [
        ("support-agent", {"langfuse.observation.type": "agent", "langfuse.observation.output": RESULT}),
        ("search_orders", LANGFUSE_TOOL),
        ("gpt-4o", {"langfuse.observation.type": "generation", "langfuse.observation.model.name": "gpt-4o"}),
    ]
    assert [classify(n, a) for n, a in tree] == [None, TOOL, LLM]


def test_claude_code_tool_spans_share_the_log_events_key() -> None:
    # claude_code.tool spans (monitoring docs, "Span attributes"): recorded, under the same key as the
    # call's tool_result log event so the two are one row; result_tokens is Claude Code's estimate
    from collector.dialects.claude_code import synthetic_span_id

    attrs = {"span.type": "claude_code.tool", "tool_name": "Read", "tool_use_id": "toolu_1",
             "duration_ms": 12, "result_tokens": 300}  # fmt: skip
    assert classify("claude_code.tool", attrs) == TOOL
    call, _ = extract_tool_call(span("claude_code.tool", attrs))
    assert (call.tool_name, call.tool_call_id, call.raw_tokens_declared) == ("Read", "toolu_1", 300)
    assert call.raw_tokens_approximate and call.span_id == synthetic_span_id("tool_use", "toolu_1")
    llm = {"span.type": "claude_code.llm_request", "model": "claude-sonnet-4-5", "gen_ai.system": "anthropic",
           "gen_ai.request.model": "claude-sonnet-4-5", "input_tokens": 10, "output_tokens": 5}  # fmt: skip
    assert classify("claude_code.llm_request", llm) is None


def test_new_dialects_through_real_spans_into_duckdb(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    tracer = provider.get_tracer("dialects_more")
    spans = [
        ("search_orders", LANGFUSE_TOOL),
        ("search_orders", {**MLFLOW_TOOL, "mlflow.spanOutputs": json.dumps("hello")}),
        ("ai.toolCall", VERCEL_TOOL),
        ("running tool", PYDANTIC_V2_TOOL),
    ]
    for name, attrs in spans:
        with tracer.start_as_current_span(name, attributes=attrs):
            pass
    assert processor.force_flush()
    with read_connection(db_path) as con:
        got = dict(con.execute("SELECT dialect, raw_bytes FROM tool_calls").fetchall())
    assert got == {"langfuse": len(RESULT), "mlflow": 5, "vercel_ai": len(VERCEL_TOOL["ai.toolCall.result"]),
                   "pydantic_ai": len(RESULT)}  # fmt: skip


# --- Claude Code log events ----------------------------------------------------------------

SESSION = "1b7f6a2c-5d0e-4c1a-9a57-3f1e2d4c5b6a"
T_NS = 1_760_000_000_000_000_000
CC_RESOURCE = {"service.name": "claude-code", "service.version": "2.1.214"}


def cc_event(name: str, attrs: dict[str, Any], **kw: Any) -> LogData:
    """A record as Claude Code logs it (code.claude.com/docs/en/monitoring-usage, "Events";
    services/tools/toolExecution.ts logOTelEvent('tool_result', ...): every value a string)."""
    base = {"event.name": name, "event.timestamp": "2025-10-09T08:53:20.000Z", "event.sequence": "7",
            "session.id": SESSION, "user.id": "u-1", "organization.id": "org-1", "prompt.id": "p-1",
            "terminal.type": "vscode"}  # fmt: skip
    kw.setdefault("body", f"claude_code.{name}")
    return LogData(time_ns=T_NS, attributes={**base, **attrs}, resource=CC_RESOURCE, source="otlp", **kw)


TOOL_RESULT = {
    "tool_name": "Read",
    "tool_use_id": "toolu_01AbCdEfGhIjKlMnOpQrStUv",
    "success": "true",
    "duration_ms": "42",
    "tool_result_size_bytes": "18234",
    "decision_source": "config",
    "decision_type": "accept",
    "tool_input": '{"file_path":"/repo/README.md"}',
}


def test_claude_code_tool_result_event() -> None:
    log = cc_event("tool_result", TOOL_RESULT)
    assert classify_log(log) == TOOL
    call, issues = tool_call_from_log(log)
    assert call is not None and not issues
    assert (call.dialect, call.tool_name, call.tool_call_id, call.status) == (
        "claude_code", "Read", "toolu_01AbCdEfGhIjKlMnOpQrStUv", "ok",
    )  # fmt: skip
    assert (call.raw, call.raw_bytes_declared) == (None, 18234)
    assert (call.start_ns, call.end_ns) == (T_NS - 42_000_000, T_NS)
    assert call.arguments == '{"file_path":"/repo/README.md"}'
    assert call.service_name == "claude-code"
    # no trace context on the record: one synthetic trace per session, span id from tool_use_id
    assert call.trace_id == synthetic_trace_id(SESSION) and len(call.trace_id) == 32
    assert call.span_id == synthetic_span_id("tool_use", "toolu_01AbCdEfGhIjKlMnOpQrStUv")
    assert call.parent_span_id is None


def test_claude_code_event_with_trace_context_keeps_its_trace_but_not_its_span() -> None:
    # in -p sessions with TRACEPARENT every event of a prompt carries the interaction span's ids
    a = cc_event("tool_result", TOOL_RESULT, trace_id="ab" * 16, span_id="cd" * 8, event_name="claude_code.tool_result")
    b = cc_event("tool_result", {**TOOL_RESULT, "tool_use_id": "toolu_2"}, trace_id="ab" * 16, span_id="cd" * 8)
    (ca, _), (cb, _) = tool_call_from_log(a), tool_call_from_log(b)
    assert ca is not None and cb is not None
    assert ca.trace_id == cb.trace_id == "ab" * 16
    assert ca.parent_span_id == cb.parent_span_id == "cd" * 8
    assert ca.span_id != cb.span_id  # two calls, two rows


def test_claude_code_failed_tool_and_legacy_name() -> None:
    # the first releases named the tool "name" and had no tool_use_id or size
    log = cc_event("tool_result", {"name": "Bash", "success": "false", "duration_ms": "1500.5",
                                   "error": "Command failed with exit code 1", "error_type": "ShellError"})  # fmt: skip
    call, issues = tool_call_from_log(log)
    assert call is not None and not issues
    assert (call.tool_name, call.status, call.error, call.raw_bytes_declared) == (
        "Bash", "error", "Command failed with exit code 1", None,
    )  # fmt: skip
    assert call.end_ns - call.start_ns == 1_500_500_000
    again, _ = tool_call_from_log(log)
    assert again is not None and again.span_id == call.span_id  # stable across re-ingestion


def test_claude_code_bad_values_are_issues_naming_the_field() -> None:
    log = cc_event("tool_result", {**TOOL_RESULT, "tool_result_size_bytes": "12kb", "duration_ms": "fast",
                                   "success": "maybe"})  # fmt: skip
    call, issues = tool_call_from_log(log)
    assert call is not None
    assert sorted(i.field for i in issues) == ["duration_ms", "success", "tool_result_size_bytes"]  # type: ignore[type-var]
    size = next(i for i in issues if i.field == "tool_result_size_bytes")
    assert "'12kb'" in size.message and size.source == "otlp" and size.span_id == call.span_id
    assert (call.raw_bytes_declared, call.status, call.start_ns) == (None, "unset", call.end_ns)
    assert any(w.startswith("tool_result_size_bytes:") for w in call.warnings)


def test_claude_code_event_name_from_the_record_or_the_attribute() -> None:
    by_field = LogData(time_ns=T_NS, attributes={"tool_name": "Grep"}, event_name="claude_code.tool_result")
    by_attr = LogData(time_ns=T_NS, attributes={"event.name": "tool_result", "tool_name": "Grep"})
    other = cc_event("user_prompt", {"prompt_length": "12"})
    assert classify_log(by_field) == classify_log(by_attr) == TOOL
    assert classify_log(other) is None and tool_call_from_log(other) == (None, [])
    assert llm_call_from_log(other) is None
    call, issues = tool_call_from_log(by_attr)  # no session.id: said, and still read
    assert call is not None and call.tool_name == "Grep"
    assert [i.field for i in issues] == ["session.id"]


def test_claude_code_time_from_event_timestamp_when_the_record_has_none() -> None:
    log = LogData(time_ns=0, attributes={"event.name": "tool_result", "tool_name": "Glob", "session.id": SESSION,
                                         "event.timestamp": "2025-10-09T08:53:20.250Z", "duration_ms": "250"})  # fmt: skip
    call, _ = tool_call_from_log(log)
    assert call is not None and call.end_ns == 1_759_999_999_000_000_000 + 1_250_000_000
    assert call.end_ns - call.start_ns == 250_000_000


API_REQUEST = {
    "model": "claude-sonnet-4-5-20250929",
    "cost_usd": "0.0123",
    "cost_usd_micros": "12300",
    "duration_ms": "2400",
    "input_tokens": "12",
    "output_tokens": "310",
    "cache_read_tokens": "41000",
    "cache_creation_tokens": "900",
    "request_id": "req_011CTxyz",
    "speed": "normal",
    "query_source": "repl_main_thread",
}


def test_claude_code_api_request_event() -> None:
    log = cc_event("api_request", API_REQUEST)
    assert classify_log(log) == LLM
    call = llm_call_from_log(log)
    assert call is not None
    assert (call.dialect, call.model, call.output_tokens) == ("claude_code", "claude-sonnet-4-5-20250929", 310)
    assert call.input_tokens == 12 + 41000 + 900  # the whole prompt: uncached + cache read + cache write
    assert (call.cache_read_tokens, call.cache_write_tokens) == (41000, 900)
    assert (call.start_ns, call.end_ns) == (T_NS - 2_400_000_000, T_NS)
    assert call.trace_id == synthetic_trace_id(SESSION)
    assert call.span_id == synthetic_span_id("api_request", "req_011CTxyz")


def test_claude_code_api_request_with_a_bad_value() -> None:
    log = cc_event("api_request", {**API_REQUEST, "output_tokens": "lots"})
    call, issues = llm_call_from_log_with_issues(log)
    assert call is not None and call.output_tokens is None and call.input_tokens == 41912
    assert [i.field for i in issues] == ["output_tokens"]
    assert llm_call_from_log(log) == call


@pytest.mark.parametrize("first", ["span", "event"])
def test_claude_codes_tool_span_and_tool_result_event_are_one_row_across_batches(tmp_path, first: str) -> None:  # type: ignore[no-untyped-def]
    """The span starts when the tool does; the event's start is its time less duration_ms (a
    millisecond apart, or more): the store finds the stored one all the same, in either order."""
    from collector.config import CollectorConfig
    from collector.model import LOG, Item
    from collector.pipeline import Pipeline

    pipeline = Pipeline(CollectorConfig(db=str(tmp_path / "cc.duckdb")))
    event = cc_event("tool_result", TOOL_RESULT, trace_id="ab" * 16, span_id="cd" * 8)
    attrs = {"span.type": "claude_code.tool", "tool_name": "Read", "tool_use_id": TOOL_RESULT["tool_use_id"],
             "duration_ms": 42, "result_tokens": 300}  # fmt: skip
    tool = SpanData(name="claude_code.tool", trace_id="ab" * 16, span_id="ef" * 8, start_ns=T_NS - 43_700_000,
                    end_ns=T_NS - 1_200_000, attributes=attrs, resource=CC_RESOURCE, status_code="ok")  # fmt: skip
    items = {"span": Item(TOOL, tool), "event": Item(LOG, event)}
    order = [first, "event" if first == "span" else "span"]
    written = [pipeline.write(pipeline.build_batch([items[k]])).tool_calls for k in order]
    with read_connection(pipeline.config.db) as con:
        rows = con.execute("SELECT tool_call_id, tool_name FROM tool_calls").fetchall()
    assert written == [1, 0] and rows == [(TOOL_RESULT["tool_use_id"], "Read")]


_KEYS = st.sampled_from(["id", "status", "type", "text", "parts", "toolResult", "functionCall", "json", "value"])
_CONTENT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_KEYS, kids, max_size=4),
    max_leaves=20,
)


@given(_CONTENT, st.sampled_from(["", " ", "\n"]))
def test_string_content_left_unparsed_is_never_content_blocks(value: Any, pad: str) -> None:
    from collector.dialects.messages import _looks_like_blocks, _may_be_blocks, _maybe_json

    text = pad + json.dumps(value)
    if not _may_be_blocks(text):  # a tool result as JSON text: read as the text itself, not parsed
        assert not _looks_like_blocks(_maybe_json(text))
