"""Views joined by the conversation when tool spans carry no call id, tool calls derived from the messages,
events as a source, and the payload cap: real SDK spans through the in-process processor into DuckDB."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry import trace

from collector.store.database import read_connection

LOG = "\n".join(f"2026-11-20T10:{i // 60 % 60:02d}:{i % 60:02d}Z INFO checkout request {i} took {i % 97} ms"
                for i in range(60_000))  # fmt: skip  # ~3.7 MB, over the 1 MiB payload cap


def oi_llm(messages: list[dict]) -> dict:  # type: ignore[type-arg]
    """OpenInference's flattened input messages."""
    attrs = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o"}
    for i, m in enumerate(messages):
        for k, v in m.items():
            if k == "tool_calls":
                for j, (cid, name) in enumerate(v):
                    attrs[f"llm.input_messages.{i}.message.tool_calls.{j}.tool_call.id"] = cid
                    attrs[f"llm.input_messages.{i}.message.tool_calls.{j}.tool_call.function.name"] = name
            else:
                attrs[f"llm.input_messages.{i}.message.{k}"] = v
    return attrs


def rows(db: str, cols: str) -> list[tuple]:  # type: ignore[type-arg]
    with read_connection(db) as con:
        return con.execute(f"SELECT {cols} FROM tool_calls ORDER BY start_ns, tool_call_id").fetchall()


@pytest.mark.parametrize("flush_between", [False, True])
def test_two_parallel_calls_of_one_tool_without_ids(provider_with, db_path: str, counter, flush_between) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    eu, us = (
        json.dumps([{"region": "eu", "n": i} for i in range(50)]),
        json.dumps([{"region": "us", "n": i} for i in range(80)]),
    )
    with tracer.start_as_current_span("agent"):
        for result in (eu, us):  # eu starts first
            with tracer.start_as_current_span("lookup", attributes={"openinference.span.kind": "TOOL",
                                                                     "tool.name": "lookup", "output.value": result}):  # fmt: skip
                pass
        if flush_between:
            assert processor.force_flush()
        # the model's input answers us first: order alone would swap them, content does not
        msgs = [{"role": "user", "content": "regions?"},
                {"role": "assistant", "tool_calls": [("c_us", "lookup"), ("c_eu", "lookup")]},
                {"role": "tool", "tool_call_id": "c_us", "content": us},
                {"role": "tool", "tool_call_id": "c_eu", "content": eu[:500] + "\n[truncated]"}]  # fmt: skip
        with tracer.start_as_current_span("ChatCompletion", attributes=oi_llm(msgs)):
            pass
    assert processor.force_flush()
    got = rows(db_path, "tool_call_id, view_join, truncated, view_tokens, raw_tokens")
    assert got == [
        ("c_eu", "order_content", True, counter.count(eu[:500] + "\n[truncated]").tokens, counter.count(eu).tokens),
        ("c_us", "order_content", False, counter.count(us).tokens, counter.count(us).tokens),
    ]


def test_no_join_on_a_guess(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    # two id-less calls of one tool with no result to compare: neither is joined
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("agent"):
        for _ in range(2):
            with tracer.start_as_current_span(
                "lookup", attributes={"openinference.span.kind": "TOOL", "tool.name": "lookup"}
            ):
                pass
        msgs = [{"role": "assistant", "tool_calls": [("c1", "lookup"), ("c2", "lookup")]},
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": "two"}]  # fmt: skip
        with tracer.start_as_current_span("ChatCompletion", attributes=oi_llm(msgs)):
            pass
    assert processor.force_flush()
    assert rows(db_path, "tool_call_id, view_source, origin") == [(None, "raw", "span"), (None, "raw", "span")]
    for (warnings,) in rows(db_path, "warnings"):  # and each says why
        assert any("no view joined (the tool span has no call id)" in w for w in warnings)


def test_calls_derived_from_messages_give_way_to_a_later_tool_span(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    messages = json.dumps([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_9", "name": "get_status", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_9", "response": "shipped"}]},
    ])  # fmt: skip
    root = tracer.start_span("agent")
    ctx = trace.set_span_in_context(root)
    with tracer.start_as_current_span("chat gpt-4o", context=ctx, attributes={"gen_ai.operation.name": "chat",
                                                                  "gen_ai.input.messages": messages}):  # fmt: skip
        pass
    assert processor.force_flush()
    assert rows(db_path, "tool_name, tool_call_id, origin, raw_tokens, view_source, later_llm_calls") == [
        ("get_status", "call_9", "messages", counter.count("shipped").tokens, "message", 1)
    ]
    # the tool span of the same call arrives later: it replaces the derived call, and the view joins
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_status",
             "gen_ai.tool.call.id": "call_9", "gen_ai.tool.call.result": "shipped"}  # fmt: skip
    with tracer.start_as_current_span("execute_tool get_status", context=ctx, attributes=attrs):
        pass
    root.end()
    assert processor.force_flush()
    assert rows(db_path, "tool_name, tool_call_id, origin, view_source") == [
        ("get_status", "call_9", "span", "message")
    ]


