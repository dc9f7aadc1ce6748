"""A write reads its traces' stored rows from where those traces begin, however long before.

Real OpenTelemetry SDK spans through an in-process ToolResultProcessor into a DuckDB file; the
traces' spans are dated hours apart and written in separate flushes, with other traces' writes
between them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import duckdb
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span

from collector import ToolResultProcessor
from collector.store.database import read_connection

HOUR = 3600 * 10**9
MODEL = "gpt-4o"


def messages(call_id: str, shown: str) -> str:
    return json.dumps([
        {"role": "assistant", "parts": [{"type": "tool_call", "id": call_id, "name": "search", "arguments": {}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": shown}]},
    ])  # fmt: skip


class Agent:
    def __init__(self, provider: TracerProvider, processor: ToolResultProcessor) -> None:
        self.tracer = provider.get_tracer("agent")
        self.processor = processor

    def run(self, start_ns: int) -> Span:
        return self.tracer.start_span("invoke_agent", start_time=start_ns)

    def tool(self, run: Span, call_id: str, start_ns: int, result: str) -> None:
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                 "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.result": result}  # fmt: skip
        span = self.tracer.start_span("execute_tool search", trace.set_span_in_context(run), attributes=attrs,
                                      start_time=start_ns)  # fmt: skip
        span.end(end_time=start_ns + 10**9)

    def chat(self, run: Span, start_ns: int, input_messages: str | None = None) -> None:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL}
        if input_messages is not None:
            attrs["gen_ai.input.messages"] = input_messages
        span = self.tracer.start_span(f"chat {MODEL}", trace.set_span_in_context(run), attributes=attrs,
                                      start_time=start_ns)  # fmt: skip
        span.end(end_time=start_ns + 10**9)

    def flush(self) -> None:
        assert self.processor.force_flush()

    def others(self, *starts: int) -> None:
        """Other traces, each a tool call read by a model call, written one flush each."""
        for i, start in enumerate(starts):
            run = self.run(start)
            self.tool(run, f"other_{i}", start, "other result " * 20)
            self.chat(run, start + 2 * 10**9, messages(f"other_{i}", "other result " * 20))
            run.end(end_time=start + 4 * 10**9)
            self.flush()


def rows(db: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with read_connection(db) as con:
        return con.execute(sql, list(params)).fetchall()


def test_a_trace_begun_hours_before_is_recounted_joined_and_not_stored_twice(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    """The first model call reads the result five hours before the last one, which carries it
    again; other traces are written in between. The last write recounts the old tool call (read
    twice), keeps its view once and measures the call against the view."""
    provider, processor = provider_with(flush_interval=3600)
    agent = Agent(provider, processor)
    now = time.time_ns()
    result, shown = "row " * 400, "row " * 100 + "[cut]"
    run = agent.run(now - 5 * HOUR)
    agent.tool(run, "call_1", now - 5 * HOUR, result)
    agent.flush()
    agent.others(now - 4 * HOUR, now - 3 * HOUR, now - 2 * HOUR)
    agent.chat(run, now - 5 * HOUR + 60 * 10**9, messages("call_1", shown))
    agent.flush()
    agent.others(now - HOUR)
    agent.chat(run, now, messages("call_1", shown))
    run.end(end_time=now + 2 * 10**9)
    agent.flush()
    assert rows(db_path, "SELECT later_llm_calls, read_by_model, view_source, view_bytes FROM tool_calls "
                         "WHERE tool_call_id = 'call_1'") == [(2, MODEL, "message", len(shown))]  # fmt: skip
    assert rows(db_path, "SELECT count(*) FROM message_views WHERE tool_call_id = 'call_1'") == [(1,)]


def test_a_view_stored_without_a_time_by_an_earlier_version_still_joins(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    """A store made before views kept the time of their model call: the tool span that arrives
    later still finds its view, as it did before writes were bounded by where traces begin."""
    provider, processor = provider_with(flush_interval=3600)
    agent = Agent(provider, processor)
    now = time.time_ns()
    result, shown = "line " * 400, "line " * 50 + "[cut]"
    run = agent.run(now - 2 * HOUR)
    agent.chat(run, now - HOUR, messages("call_2", shown))
    agent.flush()
    with duckdb.connect(db_path) as con:  # as an earlier version stored it
        con.execute("UPDATE message_views SET llm_start_ns = NULL")
    agent.others(now - HOUR + 60 * 10**9)
    agent.tool(run, "call_2", now - HOUR - 60 * 10**9, result)
    run.end(end_time=now)
    agent.flush()
    assert rows(db_path, "SELECT view_source, view_bytes FROM tool_calls WHERE tool_call_id = 'call_2'") == [
        ("message", len(shown))
    ]


def two_writers(provider_with) -> tuple[Agent, Agent, Span, int]:  # type: ignore[no-untyped-def]
    """Two collectors on one file (a and b), and a trace begun five hours ago that a has written a
    model call of, four hours ago: a now knows where the trace begins. Returns (a, b, the trace's
    run span, now)."""
    provider_a, processor_a = provider_with(flush_interval=3600)
    provider_b, processor_b = provider_with(flush_interval=3600)
    a, b = Agent(provider_a, processor_a), Agent(provider_b, processor_b)
    now = time.time_ns()
    run = a.run(now - 5 * HOUR)
    a.chat(run, now - 4 * HOUR)
    a.flush()
    return a, b, run, now


def test_a_row_another_writer_stored_between_two_writes_is_read(provider_with, db_path: str) -> None:  # type: ignore[no-untyped-def]
    """The writer keeps where each trace begins from its own writes; another process writing the
    same file in between (here a second collector) stores an earlier tool call of a trace this
    writer knows. Its next write still recounts that call: read by both model calls."""
    a, b, run, now = two_writers(provider_with)
    b.tool(run, "call_3", now - 5 * HOUR, "rows " * 300)  # the other: a call an hour earlier
    b.flush()
    a.chat(run, now)
    run.end(end_time=now + 10**9)
    a.flush()
    assert rows(db_path, "SELECT later_llm_calls FROM tool_calls WHERE tool_call_id = 'call_3'") == [(2,)]


def test_past_the_traces_it_keeps_a_writer_reads_where_traces_begin(provider_with, db_path: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A day of more traces than the writer keeps: writes find where their traces begin with a
    read, with the same result."""
    from collector.store import starts

    monkeypatch.setattr(starts, "MAX_TRACES", 2)
    provider, processor = provider_with(flush_interval=3600)
    agent = Agent(provider, processor)
    now = time.time_ns()
    run = agent.run(now - 5 * HOUR)
    agent.tool(run, "call_4", now - 5 * HOUR, "cells " * 300)
    agent.flush()
    agent.others(now - 4 * HOUR, now - 3 * HOUR, now - 2 * HOUR)
    agent.chat(run, now - HOUR)
    agent.flush()
    agent.chat(run, now)
    run.end(end_time=now + 10**9)
    agent.flush()
    assert rows(db_path, "SELECT later_llm_calls FROM tool_calls WHERE tool_call_id = 'call_4'") == [(2,)]


def test_a_failed_look_at_the_file_leaves_the_map_checked_at_the_next_write(
    provider_with, db_path: str, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The look at how the file was left fails once (as a broken connection would): that write
    still goes in, and the writes after it still notice another writer's rows."""
    from collector.store.starts import TraceStarts

    a, b, run, now = two_writers(provider_with)
    mark, failures = TraceStarts._mark, [1]

    def failing(self, con):  # type: ignore[no-untyped-def]
        if failures:
            failures.pop()
            raise duckdb.ConnectionException("connection lost")
        return mark(self, con)

    monkeypatch.setattr(TraceStarts, "_mark", failing)
    a.chat(run, now - 3 * HOUR)
    a.flush()
    b.tool(run, "call_5", now - 5 * HOUR, "rows " * 300)
    b.flush()
    a.chat(run, now)
    run.end(end_time=now + 10**9)
    a.flush()
    assert rows(db_path, "SELECT count(*) FROM llm_calls") == [(3,)]
    assert rows(db_path, "SELECT later_llm_calls FROM tool_calls WHERE tool_call_id = 'call_5'") == [(3,)]
