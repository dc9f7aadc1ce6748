"""Recognise tool calls and LLM calls in spans of any supported dialect.

:func:`classify` is the cheap filter the processor runs on the span-ending thread: a
handful of dictionary look-ups, no allocation of note. :func:`extract_tool_call` and
:func:`extract_llm_call` run in the background and turn a :class:`SpanData` into the
plain records that :mod:`collector.measure.measurement` measures.

Precedence, for every field: ``toolmeter.*`` first, then the OpenTelemetry GenAI
conventions, then OpenInference, Traceloop, Langfuse, MLflow, the Vercel AI SDK and
Pydantic AI (the keys are listed in :mod:`collector.dialects.attributes`).

Double counting: frameworks wrap a tool span in agent, chain or workflow spans whose
output is often the very same result, and agent spans carry the *total* token usage of
the model calls under them. Only the tool span is a tool call, and only the single
provider call is an LLM call: :func:`classify` returns None for agent, chain and
workflow spans of every dialect.

Values that a dialect JSON-encodes (MLflow's ``mlflow.spanOutputs``, the AI SDK's
``ai.toolCall.result``) are decoded before measuring: a JSON string is measured as the
text it encodes, any other JSON value as its JSON text (see :func:`json_encoded_text`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from collector.dialects import attributes as A
from collector.dialects.wrappers import unwrap
from collector.measure.measurement import MAX_INT64, parse_ranges, without_surrogates
from collector.model import Issue, LlmCall, SpanData, ToolCall

TOOL = "tool"
LLM = "llm"

_TOOL_NAME_KEYS = (
    A.TOOL_NAME,
    A.GEN_AI_TOOL_NAME,
    A.OI_TOOL_NAME,
    A.TRACELOOP_ENTITY_NAME,
    A.AI_TOOL_CALL_NAME,
)
_RAW_KEYS = (
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
RESULT_KEYS: tuple[str, ...] = _RAW_KEYS
"""Every attribute that can carry a tool's raw result, in precedence order (for sizing queues)."""
_ARGS_KEYS = (
    A.GEN_AI_TOOL_CALL_ARGUMENTS,
    A.ADK_TOOL_CALL_ARGS,
    A.OI_INPUT_VALUE,
    A.TRACELOOP_ENTITY_INPUT,
    A.LANGFUSE_OBSERVATION_INPUT,
    A.MLFLOW_SPAN_INPUTS,
    A.AI_TOOL_CALL_ARGS,
    A.PYDANTIC_TOOL_ARGUMENTS,
)
_CALL_ID_KEYS = (A.TOOL_CALL_ID, A.GEN_AI_TOOL_CALL_ID, A.AI_TOOL_CALL_ID, A.OI_TOOL_ID, A.OI_TOOL_CALL_ID)
_MODEL_KEYS = (
    A.GEN_AI_RESPONSE_MODEL,
    A.GEN_AI_REQUEST_MODEL,
    A.OI_LLM_MODEL_NAME,
    A.LANGFUSE_OBSERVATION_MODEL_NAME,
    A.MLFLOW_LLM_MODEL,
    A.AI_RESPONSE_MODEL,
    A.AI_MODEL_ID,
)
_INPUT_TOKEN_KEYS = (
    A.GEN_AI_USAGE_INPUT_TOKENS,
    A.GEN_AI_USAGE_PROMPT_TOKENS,
    A.OI_LLM_TOKEN_COUNT_PROMPT,
    A.LLM_USAGE_PROMPT_TOKENS,
    A.AI_USAGE_INPUT_TOKENS,
    A.AI_USAGE_PROMPT_TOKENS,
)
_OUTPUT_TOKEN_KEYS = (
    A.GEN_AI_USAGE_OUTPUT_TOKENS,
    A.GEN_AI_USAGE_COMPLETION_TOKENS,
    A.OI_LLM_TOKEN_COUNT_COMPLETION,
    A.LLM_USAGE_COMPLETION_TOKENS,
    A.AI_USAGE_OUTPUT_TOKENS,
    A.AI_USAGE_COMPLETION_TOKENS,
)
_STRINGS_AS_GIVEN_KEYS = frozenset({A.RAW, A.LANGFUSE_OBSERVATION_OUTPUT, A.PYDANTIC_TOOL_RESPONSE})
"""Result keys whose owners record a string result as it is (never JSON-encoded)."""
_JSON_ENCODED_KEYS = frozenset({A.MLFLOW_SPAN_OUTPUTS, A.AI_TOOL_CALL_RESULT, A.MLFLOW_LLM_MODEL})
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