def test_a_batch_and_the_calls_derived_from_it_are_committed_together(provider_with, db_path: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The call derived from a model call's messages is written in the same transaction as the model
    call: when writing it fails, neither is stored (no model call left without its tool call), and
    when it succeeds the derived call is counted once, as written."""
    from collector.joins import ViewJoins

    messages = json.dumps([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "get_status", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "shipped"}]},
    ])  # fmt: skip
    derive = ViewJoins._derive

    def broken(self, views):  # type: ignore[no-untyped-def]
        derive(self, views)  # the derived call is written, then the write fails
        raise RuntimeError("the derived calls could not be written")

    monkeypatch.setattr(ViewJoins, "_derive", broken)
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat",
                                                                 "gen_ai.input.messages": messages}):  # fmt: skip
        pass
    processor.force_flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT (SELECT count(*) FROM llm_calls), (SELECT count(*) FROM tool_calls)").fetchone() == (
            0,
            0,
        )

    monkeypatch.setattr(ViewJoins, "_derive", derive)
    with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat",
                                                                 "gen_ai.input.messages": messages}):  # fmt: skip
        pass
    assert processor.force_flush()
    assert rows(db_path, "tool_call_id, origin") == [("call_1", "messages")]
    assert processor.counters["tool_calls_written"] == 1


def test_a_derived_call_gives_way_to_a_tool_span_that_began_hours_before_it(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    """The derived call is dated by the model call that read the response; the tool span, arriving
    after it, began two hours before (a long-running tool): the write still finds and replaces it."""
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    now, hour = time.time_ns(), 3600 * 10**9
    messages = json.dumps([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_7", "name": "build", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_7", "response": "built"}]},
    ])  # fmt: skip
    root = tracer.start_span("agent", start_time=now - 3 * hour)
    ctx = trace.set_span_in_context(root)
    chat = tracer.start_span("chat gpt-4o", context=ctx, start_time=now,
                             attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": messages})  # fmt: skip
    chat.end(end_time=now + 10**9)
    assert processor.force_flush()
    assert rows(db_path, "tool_call_id, origin") == [("call_7", "messages")]
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "build",
             "gen_ai.tool.call.id": "call_7", "gen_ai.tool.call.result": "built"}  # fmt: skip
    tool = tracer.start_span("execute_tool build", context=ctx, start_time=now - 2 * hour, attributes=attrs)
    tool.end(end_time=now - 10**6)
    root.end(end_time=now + 2 * 10**9)
    assert processor.force_flush()
    assert rows(db_path, "tool_name, tool_call_id, origin, view_source") == [("build", "call_7", "span", "message")]


def test_views_from_span_events(provider_with, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    # per-message events on the LLM span (GenAI conventions before 1.37, as Strands writes them)
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("agent"):
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs", "gen_ai.tool.call.id": "t1"}
        with tracer.start_as_current_span("execute_tool fetch_logs", attributes=tool) as span:
            span.add_event("gen_ai.choice", {"message": json.dumps([{"text": LOG[:5000]}]), "id": "t1"})
        with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}) as span:
            span.add_event(
                "gen_ai.assistant.message",
                {"content": json.dumps([{"toolUse": {"toolUseId": "t1", "name": "fetch_logs", "input": {}}}])},
            )
            span.add_event("gen_ai.tool.message", {"content": json.dumps(
                [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": LOG[:1000]}]}}])})  # fmt: skip
    assert processor.force_flush()
    assert rows(db_path, "raw_tokens, raw_wrapper, view_tokens, view_join, truncation_kind") == [
        (counter.count(LOG[:5000]).tokens, "content_blocks", counter.count(LOG[:1000]).tokens, "call_id", "head")
    ]


@pytest.mark.parametrize("size", ["small", "over_cap"])
@pytest.mark.parametrize("order", ["tool_first", "message_first"])
def test_truncation_is_the_same_below_and_over_the_payload_cap(provider_with, db_path: str, size, order) -> None:  # type: ignore[no-untyped-def]
    raw = LOG if size == "over_cap" else LOG[:20_000]
    assert (len(raw) > 1024 * 1024) == (size == "over_cap")
    view = raw[:4000] + "\n... [8,000 lines cut] ...\n" + raw[-2000:]
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs", "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.result": raw}  # fmt: skip
    messages = json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": view}]}])
    llm = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": messages}
    spans = [("execute_tool fetch_logs", tool), ("chat", llm)]
    with tracer.start_as_current_span("agent"):
        for name, attrs in spans if order == "tool_first" else spans[::-1]:
            with tracer.start_as_current_span(name, attributes=attrs):
                pass
            assert processor.force_flush()  # each in its own batch
    n = len(raw)
    assert rows(db_path, "truncated, truncation_kind, retained_ranges, retained_bytes, view_source") == [
        (True, "head_tail", [[0, 4000], [n - 2000, n]], 6000, "message")
    ]


@pytest.mark.parametrize("order", ["names first", "responses first"])
def test_a_model_calls_log_records_split_across_batches_still_name_its_tools(serve, db_path: str, order: str) -> None:  # type: ignore[no-untyped-def]
    """The GenAI per-message log records of one model call, as the OpenAI instrumentation emits them:
    the assistant message names the tools, the tool messages carry only the call id. An exporter can
    send them in different requests that reach the store in different batches, in either order."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider

    r = serve()
    logs = LoggerProvider(shutdown_on_exit=False)
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{r.url}/v1/logs")))
    logger = logs.get_logger("opentelemetry.instrumentation.openai_v2")
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("app")
    asked = {"call_w": "get_weather", "call_o": "lookup_order"}
    with tracer.start_as_current_span("chat gpt-4o"):  # the records belong to the model call's span
        assistant = LogRecord(event_name="gen_ai.assistant.message", body={"tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name}} for cid, name in asked.items()]})  # fmt: skip
        answers = [LogRecord(event_name="gen_ai.tool.message", body={"content": f"result of {cid}", "id": cid})
                   for cid in asked]  # fmt: skip
        parts = [[assistant], answers] if order == "names first" else [answers, [assistant]]
        for part in parts:  # each part a request of its own, written in a batch of its own
            for record in part:
                logger.emit(record)
            assert r.receiver.flush(timeout_s=30)
    logs.shutdown()
    with read_connection(db_path) as con:
        views = con.execute("SELECT tool_call_id, tool_name FROM message_views ORDER BY 1").fetchall()
        calls = con.execute("SELECT tool_call_id, tool_name, origin FROM tool_calls ORDER BY 1").fetchall()
    assert views == [("call_o", "lookup_order"), ("call_w", "get_weather")]
    assert calls == [("call_o", "lookup_order", "messages"), ("call_w", "get_weather", "messages")]


def test_message_log_records_without_a_trace_are_skipped_and_said(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider

    r = serve()
    logs = LoggerProvider(shutdown_on_exit=False)
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{r.url}/v1/logs")))
    logger = logs.get_logger("opentelemetry.instrumentation.openai_v2")
    # outside any span: nothing ties the response to a model call
    logger.emit(LogRecord(event_name="gen_ai.tool.message", body={"content": "lost", "id": "call_a"}))
    assert r.receiver.flush(timeout_s=30)
    with TracerProvider(shutdown_on_exit=False).get_tracer("app").start_as_current_span("chat gpt-4o"):
        logger.emit(LogRecord(event_name="gen_ai.tool.message", body={"content": "kept", "id": "call_b"}))
    assert r.receiver.flush(timeout_s=30)  # the store still takes batches after the untraced one
    logs.shutdown()
    with read_connection(db_path) as con:
        views = con.execute("SELECT tool_call_id FROM message_views").fetchall()
        issues = con.execute("SELECT field, message FROM ingest_issues").fetchall()
    assert views == [("call_b",)]
    assert (
        len(issues) == 1
        and issues[0][0] == "traceId"
        and "1 GenAI message log record(s) carry no trace id" in issues[0][1]
    )
