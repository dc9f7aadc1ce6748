"""Conventions: which attributes and span names each instrumentation uses, and what a span is.

Every field a tool or model call carries has a key per instrumentation; the tables here
list them in precedence order: ``toolmeter.*`` first, then the OpenTelemetry GenAI
conventions, then OpenInference, Traceloop, Langfuse, MLflow, the Vercel AI SDK and
Pydantic AI (the key names are in :mod:`collector.dialects.attributes`).

:func:`classify` is the cheap filter the processor runs on the span-ending thread: a
handful of dictionary look-ups, no allocation of note. Frameworks wrap a tool span in
agent, chain or workflow spans whose output is often the very same result, and agent
spans carry the *total* token usage of the model calls under them; only the tool span is
a tool call and only the single provider call an LLM call, so :func:`classify` returns
None for agent, chain and workflow spans of every dialect.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from collector.dialects import attributes as A

TOOL = "tool"
LLM = "llm"

TOOL_NAME_KEYS = (
    A.TOOL_NAME,
    A.GEN_AI_TOOL_NAME,
    A.OI_TOOL_NAME,
    A.TRACELOOP_ENTITY_NAME,
    A.AI_TOOL_CALL_NAME,
)
RAW_KEYS = (
    A.RAW,
    A.GEN_AI_TOOL_CALL_RESULT,
    A.GEN_AI_OUTPUT,
    A.ADK_TOOL_RESPONSE,
    A.OI_OUTPUT_VALUE,
    A.TRACELOOP_ENTITY_OUTPUT,
    A.LANGFUSE_OBSERVATION_OUTPUT,
    A.MLFLOW_SPAN_OUTPUTS,
    A.AI_TOOL_CALL_RESULT,
    A.PYDANTIC_TOOL_RESPONSE,
)
RESULT_KEYS: tuple[str, ...] = RAW_KEYS
"""Every attribute that can carry a tool's raw result, in precedence order (for sizing queues)."""
ARGS_KEYS = (
    A.GEN_AI_TOOL_CALL_ARGUMENTS,
    A.ADK_TOOL_CALL_ARGS,
    A.OI_INPUT_VALUE,
    A.TRACELOOP_ENTITY_INPUT,
    A.LANGFUSE_OBSERVATION_INPUT,
    A.MLFLOW_SPAN_INPUTS,
    A.AI_TOOL_CALL_ARGS,
    A.PYDANTIC_TOOL_ARGUMENTS,
)
CALL_ID_KEYS = (A.TOOL_CALL_ID, A.GEN_AI_TOOL_CALL_ID, A.AI_TOOL_CALL_ID, A.OI_TOOL_ID, A.OI_TOOL_CALL_ID)
MODEL_KEYS = (
    A.GEN_AI_RESPONSE_MODEL,
    A.GEN_AI_REQUEST_MODEL,
    A.OI_LLM_MODEL_NAME,
    A.LANGFUSE_OBSERVATION_MODEL_NAME,
    A.MLFLOW_LLM_MODEL,
    A.AI_RESPONSE_MODEL,
    A.AI_MODEL_ID,
)
INPUT_TOKEN_KEYS = (
    A.GEN_AI_USAGE_INPUT_TOKENS,
    A.GEN_AI_USAGE_PROMPT_TOKENS,
    A.OI_LLM_TOKEN_COUNT_PROMPT,
    A.LLM_USAGE_PROMPT_TOKENS,
    A.AI_USAGE_INPUT_TOKENS,
    A.AI_USAGE_PROMPT_TOKENS,
)
OUTPUT_TOKEN_KEYS = (
    A.GEN_AI_USAGE_OUTPUT_TOKENS,
    A.GEN_AI_USAGE_COMPLETION_TOKENS,
    A.OI_LLM_TOKEN_COUNT_COMPLETION,
    A.LLM_USAGE_COMPLETION_TOKENS,
    A.AI_USAGE_OUTPUT_TOKENS,
    A.AI_USAGE_COMPLETION_TOKENS,
)
CACHE_READ_KEYS = (
    A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    A.OI_LLM_TOKEN_COUNT_CACHE_READ,
    A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_LEGACY,
    A.GEN_AI_USAGE_DETAILS_CACHE_READ_TOKENS,
    A.AI_USAGE_CACHE_READ_TOKENS,
    A.AI_USAGE_CACHED_INPUT_TOKENS,
)
CACHE_WRITE_KEYS = (
    A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    A.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    A.OI_LLM_TOKEN_COUNT_CACHE_WRITE,
    A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_LEGACY,
    A.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS_LEGACY,
    A.GEN_AI_USAGE_DETAILS_CACHE_WRITE_TOKENS,
    A.AI_USAGE_CACHE_WRITE_TOKENS,
)
STRINGS_AS_GIVEN_KEYS = frozenset({A.RAW, A.LANGFUSE_OBSERVATION_OUTPUT, A.PYDANTIC_TOOL_RESPONSE})
"""Result keys whose owners record a string result as it is (never JSON-encoded)."""
JSON_ENCODED_KEYS = frozenset({A.MLFLOW_SPAN_OUTPUTS, A.AI_TOOL_CALL_RESULT, A.MLFLOW_LLM_MODEL})
"""Keys whose value is the JSON encoding of the real value (see :func:`json_encoded_text`)."""
_EXECUTE_TOOL_PREFIX = "execute_tool "
_INVOKE_AGENT_PREFIX = "invoke_agent"
_LLAMAINDEX_PREPARE = "._prepare_chat_with_tools"
_LIFECYCLE_EVENTS = frozenset({"start", "success", "error", "retry", "finish"})
"""Names of the TOOL-kind spans BeeAI's OpenInference instrumentation adds under a tool span for
each emitter event (no ``tool.name``, no duration): events of the call, not calls."""
_TOOL_SPAN_NAMES = (
    re.compile(r"^execute_tool (?P<name>.+)$"),
    re.compile(r"^running tool:? (?P<name>.+)$"),
    re.compile(r"^tool[.:] ?(?P<name>[^\s].*)$"),
    re.compile(r"^(?P<name>[^\s]+)\.tool$"),
    re.compile(r"^(?P<name>mcp__[^\s]+__[^\s]+)$"),
)
"""Span names that carry the tool's name (when no attribute does)."""


