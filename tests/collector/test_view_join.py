"""The model-facing view read from the next LLM call's input messages, joined by tool call id."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider

from collector import ToolResultProcessor
from collector.dialects.messages import tool_responses
from collector.store.database import read_connection

RAW = "\n".join(
    f"2026-11-20T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO request {i} served in {i % 97} ms" for i in range(3000)
)
SHOWN = RAW[:4000] + "\n... [truncated: 3,000 lines, first 4,000 characters shown]"


def gen_ai_messages(call_id: str, shown: str) -> str:
    return json.dumps([
        {"role": "user", "parts": [{"type": "text", "content": "why is checkout slow?"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "fetch_pod_logs", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": shown}]},
    ])  # fmt: skip


def pairs(attrs: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(r.call_id, r.text) for r in tool_responses(attrs)]


def test_tool_responses_in_each_dialect() -> None:
    assert pairs({"gen_ai.input.messages": gen_ai_messages("c1", "hi")}) == [("c1", "hi")]
    oi = {"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "q",
          "llm.input_messages.1.message.role": "tool", "llm.input_messages.1.message.tool_call_id": "c2",
          "llm.input_messages.1.message.content": "shown"}  # fmt: skip
    assert pairs(oi) == [("c2", "shown")]
    tl = {"gen_ai.prompt.3.role": "tool", "gen_ai.prompt.3.tool_call_id": "c3", "gen_ai.prompt.3.content": "x"}
    assert pairs(tl) == [("c3", "x")]
    structured = json.dumps(
        [{"role": "tool", "parts": [{"type": "tool_call_response", "id": "c4", "response": {"a": 1}}]}]
    )
    assert pairs({"gen_ai.input.messages": structured}) == [("c4", '{"a": 1}')]


def _run(
    provider: TracerProvider, processor: ToolResultProcessor, flush_between: bool, raw: str = RAW, shown: str = SHOWN
) -> None:
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"):
        tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_pod_logs",
                      "gen_ai.tool.call.id": "call_42", "gen_ai.tool.call.result": raw}  # fmt: skip
        with tracer.start_as_current_span("execute_tool fetch_pod_logs", attributes=tool_attrs):
            pass
        if flush_between:
            assert processor.force_flush()
        llm_attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": gen_ai_messages("call_42", shown)}
        with tracer.start_as_current_span("chat gpt-4o", attributes=llm_attrs):
            pass
    assert processor.force_flush()


def check(db: str, counter) -> None:  # type: ignore[no-untyped-def]
    with read_connection(db) as con:
        row = con.execute(
            "SELECT view_source, view_bytes, view_tokens, truncated, truncation_source, retained_ranges, raw_bytes "
            "FROM tool_calls"
        ).fetchone()
    assert row == ("message", len(SHOWN), counter.count(SHOWN).tokens, True, "inferred", [[0, 4000]], len(RAW))


def test_join_within_one_batch(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    _run(provider, processor, flush_between=False)
    check(db_path, counter)


def test_join_across_batches(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    _run(provider, processor, flush_between=True)
    check(db_path, counter)


def test_join_when_the_message_arrives_before_the_tool_span(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"):
        llm_attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": gen_ai_messages("call_42", SHOWN)}
        with tracer.start_as_current_span("chat gpt-4o", attributes=llm_attrs):
            pass
        assert processor.force_flush()  # the message is stored first (e.g. spans exported out of order)
        tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_pod_logs",
                      "gen_ai.tool.call.id": "call_42", "gen_ai.tool.call.result": RAW}  # fmt: skip
        with tracer.start_as_current_span("execute_tool fetch_pod_logs", attributes=tool_attrs):
            pass
    assert processor.force_flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT view_source, truncated, raw_tokens FROM tool_calls").fetchone() == (
            "message",
            True,
            counter.count(RAW).tokens,
        )


def test_a_late_joined_view_is_redacted_and_raw_counts_stay_those_of_the_original(
    provider_with, db_path: str, counter
) -> None:  # type: ignore[no-untyped-def]
    from collector.store.payloads import load_payload

    secret = "ghp_" + "a1B2c3D4e5" * 4
    raw = RAW + f"\ntoken leaked: {secret}\n"
    shown = raw[:3000] + f"\n{secret}\n[truncated]"
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"):
        tool_attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_pod_logs",
                      "gen_ai.tool.call.id": "call_7", "gen_ai.tool.call.result": raw}  # fmt: skip
        with tracer.start_as_current_span("execute_tool fetch_pod_logs", attributes=tool_attrs):
            pass
        assert processor.force_flush()
        llm_attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": gen_ai_messages("call_7", shown)}
        with tracer.start_as_current_span("chat gpt-4o", attributes=llm_attrs):
            pass
    assert processor.force_flush()
    with read_connection(db_path) as con:
        trace_id, span_id, view_source, raw_tokens = con.execute(
            "SELECT trace_id, span_id, view_source, raw_tokens FROM tool_calls"
        ).fetchone()  # type: ignore[misc]
        view = load_payload(con, db_path, trace_id, span_id, "view")
    assert view_source == "message" and raw_tokens == counter.count(raw).tokens
    assert view is not None and secret.encode() not in view.head and b"REDACTED" in view.head


def test_a_json_result_in_a_message_is_the_very_text_the_model_read(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    # a tool's compact JSON, passed to the model as it is: the view is those bytes, not a re-encoding
    # (which spaced it out, counted 40 % more tokens and called the call "rewritten")
    raw = json.dumps([{"id": i, "status": "paid", "note": "x" * 20} for i in range(30)], separators=(",", ":"))
    assert pairs({"gen_ai.input.messages": gen_ai_messages("c1", raw)}) == [("c1", raw)]
    blocks = json.dumps([{"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}])
    assert pairs({"gen_ai.input.messages": gen_ai_messages("c2", blocks)}) == [("c2", "line one\nline two")]
    provider, processor = provider_with(flush_interval=3600)
    _run(provider, processor, flush_between=False, raw=raw, shown=raw)
    from collector.store.payloads import load_payload

    with read_connection(db_path) as con:
        row = con.execute(
            "SELECT view_source, raw_bytes = view_bytes, raw_tokens = view_tokens, truncated, trace_id, span_id "
            "FROM tool_calls"
        ).fetchone()
        assert row is not None and row[:4] == ("message", True, True, False)
        # the view is the raw result byte for byte: its bytes are stored once, and read back whole
        kept = con.execute("SELECT kind, inline IS NOT NULL, same_as FROM payloads ORDER BY kind").fetchall()
        assert kept == [("raw", True, None), ("view", False, "raw")]
        raw_payload, view_payload = (load_payload(con, db_path, row[4], row[5], kind) for kind in ("raw", "view"))
    assert view_payload == raw_payload and raw_payload is not None and raw_payload.head == raw.encode()


def test_a_response_repeated_by_later_model_calls_is_read_from_its_first_carrier() -> None:
    history = [
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "first"}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c2", "response": "second"}]},
    ]
    attrs = {"gen_ai.input.messages": json.dumps(history)}
    everything = tool_responses(attrs)
    assert [(r.call_id, r.text, r.position) for r in everything] == [("c1", "first", 0), ("c2", "second", 1)]
    # c1 was read from an earlier call of the run: left out, and c2 keeps its place in this input
    assert [(r.call_id, r.text, r.position) for r in tool_responses(attrs, known={"c1"})] == [("c2", "second", 1)]
