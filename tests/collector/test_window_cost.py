"""Window cost read by read: prompt-cache reads, results cleared by context editing, compaction.

Real OpenTelemetry SDK spans through an in-process ToolResultProcessor into a DuckDB file.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from collector import ToolResultProcessor
from collector.store.database import read_connection


class Agent:
    """Tool spans and model-call spans in one trace, in the order they are made."""

    def __init__(self, db: str, flush_between: bool = False) -> None:
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.processor = ToolResultProcessor(db=db, flush_interval=0.05)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("agent")
        self.flush_between = flush_between

    def llm(self, **usage: Any) -> None:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5"}
        attrs.update({k.replace("__", "."): v for k, v in usage.items()})
        with self.tracer.start_as_current_span("chat claude-sonnet-4-5", attributes=attrs):
            pass
        if self.flush_between:
            self.processor.force_flush()

    def tool(self, name: str, result: str) -> None:
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.result": result}
        with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs):
            pass

    def close(self) -> None:
        self.processor.force_flush()
        self.provider.shutdown()


COLUMNS = "tool_name, later_llm_calls, cached_reads, cache_written, cleared_by, read_by_model"


def reads(db: str) -> dict[str, tuple[Any, ...]]:
    with read_connection(db) as con:
        rows = con.execute(f"SELECT {COLUMNS} FROM tool_calls").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def run_cached_and_cleared(db: str, flush_between: bool = False) -> None:
    agent = Agent(db, flush_between)
    with agent.tracer.start_as_current_span("invoke_agent"):
        agent.llm(gen_ai__usage__input_tokens=1000, gen_ai__usage__cache_creation__input_tokens=1000)
        agent.tool("a", "alpha " * 50)
        agent.tool("b", "beta " * 50)
        # the first call to read a and b: it writes them to the cache
        agent.llm(gen_ai__usage__input_tokens=3000, gen_ai__usage__cache_read__input_tokens=1000,
                  gen_ai__usage__cache_creation__input_tokens=2000)  # fmt: skip
        agent.tool("c", "gamma " * 50)
        # its cached prefix reaches past everything the call before read: a and b come from the cache
        agent.llm(gen_ai__usage__input_tokens=5000, gen_ai__usage__cache_read__input_tokens=3000)
        # context editing cleared the oldest tool use (a); the cache now covers the system prompt only
        agent.llm(gen_ai__usage__input_tokens=6000, gen_ai__usage__cache_read__input_tokens=1000,
                  toolmeter__context__cleared_tool_uses=1)  # fmt: skip
        # the conversation so far was summarised: a, b and c are read no more
        agent.llm(gen_ai__usage__input_tokens=900, gen_ai__conversation__compacted=True)
        agent.tool("d", "delta " * 50)
        agent.llm(gen_ai__usage__input_tokens=1200, gen_ai__usage__cache_read__input_tokens=0)
    agent.close()


EXPECTED = {
    # (later reads, of them from the cache, first reader wrote the cache, cleared by, read by)
    "a": (2, 1, True, "context_edit", "claude-sonnet-4-5"),
    "b": (3, 1, True, "compaction", "claude-sonnet-4-5"),
    # their first readers say nothing of cache writes: unknown
    "c": (2, 0, None, "compaction", "claude-sonnet-4-5"),
    "d": (1, 0, None, None, "claude-sonnet-4-5"),
}


def test_reads_are_counted_through_cache_clearing_and_compaction(db_path: str) -> None:
    run_cached_and_cleared(db_path)
    assert reads(db_path) == EXPECTED


def test_the_same_counts_when_the_model_calls_arrive_in_later_writes(db_path: str) -> None:
    run_cached_and_cleared(db_path, flush_between=True)
    assert reads(db_path) == EXPECTED


def test_a_trace_without_cache_figures_keeps_the_plain_count(db_path: str) -> None:
    agent = Agent(db_path)
    with agent.tracer.start_as_current_span("invoke_agent"):
        agent.llm(gen_ai__usage__input_tokens=100)
        agent.tool("a", "alpha")
        agent.llm(gen_ai__usage__input_tokens=200)
        agent.llm(gen_ai__usage__input_tokens=300)
    agent.close()
    # cache reads unknown (None), not zero: nothing reported them
    assert reads(db_path) == {"a": (2, None, None, None, "claude-sonnet-4-5")}


def test_compaction_counted_where_the_compaction_parts_grow(db_path: str) -> None:
    """A summary stays in the conversation: only the call whose input first carries it compacts."""
    summary = [{"role": "assistant", "parts": [{"type": "compaction", "content": "turns 1-9"}]}]
    agent = Agent(db_path)
    with agent.tracer.start_as_current_span("invoke_agent"):
        agent.llm(gen_ai__input__messages="[]")
        agent.tool("a", "alpha")
        agent.llm(gen_ai__input__messages="[]")
        agent.llm(gen_ai__input__messages=json.dumps(summary))
        agent.tool("b", "beta")
        agent.llm(gen_ai__input__messages=json.dumps(summary))
        agent.llm(gen_ai__input__messages=json.dumps(summary))
    agent.close()
    got = {k: (v[0], v[3]) for k, v in reads(db_path).items()}
    assert got == {"a": (1, "compaction"), "b": (2, None)}


def test_a_model_call_traced_twice_side_by_side_is_one_call_and_two_calls_stay_two(db_path: str) -> None:
    """OpenLLMetry's span beside the Anthropic SDK's own (never made current) is one call; two
    of the agent's own calls, at the very same instants or of other sizes, stay two."""
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ToolResultProcessor(db=db_path, flush_interval=0.05)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent")
    t = 1_763_800_000_000_000_000

    def call(name: str, start: int, end: int, tokens: int) -> None:
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": tokens}
        tracer.start_span(name, attributes=attrs, start_time=start).end(end_time=end)

    with tracer.start_as_current_span("invoke_agent", start_time=t):
        call("anthropic.chat", t + 10, t + 100, 500)  # the instrumentation's span...
        call("anthropic.messages.create", t + 12, t + 98, 500)  # ...and the SDK's, inside it in time
        call("chat", t + 200, t + 300, 700)  # two calls over the very same instants
        call("chat", t + 200, t + 300, 700)
        call("chat", t + 400, t + 500, 900)  # a call inside another one in time, of another size
        call("chat", t + 410, t + 490, 950)
    processor.force_flush()
    provider.shutdown()
    with read_connection(db_path) as con:
        tokens = sorted(r[0] for r in con.execute("SELECT input_tokens FROM llm_calls").fetchall())
    assert tokens == [500, 700, 700, 900, 950]


def test_a_result_no_model_call_read_yet_counts_zero_until_one_arrives_in_a_later_write(db_path: str) -> None:
    agent = Agent(db_path)
    with agent.tracer.start_as_current_span("invoke_agent"):
        agent.tool("a", "alpha " * 50)
        agent.processor.force_flush()  # the tool call's write finds no model call in its trace
        assert reads(db_path) == {"a": (0, None, None, None, None)}  # known: read by none so far
        agent.llm(gen_ai__usage__input_tokens=100)
        agent.processor.force_flush()  # a write of the model call alone recounts the trace
        assert reads(db_path) == {"a": (1, None, None, None, "claude-sonnet-4-5")}
        agent.llm(gen_ai__usage__input_tokens=300, gen_ai__usage__cache_read__input_tokens=100)
    agent.close()
    # the second call reports cache figures: the trace is now counted read by read, and its
    # cached prefix reaches as far as the first reader's input
    assert reads(db_path) == {"a": (2, 1, None, None, "claude-sonnet-4-5")}