def name_from_span_name(name: str) -> str | None:
    """The tool name a span name spells (``execute_tool X``, ``running tool: X``, ``tool.X``, ``X.tool``,
    ``mcp__server__tool``), or None."""
    for pattern in _TOOL_SPAN_NAMES:
        m = pattern.match(name)
        if m:
            return m.group("name").strip() or None
    return None


# dialect-specific kinds: value -> TOOL / LLM; any other value (agent, chain, ...) -> None
_LANGFUSE_KINDS = {A.LANGFUSE_TOOL: TOOL, A.LANGFUSE_GENERATION: LLM}
_MLFLOW_KINDS = {**dict.fromkeys(A.MLFLOW_TOOL_TYPES, TOOL), **dict.fromkeys(A.MLFLOW_LLM_TYPES, LLM)}
_VERCEL_KINDS = {A.AI_TOOL_CALL: TOOL, **dict.fromkeys(A.AI_LLM_OPERATIONS, LLM)}


def classify(name: str, attrs: Mapping[str, Any] | None) -> str | None:
    """Return ``"tool"``, ``"llm"`` or None for a span (cheap: runs in ``on_end``).

    A few dictionary look-ups in precedence order; agent, chain and workflow spans of
    every dialect are None, so a result repeated on a wrapping span is not counted twice.
    """
    if not attrs:
        return TOOL if name.startswith(_EXECUTE_TOOL_PREFIX) else None
    if attrs.get(A.GEN_AI_TOOL_NAME) == A.ADK_MERGED_TOOLS or name.endswith(_LLAMAINDEX_PREPARE):
        return None  # ADK's span around parallel calls (each has its own); LlamaIndex's request building
    op = attrs.get(A.GEN_AI_OPERATION_NAME)
    if op is not None:
        if op == A.EXECUTE_TOOL or A.TOOL_NAME in attrs:
            return TOOL
        return LLM if isinstance(op, str) and op in A.LLM_OPERATIONS else None
    if A.TOOL_NAME in attrs:
        return TOOL
    if A.GEN_AI_TOOL_NAME in attrs and (A.GEN_AI_TOOL_CALL_ID in attrs or name.startswith("tool.")):
        return TOOL  # "tool.X" spans with the GenAI keys but no operation name
    if name == A.CC_TOOL_SPAN:
        return TOOL
    oi = attrs.get(A.OPENINFERENCE_SPAN_KIND)
    if oi is not None:
        oi = str(oi).upper()
        if oi == "TOOL" and name in _LIFECYCLE_EVENTS and A.OI_TOOL_NAME not in attrs:
            return None  # BeeAI's zero-length child spans, one per event of the call (the parent is the call)
        return TOOL if oi == "TOOL" else LLM if oi == "LLM" else None
    tl = attrs.get(A.TRACELOOP_SPAN_KIND)
    if tl is not None:
        return TOOL if tl == "tool" else None
    kind = attrs.get(A.LANGFUSE_OBSERVATION_TYPE)
    if kind is not None:
        return _LANGFUSE_KINDS.get(kind) if isinstance(kind, str) else None
    kind = attrs.get(A.MLFLOW_SPAN_TYPE)
    if kind is not None:
        return _MLFLOW_KINDS.get(kind) if isinstance(kind, str) else None
    kind = attrs.get(A.AI_OPERATION_ID)
    if kind is not None:
        return _VERCEL_KINDS.get(kind) if isinstance(kind, str) else None
    if name.startswith(_EXECUTE_TOOL_PREFIX) or name == A.PYDANTIC_RUNNING_TOOL:
        return TOOL
    if A.LLM_REQUEST_TYPE in attrs:
        return LLM
    if A.GEN_AI_USAGE_INPUT_TOKENS in attrs:
        # an agent run (Pydantic AI's "agent run" / "invoke_agent x") carries its total usage
        if (
            name == A.PYDANTIC_AGENT_RUN
            or name.startswith(_INVOKE_AGENT_PREFIX)
            or A.GEN_AI_AGENT_NAME in attrs
            or A.PYDANTIC_AGENT_NAME in attrs
        ):
            return None
        return LLM
    return None


