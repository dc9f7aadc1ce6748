"""Pydantic AI and LangGraph (OpenInference, OpenLLMetry) agents, each exporting OTLP to toolmeter.

Every run: the fake model asks for the three tools in one message, gets their results, answers;
two model requests, one row per tool call expected.
"""

from __future__ import annotations

import pytest

from tests.frameworks.expect import check_cache_reads, check_run, llm_count, llm_usage

pytestmark = pytest.mark.frameworks


def test_pydantic_ai(run_framework, counter):  # type: ignore[no-untyped-def]
    """Built-in instrumentation, default data format (version 5): gen_ai.tool.call.result, gen_ai.input.messages."""
    run = run_framework("fw-pydantic-ai", "pydantic_ai_agent.py", name="pydantic_ai")
    assert run.extra["instrumentation_version"] == 5
    rows = check_run(run, counter, raw=True, view=True)
    assert all(r["tool_call_id"] for r in rows)
    assert llm_count(run.db) == len(run.model_requests) == 2
    # gen_ai.usage.details.cache_read_tokens, present on the call that read from the cache only
    assert [u[2] for u in llm_usage(run.db)] == [None, run.usages[1]["prompt_tokens_details"]["cached_tokens"]]


def test_langgraph_openinference(run_framework, counter):  # type: ignore[no-untyped-def]
    """OpenInference: TOOL spans' output.value is the ToolMessage as JSON; llm.input_messages.* on the LLM span."""
    run = run_framework("fw-langgraph-openinference", "langgraph_openinference.py", name="langgraph_openinference")
    rows = check_run(run, counter, raw=True, view=True)
    assert all(r["tool_call_id"] for r in rows)
    # the LangGraph 'model' CHAIN spans repeat llm.input_messages.* but are not counted as model calls
    assert llm_count(run.db) == len(run.model_requests) == 2
    check_cache_reads(run)  # llm.token_count.prompt_details.cache_read


def test_langgraph_traceloop(run_framework, counter):  # type: ignore[no-untyped-def]
    """OpenLLMetry, span attributes (default use_attributes=True): gen_ai.tool.call.result, gen_ai.input.messages."""
    run = run_framework("fw-langgraph-traceloop", "langgraph_traceloop.py", name="langgraph_traceloop")
    # gen_ai.tool.call.result is LangChain's constructor form {"output": {"lc": 1, ..., "kwargs": {"content",
    # "tool_call_id"}}, "kwargs": {...}}: unwrapped, its call id read from inside it, so the view joins
    rows = check_run(run, counter, raw=True, view=True)
    assert {r["view_source"] for r in rows} == {"message"}
    assert llm_count(run.db) == len(run.model_requests) == 2
    check_cache_reads(run)  # gen_ai.usage.cache_read_input_tokens


def test_langgraph_traceloop_events(run_framework, counter):  # type: ignore[no-untyped-def]
    """OpenLLMetry with use_attributes=False: prompts/completions as OTLP log records, none on the tool spans."""
    run = run_framework("fw-langgraph-traceloop", "langgraph_traceloop.py", name="langgraph_traceloop_events",
                        env={"TOOLMETER_TRACELOOP_MODE": "events"})  # fmt: skip
    # the tool spans carry neither a result nor a call id, and the gen_ai.tool.message records no id: each
    # record takes the id of the assistant's pending tool call in order, and each span is joined to the one
    # response of its tool in the next model call (view_join 'order', said in a warning); raw is that response
    rows = check_run(run, counter, raw=True, view=True)
    assert {r["view_join"] for r in rows} == {"order"}
    assert all(any("joined by the conversation" in w for w in r["warnings"]) for r in rows)
    assert llm_count(run.db) == len(run.model_requests) == 2
    check_cache_reads(run)
