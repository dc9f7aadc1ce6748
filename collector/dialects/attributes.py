"""The span attributes toolmeter reads and writes: the contract, in one place.

toolmeter reads tool calls from seven public dialects and from its own namespace,
which wins wherever it is present (precedence, for every field: toolmeter, then the
GenAI conventions, then OpenInference, Traceloop, Langfuse, MLflow, the Vercel AI SDK
and Pydantic AI):

* OpenTelemetry GenAI semantic conventions: a span named ``execute_tool {name}``
  with ``gen_ai.operation.name = "execute_tool"``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``.
* OpenInference: ``openinference.span.kind = "TOOL"``, ``tool.name``,
  ``input.value``, ``output.value``.
* Traceloop / OpenLLMetry: ``traceloop.span.kind = "tool"``,
  ``traceloop.entity.name``, ``traceloop.entity.input``, ``traceloop.entity.output``.
* Langfuse (SDK v3+, OpenTelemetry based): ``langfuse.observation.type = "tool"``, the
  span name as the tool name, ``langfuse.observation.input`` / ``.output``.
* MLflow tracing: ``mlflow.spanType = TOOL``, ``mlflow.spanInputs`` /
  ``mlflow.spanOutputs``. MLflow JSON-encodes *every* attribute value (the span type
  arrives as ``"\"TOOL\""``); see :data:`MLFLOW_SPAN_OUTPUTS` for how results are decoded.
* Vercel AI SDK telemetry: ``ai.toolCall`` spans (``ai.operationId = "ai.toolCall"``) with
  ``ai.toolCall.name``, ``ai.toolCall.id``, ``ai.toolCall.args``, ``ai.toolCall.result``.
* Pydantic AI / Logfire: ``running tool`` (instrumentation version 1-2) or
  ``execute_tool {name}`` spans with ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
  ``tool_arguments`` / ``tool_response`` (or the GenAI keys), often without
  ``gen_ai.operation.name``.
* toolmeter: the ``toolmeter.*`` keys below.

Claude Code reports tool calls as OTLP *log events*, not spans: see
:mod:`collector.dialects.claude_code` and the ``CC_*`` keys below.

Only the tool span is a tool call: the agent, chain and workflow spans that frameworks
wrap around it (often carrying the same result as their output) are never read as tool
calls, and an agent span's token totals are never read as an LLM call.

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

RECORD_ERROR: Final = "toolmeter.record.error"
"""Why ``measured_tool`` could not record a result (the tool's own result is returned unchanged)."""

RELAY_CHANGED: Final = "toolmeter.relay.changed"
"""Set by forwarding mode's helper on a span it had to change to send as OTLP: which attribute,
and how (a lone surrogate sent as U+FFFD, an integer beyond 64 bits as its decimal text)."""

RAW: Final = "toolmeter.raw"
"""The raw result itself (string); optional, read before the dialects' result keys."""

HANDLE: Final = "toolmeter.handle"
"""The handle the full result is kept behind (``collector.adapter``), for ``read_result``."""

ITEMS_TOTAL: Final = "toolmeter.items.total"
"""Items in a list result (int)."""

ITEMS_SHOWN: Final = "toolmeter.items.shown"
"""Items of a list result the view shows (int)."""

RETAINED_ITEMS: Final = "toolmeter.retained.items"
"""Index ranges (in the tool's order) of the list items the view shows, as ``"0-37,40-41"``
(end exclusive)."""

# --- OpenTelemetry GenAI semantic conventions -----------------------------------

MCP_METHOD_NAME: Final = "mcp.method.name"
"""The MCP SDK's spans: ``tools/call`` on the server's span of a tool call (it carries no result)."""
MCP_TOOLS_CALL: Final = "tools/call"

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_OUTPUT: Final = "gen_ai.output"
"""A tool's (or agent's) output where ``gen_ai.output.type`` says what it is (other projects'
published traces use it on tool spans)."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
"""Deprecated GenAI spelling of the input tokens (older OpenLLMetry and Vercel AI SDK 3)."""
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"
"""Deprecated GenAI spelling of the output tokens."""
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
"""Input tokens served from the provider's prompt cache; part of ``gen_ai.usage.input_tokens``."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
"""Input tokens written to the provider's prompt cache this turn; part of the input tokens."""
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
"""The Anthropic SDK's own tracing (``anthropic._tracing``) spells the cache writes so."""
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS_LEGACY: Final = "gen_ai.usage.cache_read_input_tokens"
"""OpenLLMetry's (and Strands') spelling of the cache reads."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS_LEGACY: Final = "gen_ai.usage.cache_creation_input_tokens"
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS_LEGACY: Final = "gen_ai.usage.cache_write_input_tokens"
GEN_AI_USAGE_DETAILS_CACHE_READ_TOKENS: Final = "gen_ai.usage.details.cache_read_tokens"
"""Pydantic AI's provider usage details."""
GEN_AI_USAGE_DETAILS_CACHE_WRITE_TOKENS: Final = "gen_ai.usage.details.cache_write_tokens"
GEN_AI_CONVERSATION_COMPACTED: Final = "gen_ai.conversation.compacted"
"""``true`` on a model call whose conversation was compacted (summarised) before it."""
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
EXECUTE_TOOL: Final = "execute_tool"
INVOKE_AGENT: Final = "invoke_agent"
"""``gen_ai.operation.name`` (and span-name prefix) of an agent invocation span: never a tool or model call."""
LLM_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content", "call_llm"})
"""``gen_ai.operation.name`` values that are model calls."""

# --- OpenInference ------------------------------------------------------------------

OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
OI_TOOL_NAME: Final = "tool.name"
OI_TOOL_ID: Final = "tool.id"
"""OpenInference's tool call id on a TOOL span (``ToolCallAttributes``)."""
OI_TOOL_CALL_ID: Final = "tool_call.id"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"
OI_OUTPUT_MIME_TYPE: Final = "output.mime_type"
"""``text/plain`` (the value is the text) or ``application/json`` (the value is JSON)."""
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_LLM_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
OI_LLM_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
OI_LLM_TOKEN_COUNT_CACHE_READ: Final = "llm.token_count.prompt_details.cache_read"
"""Part of ``llm.token_count.prompt``, like the write below."""
OI_LLM_TOKEN_COUNT_CACHE_WRITE: Final = "llm.token_count.prompt_details.cache_write"

# --- Traceloop / OpenLLMetry -------------------------------------------------------

TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
LLM_REQUEST_TYPE: Final = "llm.request.type"
"""Traceloop's marker on model-call spans (``chat``, ``completion``)."""
LLM_USAGE_PROMPT_TOKENS: Final = "llm.usage.prompt_tokens"
LLM_USAGE_COMPLETION_TOKENS: Final = "llm.usage.completion_tokens"

# --- Langfuse (langfuse-python ``langfuse/_client/attributes.py``) -------------------

LANGFUSE_OBSERVATION_TYPE: Final = "langfuse.observation.type"
"""``span``, ``generation``, ``agent``, ``tool``, ``chain``, ``retriever``, ``evaluator``,
``embedding``, ``guardrail`` or ``event``; ``tool`` is a tool call, ``generation`` a model call."""
LANGFUSE_OBSERVATION_INPUT: Final = "langfuse.observation.input"
"""The observation's input: a string as given, anything else JSON-encoded by the SDK."""
LANGFUSE_OBSERVATION_OUTPUT: Final = "langfuse.observation.output"
"""The observation's output, serialised like the input (strings are not JSON-encoded)."""
LANGFUSE_OBSERVATION_MODEL_NAME: Final = "langfuse.observation.model.name"
LANGFUSE_OBSERVATION_USAGE_DETAILS: Final = "langfuse.observation.usage_details"
"""A JSON object of token counts, e.g. ``{"input": 12, "output": 3, "total": 15}``. As in
Langfuse, keys starting with ``input`` add up to the input tokens (``input_cache_read``
included) and keys starting with ``output`` to the output tokens."""
LANGFUSE_TOOL: Final = "tool"
LANGFUSE_GENERATION: Final = "generation"

# --- MLflow tracing (mlflow ``mlflow/tracing/constant.py``: ``SpanAttributeKey``) -----

MLFLOW_SPAN_TYPE: Final = "mlflow.spanType"
"""JSON-encoded span type: ``"\"TOOL\""``, ``"\"LLM\""``, ``"\"CHAT_MODEL\""``, ``"\"AGENT\""``, ...
(MLflow's ``dump_span_attribute_value`` runs ``json.dumps`` on every attribute)."""
MLFLOW_SPAN_INPUTS: Final = "mlflow.spanInputs"
"""JSON-encoded inputs of the traced function (a JSON object of its arguments)."""
MLFLOW_SPAN_OUTPUTS: Final = "mlflow.spanOutputs"
"""JSON-encoded output of the traced function. toolmeter decodes it before measuring: a
JSON *string* is measured as the text it encodes (``"\"hello\""`` is the 5 bytes
``hello``, what the model was given), any other JSON value (object, array, number,
``null``) as the JSON text itself. A value that is not valid JSON (cut by an attribute
length limit) is measured as given, with a warning."""
MLFLOW_CHAT_TOKEN_USAGE: Final = "mlflow.chat.tokenUsage"
"""JSON object ``{"input_tokens": .., "output_tokens": .., "total_tokens": ..}`` on model spans."""
MLFLOW_LLM_MODEL: Final = "mlflow.llm.model"
"""JSON-encoded model name (MLflow 3.x)."""
MLFLOW_TOOL_TYPES: Final = frozenset({"TOOL", '"TOOL"'})
"""``mlflow.spanType`` values that are tool calls (plain, and JSON-encoded as MLflow writes them)."""
MLFLOW_LLM_TYPES: Final = frozenset({"LLM", "CHAT_MODEL", '"LLM"', '"CHAT_MODEL"'})
"""``mlflow.spanType`` values that are model calls."""

# --- Vercel AI SDK telemetry (ai-sdk.dev/docs/ai-sdk-core/telemetry) -----------------

AI_OPERATION_ID: Final = "ai.operationId"
"""The AI SDK operation of the span: ``ai.toolCall``, ``ai.generateText.doGenerate``, ..."""
AI_TOOL_CALL: Final = "ai.toolCall"
AI_TOOL_CALL_NAME: Final = "ai.toolCall.name"
AI_TOOL_CALL_ID: Final = "ai.toolCall.id"
AI_TOOL_CALL_ARGS: Final = "ai.toolCall.args"
AI_TOOL_CALL_RESULT: Final = "ai.toolCall.result"
"""``JSON.stringify`` of the tool's output, so a string output arrives JSON-encoded; it is
decoded like :data:`MLFLOW_SPAN_OUTPUTS`."""
AI_MODEL_ID: Final = "ai.model.id"
AI_RESPONSE_MODEL: Final = "ai.response.model"
AI_USAGE_INPUT_TOKENS: Final = "ai.usage.inputTokens"
"""AI SDK 5+."""
AI_USAGE_OUTPUT_TOKENS: Final = "ai.usage.outputTokens"
AI_USAGE_PROMPT_TOKENS: Final = "ai.usage.promptTokens"
"""AI SDK 3-4."""
AI_USAGE_COMPLETION_TOKENS: Final = "ai.usage.completionTokens"
AI_USAGE_CACHED_INPUT_TOKENS: Final = "ai.usage.cachedInputTokens"
"""AI SDK 5's cache reads."""
AI_USAGE_CACHE_READ_TOKENS: Final = "ai.usage.inputTokenDetails.cacheReadTokens"
"""AI SDK 6's cache reads and writes (``inputTokens`` is their total with the uncached ones)."""
AI_USAGE_CACHE_WRITE_TOKENS: Final = "ai.usage.inputTokenDetails.cacheWriteTokens"
AI_LLM_OPERATIONS: Final = frozenset(
    {
        "ai.generateText.doGenerate",
        "ai.streamText.doStream",
        "ai.generateObject.doGenerate",
        "ai.streamObject.doStream",
    }
)
"""AI SDK operations that are one provider call. The enclosing ``ai.generateText`` /
``ai.streamText`` spans carry the *total* usage of all their steps and are not model calls."""

# --- Pydantic AI / Logfire (pydantic_ai ``_instrumentation.py``, ``_tool_manager.py``) -

PYDANTIC_RUNNING_TOOL: Final = "running tool"
"""Span name of a tool call in Pydantic AI instrumentation versions 1 and 2."""
PYDANTIC_TOOL_ARGUMENTS: Final = "tool_arguments"
PYDANTIC_TOOL_RESPONSE: Final = "tool_response"
"""The tool's result: a string result as returned, anything else as JSON."""
PYDANTIC_AGENT_RUN: Final = "agent run"
"""Span name of an agent run (versions 1-2); it carries the run's total ``gen_ai.usage.*``."""
PYDANTIC_AGENT_NAME: Final = "agent_name"
LOGFIRE_MSG: Final = "logfire.msg"
"""``running tool: {name}`` on Pydantic AI tool spans of every version."""

# --- Claude Code log events (code.claude.com/docs/en/monitoring-usage) ---------------

CC_TOOL_RESULT_EVENT: Final = "claude_code.tool_result"
CC_API_REQUEST_EVENT: Final = "claude_code.api_request"
CC_EVENT_NAME: Final = "event.name"
"""Carries the event name without its prefix (``tool_result``, ``api_request``)."""
CC_EVENT_TIMESTAMP: Final = "event.timestamp"
"""ISO 8601 time of the event, used when the log record has no time."""
CC_EVENT_SEQUENCE: Final = "event.sequence"
CC_SESSION_ID: Final = "session.id"
CC_PROMPT_ID: Final = "prompt.id"
CC_TOOL_NAME: Final = "tool_name"
CC_TOOL_NAME_LEGACY: Final = "name"
"""The tool name's key in Claude Code's first releases (2025)."""
CC_TOOL_USE_ID: Final = "tool_use_id"
CC_SUCCESS: Final = "success"
"""``"true"`` or ``"false"``."""
CC_DURATION_MS: Final = "duration_ms"
CC_ERROR: Final = "error"
CC_ERROR_TYPE: Final = "error_type"
CC_TOOL_RESULT_SIZE_BYTES: Final = "tool_result_size_bytes"
"""Size of the tool result in bytes (a string such as ``"1204"``)."""
CC_TOOL_INPUT: Final = "tool_input"
"""JSON tool arguments (with ``OTEL_LOG_TOOL_DETAILS=1``; values over 512 characters cut)."""
CC_TOOL_PARAMETERS: Final = "tool_parameters"
"""JSON of tool-specific parameters (``bash_command``, ``mcp_server_name``, ...)."""
CC_MODEL: Final = "model"
CC_INPUT_TOKENS: Final = "input_tokens"
"""Uncached input tokens (Anthropic API usage); the cache counts below are separate."""
CC_OUTPUT_TOKENS: Final = "output_tokens"
CC_CACHE_READ_TOKENS: Final = "cache_read_tokens"
CC_CACHE_CREATION_TOKENS: Final = "cache_creation_tokens"
CC_REQUEST_ID: Final = "request_id"
CC_CLIENT_REQUEST_ID: Final = "client_request_id"

# --- Google ADK (google/adk ``telemetry``) --------------------------------------------
ADK_TOOL_RESPONSE: Final = "gcp.vertex.agent.tool_response"
"""JSON of the tool's function response; ADK wraps a non-dict return as ``{"result": ...}``."""
ADK_TOOL_CALL_ARGS: Final = "gcp.vertex.agent.tool_call_args"
ADK_EVENT_ID: Final = "gcp.vertex.agent.event_id"
"""On every ADK span: marks ADK's conventions (a string return arrives as ``{"result": ...}``)."""
ADK_MERGED_TOOLS: Final = "(merged tools)"
"""``gen_ai.tool.name`` of ADK's span around parallel tool calls: not a call of its own."""
ADK_LLM_REQUEST: Final = "gcp.vertex.agent.llm_request"
"""JSON of the model request (``contents`` with ``function_response`` parts: the view)."""

# --- Claude Code tracing spans -------------------------------------------------------
CC_TOOL_SPAN: Final = "claude_code.tool"
CC_RESULT_TOKENS: Final = "result_tokens"
"""Claude Code's own estimate of the result's tokens: stored as reported, marked approximate."""

# --- Context editing and compaction ------------------------------------------------
TOOLMETER_CLEARED_TOOL_USES: Final = "toolmeter.context.cleared_tool_uses"
"""On a model call: how many of the oldest tool results were left out of its input (set by an
agent that clears them itself; Anthropic's context editing reports it in the response)."""
TOOLMETER_CLEARED_INPUT_TOKENS: Final = "toolmeter.context.cleared_input_tokens"
TOOLMETER_COMPACTED: Final = "toolmeter.context.compacted"
"""On a model call: the conversation before it was replaced by a summary."""
CONTEXT_MANAGEMENT: Final = "context_management"
"""The key of Anthropic's context-editing report in a response body (``applied_edits``)."""

# --- Resource ----------------------------------------------------------------------

SERVICE_NAME: Final = "service.name"

SHAPES: Final = ("list", "record", "document", "diagnostic")
