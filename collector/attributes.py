"""The span attributes toolmeter reads and writes: the contract, in one place.

toolmeter reads tool calls from three public dialects and from its own namespace,
which wins wherever it is present:

* OpenTelemetry GenAI semantic conventions: a span named ``execute_tool {name}``
  with ``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``.
* OpenInference: ``openinference.span.kind = "TOOL"``, ``tool.name``,
  ``input.value``, ``output.value``.
* Traceloop / OpenLLMetry: ``traceloop.span.kind = "tool"``,
  ``traceloop.entity.name``, ``traceloop.entity.input``, ``traceloop.entity.output``.
* toolmeter: the ``toolmeter.*`` keys below.

Numbers that must survive other exporters' attribute limits travel as small
attributes under ``toolmeter.*``: a 1 MB result cut to 128 characters by
``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` still reports its true size through
``toolmeter.raw.bytes``.

LLM calls are recorded lightly (time, model, token usage) so that the window cost
of each tool result can be computed: view tokens x later LLM calls in the trace.
"""

from __future__ import annotations

from typing import Final

# --- toolmeter's own namespace -------------------------------------------------

TOOL_NAME: Final = "toolmeter.tool.name"
"""Tool name; overrides every dialect's name attribute."""

TOOL_CALL_ID: Final = "toolmeter.tool.call.id"
"""The id the model gave the call (joins the result to its call)."""

RAW_BYTES: Final = "toolmeter.raw.bytes"
"""UTF-8 bytes of the full result the tool produced (int)."""

RAW_TOKENS: Final = "toolmeter.raw.tokens"
"""Tokens of the full result, when counted upstream (int). toolmeter recounts when it has the payload."""

VIEW_BYTES: Final = "toolmeter.view.bytes"
"""UTF-8 bytes of what the model was shown (int)."""

VIEW_TOKENS: Final = "toolmeter.view.tokens"
"""Tokens of what the model was shown, when counted upstream (int)."""

BUDGET_TOKENS: Final = "toolmeter.budget.tokens"
"""The tool's token budget: the most it may put in the window (int)."""

TRUNCATED: Final = "toolmeter.truncated"
"""Whether the tool (or its adapter) cut the result before the model saw it (bool)."""

RETAINED: Final = "toolmeter.retained"
"""Byte ranges of the raw result that the view keeps, as ``"start-end,start-end"``
(end exclusive), e.g. ``"0-4096,1190000-1195216"``."""

SHAPE: Final = "toolmeter.shape"
"""One of ``list``, ``record``, ``document``, ``diagnostic``."""

VIEW: Final = "toolmeter.view"
"""The model-facing text itself, when it differs from the raw result (string).
Optional: in-process, :func:`collector.record_tool_result` hands payloads to the
processor without putting them on the span."""

RAW: Final = "toolmeter.raw"
"""The raw result itself (string); optional, read before the dialects' result keys."""

# --- OpenTelemetry GenAI semantic conventions -----------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
EXECUTE_TOOL: Final = "execute_tool"
LLM_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
"""``gen_ai.operation.name`` values that are model calls."""

# --- OpenInference ------------------------------------------------------------------

OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OI_TOOL_NAME: Final = "tool.name"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
OI_LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"

# --- Traceloop / OpenLLMetry -------------------------------------------------------

TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
LLM_REQUEST_TYPE: Final = "llm.request.type"
"""Traceloop's marker on model-call spans (``chat``, ``completion``)."""
LLM_USAGE_PROMPT_TOKENS: Final = "llm.usage.prompt_tokens"
LLM_USAGE_COMPLETION_TOKENS: Final = "llm.usage.completion_tokens"

# --- Resource ----------------------------------------------------------------------

SERVICE_NAME: Final = "service.name"

SHAPES: Final = ("list", "record", "document", "diagnostic")
