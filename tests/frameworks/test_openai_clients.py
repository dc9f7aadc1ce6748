"""OpenAI clients, run for real against the fake chat-completions server, traced into toolmeter.

* the OpenAI Agents SDK (``openai-agents``) with openinference-instrumentation-openai-agents
  (``drivers/openai_agents_sdk.py``, extra ``fw-openai-agents``);
* a hand-written ``openai`` tool loop (``drivers/openai_loop.py``), once per instrumentation:
  opentelemetry-instrumentation-openai-v2 (extra ``fw-openai-v2``; default v1.30 conventions
  with content as log events, and ``gen_ai_latest_experimental`` with content on the span and in
  an operation-details event) and openinference-instrumentation-openai (``fw-openai-openinference``).

The hand-written loop calls its tools itself, so no instrumentation sees them: the only trace
of a tool call is the tool-role message in the next model call's input.
"""

from __future__ import annotations

from typing import Any

import pytest

from collector.store.database import read_connection
from tests.frameworks.expect import check_cache_reads, check_run, llm_count

pytestmark = pytest.mark.frameworks

NAMES = ["search_orders", "fetch_logs", "get_status"]


def llm_rows(db: str) -> list[dict[str, Any]]:
    cols = ("dialect", "source", "model", "input_tokens", "output_tokens")
    with read_connection(db) as con:
        cur = con.execute(f"SELECT {', '.join(cols)} FROM llm_calls ORDER BY start_ns")
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def test_openai_agents_sdk(run_framework, counter) -> None:  # type: ignore[no-untyped-def]
    run = run_framework("fw-openai-agents", "openai_agents_sdk.py", name="openai_agents_sdk")
    assert sorted(run.returned) == sorted(NAMES)
    # OpenInference's processor replaced the SDK's own (OpenAI backend) trace processor
    assert run.extra["trace_processors"] == ["OpenInferenceTracingProcessor"]
    # the model was called twice: three parallel tool calls, then the answer
    assert len(run.model_requests) == 2
    assert llm_count(run.db) == len(run.model_requests)
    # the SDK's chat-completions usage reaches its span without cached_tokens
    check_cache_reads(run, emitted=False)
    assert [r["dialect"] for r in llm_rows(run.db)] == ["openinference"] * 2
    # the TOOL spans carry no call id: each is joined to the next model call's tool message for its tool,
    # in order, confirmed by its content
    rows = check_run(run, counter, raw=True, view=True)
    assert {r["view_join"] for r in rows} == {"order_content"}
    assert sorted(r["tool_call_id"] for r in rows) == sorted(f"call_{n}_{i}" for i, n in enumerate(NAMES, 1))


LOOP_RUNS = {
    # default (v1.30) conventions: spans without content; content as log records
    # gen_ai.{system,user,assistant,tool}.message and gen_ai.choice (needs capture=true)
    "openai_loop_v2": ("fw-openai-v2", {
        "DRIVER_INSTRUMENTATION": "openai-v2",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }),
    # latest experimental conventions: gen_ai.input.messages / gen_ai.output.messages on the span
    # and in a gen_ai.client.inference.operation.details log record
    "openai_loop_v2_latest": ("fw-openai-v2", {
        "DRIVER_INSTRUMENTATION": "openai-v2",
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_and_event",
    }),
    # llm.input_messages.N.message.{role,content,tool_call_id} on the span, content by default
    "openai_loop_openinference": ("fw-openai-openinference", {"DRIVER_INSTRUMENTATION": "openinference"}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LOOP_RUNS))
def test_openai_loop(run_framework, counter, name: str) -> None:  # type: ignore[no-untyped-def]
    extra, env = LOOP_RUNS[name]
    run = run_framework(extra, "openai_loop.py", name=name, env=env)
    assert sorted(run.returned) == sorted(NAMES)
    assert len(run.model_requests) == 2
    # every model call is counted, in each mode (one CLIENT/LLM span per chat.completions.create)
    assert llm_count(run.db) == len(run.model_requests)
    # openai-v2 2.4b0 reads cached_tokens on the Responses API only; OpenInference on both
    check_cache_reads(run, emitted=name == "openai_loop_openinference")
    assert all(r["input_tokens"] and r["output_tokens"] for r in llm_rows(run.db))
    # the app runs its tools itself: no tool span at all. Each call is recorded from the assistant's
    # tool_calls and the tool message that followed (in log records only, for openai_loop_v2)
    rows = check_run(run, counter, raw=True, view=True)
    assert {r["origin"] for r in rows} == {"messages"}
    assert all(any("no tool span" in w for w in r["warnings"]) for r in rows)