def dialect_of(name: str, attrs: Mapping[str, Any]) -> str:
    """The instrumentation whose conventions a span follows (``gen_ai``, ``openinference``, ...)."""
    if name == A.CC_TOOL_SPAN:  # Claude Code's own spans: one call with its tool_result event
        return "claude_code"
    if attrs.get(A.GEN_AI_OPERATION_NAME) is not None:
        return "gen_ai"
    if A.OPENINFERENCE_SPAN_KIND in attrs:
        return "openinference"
    if A.TRACELOOP_SPAN_KIND in attrs or A.LLM_REQUEST_TYPE in attrs:
        return "traceloop"
    if A.LANGFUSE_OBSERVATION_TYPE in attrs:
        return "langfuse"
    if A.MLFLOW_SPAN_TYPE in attrs:
        return "mlflow"
    if A.AI_OPERATION_ID in attrs:
        return "vercel_ai"
    msg = attrs.get(A.LOGFIRE_MSG)
    if (
        name == A.PYDANTIC_RUNNING_TOOL
        or A.PYDANTIC_TOOL_RESPONSE in attrs
        or A.PYDANTIC_TOOL_ARGUMENTS in attrs
        or (isinstance(msg, str) and msg.startswith(A.PYDANTIC_RUNNING_TOOL))
    ):
        return "pydantic_ai"
    if name.startswith(_EXECUTE_TOOL_PREFIX) or A.GEN_AI_USAGE_INPUT_TOKENS in attrs:
        return "gen_ai"
    return "toolmeter"


def first_present(attrs: Mapping[str, Any], keys: tuple[str, ...], allow_empty: bool = False) -> tuple[str | None, Any]:
    """The first of ``keys`` (in precedence order) that ``attrs`` holds, and its value; else (None, None)."""
    for key in keys:
        value = attrs.get(key)
        if value is not None and (allow_empty or value != ""):
            return key, value
    return None, None
