"""Usage as each dialect reports it: cached input tokens, and what a call's input left out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from collector.dialects.spans import extract_llm_call
from collector.model import SpanData


def llm(attrs: dict[str, Any], name: str = "chat claude-sonnet-4-5") -> SpanData:
    base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5"}
    return SpanData(name, "t" * 32, "s" * 16, 1, 2, {**base, **attrs})


CACHED = [
    # the conventions: cache reads and writes are part of the input tokens
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 800,
      "gen_ai.usage.cache_creation.input_tokens": 150}, (1000, 800, 150)),
    # Anthropic's own input_tokens passed on as is: the uncached part only, so the cached are added
    ({"gen_ai.usage.input_tokens": 50, "gen_ai.usage.cache_read.input_tokens": 800,
      "gen_ai.usage.cache_creation.input_tokens": 150}, (1000, 800, 150)),
    # OpenInference
    ({"llm.token_count.prompt": 1000, "llm.token_count.prompt_details.cache_read": 700,
      "llm.token_count.prompt_details.cache_write": 10}, (1000, 700, 10)),
    # OpenLLMetry and Strands
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read_input_tokens": 600,
      "gen_ai.usage.cache_creation_input_tokens": 20}, (1000, 600, 20)),
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_write_input_tokens": 20}, (1000, None, 20)),
    # Pydantic AI's provider details
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.details.cache_read_tokens": 500,
      "gen_ai.usage.details.cache_write_tokens": 30}, (1000, 500, 30)),
    # the Vercel AI SDK 6 and 5
    ({"ai.usage.inputTokens": 1000, "ai.usage.inputTokenDetails.cacheReadTokens": 400,
      "ai.usage.inputTokenDetails.cacheWriteTokens": 40}, (1000, 400, 40)),
    ({"ai.usage.inputTokens": 1000, "ai.usage.cachedInputTokens": 300}, (1000, 300, None)),
    # Langfuse: keys starting "input" are in its input sum; other cache keys are not, and are added
    ({"langfuse.observation.usage_details": json.dumps({"input": 200, "input_cache_read": 800, "output": 5})},
     (1000, 800, None)),
    ({"langfuse.observation.usage_details": json.dumps({"input": 200, "cache_read_input_tokens": 800,
                                                        "cache_creation_input_tokens": 100, "output": 5})},
     (1100, 800, 100)),
    # MLflow's usage object
    ({"mlflow.spanType": '"CHAT_MODEL"', "mlflow.chat.tokenUsage": json.dumps(
        {"input_tokens": 1000, "output_tokens": 5, "cache_read_input_tokens": 900})}, (1000, 900, None)),
    # no cache figures at all: unknown, not zero
    ({"gen_ai.usage.input_tokens": 1000}, (1000, None, None)),
]  # fmt: skip


@pytest.mark.parametrize(("attrs", "expected"), CACHED)
def test_cached_input_tokens_in_every_dialect(attrs: dict[str, Any], expected: tuple[Any, ...]) -> None:
    call, issues = extract_llm_call(llm(attrs))
    assert (call.input_tokens, call.cache_read_tokens, call.cache_write_tokens) == expected
    assert issues == []


def test_a_bad_cache_count_is_an_issue_naming_the_attribute() -> None:
    call, issues = extract_llm_call(llm({"gen_ai.usage.input_tokens": 10, "gen_ai.usage.cache_read.input_tokens": -4}))
    assert call.cache_read_tokens is None and call.input_tokens == 10
    assert [i.field for i in issues] == ["gen_ai.usage.cache_read.input_tokens"]


ANTHROPIC_RESPONSE = {
    "id": "msg_1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}],
    "usage": {"input_tokens": 40, "output_tokens": 3},
    "context_management": {"applied_edits": [
        {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": 900},
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 12000},
    ]},
}  # fmt: skip


def test_anthropic_context_editing_in_the_response_body() -> None:
    """OpenInference records the response as output.value: the tool-result edit counts, thinking does not."""
    call, issues = extract_llm_call(
        llm({"openinference.span.kind": "LLM", "output.value": json.dumps(ANTHROPIC_RESPONSE)})
    )
    assert (call.cleared_tool_uses, call.cleared_input_tokens, call.compacted) == (4, 12000, False)
    assert issues == []


def test_context_editing_as_an_attribute_of_its_own() -> None:
    report = json.dumps(ANTHROPIC_RESPONSE["context_management"])
    call, _ = extract_llm_call(llm({"gen_ai.response.context_management": report}))
    assert (call.cleared_tool_uses, call.cleared_input_tokens) == (4, 12000)
    call, issues = extract_llm_call(llm({"anthropic.context_management": "{not json"}))
    assert call.cleared_tool_uses is None and [i.field for i in issues] == ["anthropic.context_management"]


def test_clearing_declared_by_the_agent_itself() -> None:
    call, _ = extract_llm_call(
        llm({"toolmeter.context.cleared_tool_uses": 3, "toolmeter.context.cleared_input_tokens": 800})
    )
    assert (call.cleared_tool_uses, call.cleared_input_tokens) == (3, 800)


def test_compaction_flag_and_compaction_parts() -> None:
    call, _ = extract_llm_call(llm({"gen_ai.conversation.compacted": True}))
    assert call.compacted and call.compaction_parts is None  # no input messages recorded
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {"role": "assistant", "parts": [{"type": "compaction", "content": "summary of turns 1-40"}]},
        {"role": "user", "parts": [{"type": "text", "content": "go on"}]},
    ]
    call, _ = extract_llm_call(llm({"gen_ai.input.messages": json.dumps(messages)}))
    assert (call.compacted, call.compaction_parts) == (False, 1)
    call, _ = extract_llm_call(llm({"gen_ai.input.messages": json.dumps(messages[:1])}))
    assert call.compaction_parts == 0