def _dialect(name: str, attrs: Mapping[str, Any]) -> str:
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


def _result_event(events: tuple[tuple[str, Mapping[str, Any], Any], ...]) -> tuple[str | None, Any]:
    """A tool span's result carried in an event: ``gen_ai.choice`` (``message``, as Strands writes it
    under the conventions before 1.37) or the output messages of an operation-details event."""
    for name, attrs, body in events:
        if name == "gen_ai.choice":
            value = attrs.get("message", body.get("message") if isinstance(body, Mapping) else body)
            if value is not None:
                return "gen_ai.choice", value
        elif name == "gen_ai.client.inference.operation.details" and attrs.get("gen_ai.output.messages") is not None:
            from collector.dialects.messages import new_conversation, read_output

            conv = new_conversation()
            read_output(conv, attrs["gen_ai.output.messages"])
            if conv.responses:
                return "gen_ai.output.messages", conv.responses[0][2]
    return None, None


def _first(attrs: Mapping[str, Any], keys: tuple[str, ...], allow_empty: bool = False) -> tuple[str | None, Any]:
    for key in keys:
        value = attrs.get(key)
        if value is not None and (allow_empty or value != ""):
            return key, value
    return None, None


def _as_payload(value: Any) -> str | bytes:
    if isinstance(value, (str, bytes)):
        return value
    # a list attribute or a structured value: measure its JSON text
    return json.dumps(value, ensure_ascii=False, default=str)


def json_encoded_text(value: Any) -> tuple[str | bytes, bool]:
    """Decode a value its dialect JSON-encoded: ``(text to measure, was valid JSON)``.

    MLflow runs ``json.dumps`` on every attribute and the AI SDK ``JSON.stringify`` on
    tool results, so a tool that returned the string ``hello`` arrives as ``"hello"``
    (with the quotes). A JSON string is decoded to its text (what the model was given);
    any other JSON value (object, array, number, ``null``) is measured as the JSON text
    itself. A value that is not JSON (e.g. cut by an attribute length limit) is returned
    as given, with ``False``.
    """
    if not isinstance(value, str):
        return _as_payload(value), True
    try:
        decoded = json.loads(value)
    except ValueError:
        return value, False
    except RecursionError:  # valid, but nested deeper than the parser goes: not a JSON string
        return value, True
    return (decoded if isinstance(decoded, str) else value), True


def _decoded(key: str | None, value: Any) -> Any:
    """A string attribute's real value when its dialect JSON-encodes it (model names)."""
    if key in _JSON_ENCODED_KEYS and isinstance(value, str):
        text, _ = json_encoded_text(value)
        return text
    return value


class _Reader:
    """Collects typed values and the issues met while reading one span."""

    def __init__(self, span: SpanData) -> None:
        self.span = span
        self.issues: list[Issue] = []

    def issue(self, field_name: str | None, message: str) -> None:
        s = self.span
        self.issues.append(Issue(s.source, message, s.trace_id, s.span_id, field_name))

    def int_attr(self, key: str) -> int | None:
        value = self.span.attributes.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.issue(key, f"must be a non-negative integer, got {value!r}; ignored")
            return None
        try:
            number = int(value)
        except (ValueError, OverflowError):  # "abc", NaN, Infinity
            self.issue(key, f"must be a non-negative integer, got {value!r}; ignored")
            return None
        if number < 0:
            self.issue(key, f"must be a non-negative integer, got {number}; ignored")
            return None
        if number > MAX_COUNT:
            self.issue(key, f"must be at most {MAX_COUNT} (a 64-bit integer), got {number}; ignored")
            return None
        return number

    def bool_attr(self, key: str) -> bool | None:
        value = self.span.attributes.get(key)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.issue(key, f"must be a boolean, got {value!r}; ignored")
        return None


MAX_COUNT = MAX_INT64
"""Largest byte or token count the store holds."""


def attribute_value_limit() -> int | None:
    """The SDK's attribute value length limit in force, if any."""
    raw = os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") or os.environ.get(
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"
    )
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def extract_tool_call(
    span: SpanData, raw: str | bytes | None = None, view: str | bytes | None = None
) -> tuple[ToolCall, list[Issue]]:
    """Read one tool-call span; ``raw``/``view`` override the attributes (handed over in-process)."""
    attrs = span.attributes
    r = _Reader(span)
    dialect = _dialect(span.name, attrs)
    _, name = _first(attrs, _TOOL_NAME_KEYS)
    if name is None and span.name == A.CC_TOOL_SPAN:
        name = attrs.get(A.CC_TOOL_NAME)
    if name is None:
        name = name_from_span_name(span.name)
    if name is None and dialect in ("langfuse", "mlflow"):
        # neither has a tool-name attribute: the observation / traced function is the span name
        name = span.name.strip() or None
    if name is None:
        r.issue(
            A.GEN_AI_TOOL_NAME,
            "tool span has no tool name (looked for toolmeter.tool.name, gen_ai.tool.name, tool.name, "
            "traceloop.entity.name, ai.toolCall.name and span names such as 'execute_tool NAME'); recorded as "
            "'(unnamed)'. Set gen_ai.tool.name on the span.",
        )
        name = "(unnamed)"
    raw_key = None
    raw_attr: Any = None
    wrapper: str | None = None
    wrapped: str | bytes | None = None
    wrapped_call_id: str | None = None
    if raw is None:
        raw_key, raw_attr = _first(attrs, _RAW_KEYS, allow_empty=True)  # "" is a result: 0 bytes
        if raw_attr is not None and raw_key in _JSON_ENCODED_KEYS:
            raw, valid = json_encoded_text(raw_attr)
            if not valid:
                r.issue(
                    raw_key,
                    "is not valid JSON (this dialect JSON-encodes results; was it cut by an attribute length "
                    "limit?); measured as given",
                )
            elif isinstance(raw_attr, str) and raw_attr.lstrip().startswith('"'):
                wrapper, wrapped = "json_string", raw_attr
            else:  # a JSON object or list: it may hold a framework's envelope
                opened = unwrap(raw, raw_key)
                if opened.wrapper is not None:
                    raw, wrapper, wrapped, wrapped_call_id = opened.text, opened.wrapper, raw, opened.call_id
        elif raw_attr is not None:
            json_strings = raw_key not in _STRINGS_AS_GIVEN_KEYS and (
                raw_key != A.OI_OUTPUT_VALUE or attrs.get(A.OI_OUTPUT_MIME_TYPE) == "application/json"
            )
            adk = A.ADK_EVENT_ID in attrs or A.ADK_TOOL_RESPONSE in attrs
            opened = unwrap(raw_attr, A.ADK_TOOL_RESPONSE if adk else raw_key, json_strings)
            raw = opened.text
            if opened.wrapper is not None:
                wrapper, wrapped, wrapped_call_id = opened.wrapper, _as_payload(raw_attr), opened.call_id
            elif opened.problem:
                r.issue(raw_key, f"{opened.problem}; measured as given, wrapper included")
    if raw is None and raw_attr is None and span.events:
        raw_key, raw_attr = _result_event(span.events)
        if raw_attr is not None:
            opened = unwrap(raw_attr, raw_key)
            raw = opened.text
            if opened.wrapper is not None:
                wrapper, wrapped = opened.wrapper, _as_payload(raw_attr)
    if view is None and attrs.get(A.VIEW) is not None:
        view = _as_payload(attrs[A.VIEW])
    _, args = _first(attrs, _ARGS_KEYS)
    _, call_id = _first(attrs, _CALL_ID_KEYS)
    if call_id is None:
        call_id = wrapped_call_id or (attrs.get(A.CC_TOOL_USE_ID) if span.name == A.CC_TOOL_SPAN else None)
    raw_bytes = r.int_attr(A.RAW_BYTES)
    raw_tokens_approximate = False
    raw_tokens_declared = r.int_attr(A.RAW_TOKENS)
    if raw_tokens_declared is None and span.name == A.CC_TOOL_SPAN:
        raw_tokens_declared = r.int_attr(A.CC_RESULT_TOKENS)
        raw_tokens_approximate = raw_tokens_declared is not None
    warnings: list[str] = []
    limit = attribute_value_limit()
    if raw_key and isinstance(raw_attr, str) and limit and len(raw_attr) == limit and raw_bytes is None:
        warnings.append(
            f"raw result ({raw_key}) is exactly {limit} characters, the OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: "
            "it was probably cut by the SDK. Record results with collector.record_tool_result, or raise the limit"
        )
    if span.dropped_attributes:
        warnings.append(
            f"the SDK dropped {span.dropped_attributes} attributes of this span (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT); "
            "figures may be missing"
        )
    retained = None
    retained_value = attrs.get(A.RETAINED)
    if retained_value is not None:
        try:
            retained = parse_ranges(str(retained_value))
        except (ValueError, TypeError, OverflowError, RecursionError) as e:
            r.issue(A.RETAINED, f"{str(e)[:300]}; retained ranges ignored")
    shape = attrs.get(A.SHAPE)
    if shape is not None and (not isinstance(shape, str) or shape not in A.SHAPES):
        r.issue(A.SHAPE, f"must be one of {', '.join(A.SHAPES)}, got {shape!r}; the shape will be inferred")
        shape = None
    texts = _Texts()
    span_id = span.span_id
    if span.name == A.CC_TOOL_SPAN and call_id is not None:
        # the same key as the call's claude_code.tool_result log event: one row, whichever comes first
        from collector.dialects.claude_code import synthetic_span_id

        span_id = synthetic_span_id("tool_use", str(call_id))
        if raw_bytes is None:
            raw_bytes = r.int_attr(A.CC_TOOL_RESULT_SIZE_BYTES)
    call = ToolCall(
        trace_id=span.trace_id,
        span_id=span_id,
        parent_span_id=span.parent_span_id,
        tool_name=texts.get(name) or "(unnamed)",
        dialect=dialect,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        tool_call_id=texts.get(call_id),
        service_name=texts.get(span.resource.get(A.SERVICE_NAME)),
        agent_name=texts.get(attrs.get(A.GEN_AI_AGENT_NAME)),
        status=span.status_code,
        error=texts.get(span.status_message) if span.status_code == "error" else None,
        arguments=texts.get(_args_text(args)),
        raw=raw,
        view=view,
        raw_bytes_declared=raw_bytes,
        view_bytes_declared=r.int_attr(A.VIEW_BYTES),
        raw_tokens_declared=raw_tokens_declared,
        raw_tokens_approximate=raw_tokens_approximate,
        raw_wrapper=wrapper,
        wrapped=wrapped if raw is not None and wrapper is not None else None,
        view_tokens_declared=r.int_attr(A.VIEW_TOKENS),
        budget_tokens=r.int_attr(A.BUDGET_TOKENS),
        truncated=r.bool_attr(A.TRUNCATED),
        retained=retained,
        shape=shape,
        source=span.source,
        warnings=tuple(warnings)
        + tuple(i.message if not i.field else f"{i.field}: {i.message}" for i in r.issues)
        + texts.warnings(),
    )
    return call, r.issues


def extract_llm_call(span: SpanData) -> tuple[LlmCall, list[Issue]]:
    """Read one model-call span: time, model and token usage when present."""
    attrs = span.attributes
    r = _Reader(span)
    model_key, model = _first(attrs, _MODEL_KEYS)
    in_key, _ = _first(attrs, _INPUT_TOKEN_KEYS)
    out_key, _ = _first(attrs, _OUTPUT_TOKEN_KEYS)
    input_tokens = r.int_attr(in_key) if in_key else None
    output_tokens = r.int_attr(out_key) if out_key else None
    if input_tokens is None and output_tokens is None:
        # the usage JSON objects of Langfuse and MLflow, read last
        for key, reader in (
            (A.LANGFUSE_OBSERVATION_USAGE_DETAILS, _langfuse_usage),
            (A.MLFLOW_CHAT_TOKEN_USAGE, _mlflow_usage),
        ):
            if attrs.get(key) is not None:
                input_tokens, output_tokens = reader(r, key)
                break
    call = LlmCall(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        dialect=_dialect(span.name, attrs),
        service_name=_str_or_none(span.resource.get(A.SERVICE_NAME)),
        model=_str_or_none(_decoded(model_key, model)),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        source=span.source,
    )
    return call, r.issues


def _usage_object(r: _Reader, key: str) -> Mapping[str, Any] | None:
    """A usage attribute that is a JSON object (as text, or already decoded from OTLP)."""
    value = r.span.attributes.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = None
    if not isinstance(value, Mapping):
        r.issue(key, f"must be a JSON object of token counts, got {_short(r.span.attributes.get(key))}; ignored")
        return None
    return value


def _count(r: _Reader, key: str, name: str, value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_COUNT:
        r.issue(key, f"{name} must be a non-negative number up to {MAX_COUNT}, got {_short(value)}; ignored")
        return None
    return int(value)


def _langfuse_usage(r: _Reader, key: str) -> tuple[int | None, int | None]:
    """Langfuse's rule: keys starting ``input`` add up to input tokens, ``output`` to output."""
    usage = _usage_object(r, key)
    if usage is None:
        return None, None
    sums: dict[str, int | None] = {"input": None, "output": None}
    aliases = {"prompt_tokens": "input", "promptTokens": "input", "completion_tokens": "output",
               "completionTokens": "output"}  # fmt: skip
    for name, value in usage.items():
        side = "input" if name.startswith("input") else "output" if name.startswith("output") else aliases.get(name)
        if side is None:
            continue
        n = _count(r, key, name, value)
        if n is not None:
            sums[side] = (sums[side] or 0) + n
    return sums["input"], sums["output"]


def _mlflow_usage(r: _Reader, key: str) -> tuple[int | None, int | None]:
    usage = _usage_object(r, key)
    if usage is None:
        return None, None
    found = []
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        found.append(None if value is None else _count(r, key, name, value))
    return found[0], found[1]


def _args_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _str_or_none(value: Any) -> str | None:
    return None if value is None else without_surrogates(str(value))[0]


class _Texts:
    """Text fields of one call as the store can hold them: lone surrogates become U+FFFD."""

    def __init__(self) -> None:
        self.replaced = 0

    def get(self, value: Any) -> str | None:
        if value is None:
            return None
        text, n = without_surrogates(value if isinstance(value, str) else str(value))
        self.replaced += n
        return text

    def warnings(self) -> tuple[str, ...]:
        if not self.replaced:
            return ()
        return (
            f"{self.replaced} lone surrogate(s) (not valid Unicode) in the tool name, call id, service, agent, "
            "error or arguments were stored as U+FFFD",
        )
