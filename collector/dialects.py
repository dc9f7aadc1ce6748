"""Recognise tool calls and LLM calls in spans of any supported dialect.

:func:`classify` is the cheap filter the processor runs on the span-ending thread: a
handful of dictionary look-ups, no allocation of note. :func:`extract_tool_call` and
:func:`extract_llm_call` run in the background and turn a :class:`SpanData` into the
plain records that :mod:`collector.measure` measures.

Precedence, for every field: ``toolmeter.*`` first, then the OpenTelemetry GenAI
conventions, then OpenInference, then Traceloop.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector import attributes as A
from collector.measure import parse_ranges
from collector.model import Issue, LlmCall, ToolCall

TOOL = "tool"
LLM = "llm"

_TOOL_NAME_KEYS = (A.TOOL_NAME, A.GEN_AI_TOOL_NAME, A.OI_TOOL_NAME, A.TRACELOOP_ENTITY_NAME)
_RAW_KEYS = (A.RAW, A.GEN_AI_TOOL_CALL_RESULT, A.OI_OUTPUT_VALUE, A.TRACELOOP_ENTITY_OUTPUT)
_ARGS_KEYS = (A.GEN_AI_TOOL_CALL_ARGUMENTS, A.OI_INPUT_VALUE, A.TRACELOOP_ENTITY_INPUT)
_CALL_ID_KEYS = (A.TOOL_CALL_ID, A.GEN_AI_TOOL_CALL_ID)
_MODEL_KEYS = (A.GEN_AI_RESPONSE_MODEL, A.GEN_AI_REQUEST_MODEL, A.OI_LLM_MODEL_NAME)
_INPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_INPUT_TOKENS, A.OI_LLM_TOKEN_COUNT_PROMPT, A.LLM_USAGE_PROMPT_TOKENS)
_OUTPUT_TOKEN_KEYS = (A.GEN_AI_USAGE_OUTPUT_TOKENS, A.OI_LLM_TOKEN_COUNT_COMPLETION, A.LLM_USAGE_COMPLETION_TOKENS)
_EXECUTE_TOOL_PREFIX = "execute_tool "


@dataclass(frozen=True)
class SpanData:
    """A finished span, independent of where it came from."""

    name: str
    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    parent_span_id: str | None = None
    resource: Mapping[str, Any] = field(default_factory=dict)
    status_code: str = "unset"
    status_message: str | None = None
    dropped_attributes: int = 0
    source: str = "process"


@dataclass(frozen=True)
class LogData:
    """One OTLP log record (event), independent of where it came from."""

    time_ns: int
    attributes: Mapping[str, Any]
    body: Any = None
    event_name: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    resource: Mapping[str, Any] = field(default_factory=dict)
    source: str = "process"


def classify(name: str, attrs: Mapping[str, Any] | None) -> str | None:
    """Return ``"tool"``, ``"llm"`` or None for a span (cheap: runs in ``on_end``)."""
    if not attrs:
        return TOOL if name.startswith(_EXECUTE_TOOL_PREFIX) else None
    op = attrs.get(A.GEN_AI_OPERATION_NAME)
    if op is not None:
        if op == A.EXECUTE_TOOL or A.TOOL_NAME in attrs:
            return TOOL
        return LLM if op in A.LLM_OPERATIONS else None
    if A.TOOL_NAME in attrs:
        return TOOL
    oi = attrs.get(A.OPENINFERENCE_SPAN_KIND)
    if oi is not None:
        oi = str(oi).upper()
        return TOOL if oi == "TOOL" else LLM if oi == "LLM" else None
    tl = attrs.get(A.TRACELOOP_SPAN_KIND)
    if tl is not None:
        return TOOL if tl == "tool" else None
    if name.startswith(_EXECUTE_TOOL_PREFIX):
        return TOOL
    if A.LLM_REQUEST_TYPE in attrs or A.GEN_AI_USAGE_INPUT_TOKENS in attrs:
        return LLM
    return None


def _dialect(name: str, attrs: Mapping[str, Any]) -> str:
    if attrs.get(A.GEN_AI_OPERATION_NAME) is not None or name.startswith(_EXECUTE_TOOL_PREFIX):
        return "gen_ai"
    if A.OPENINFERENCE_SPAN_KIND in attrs:
        return "openinference"
    if A.TRACELOOP_SPAN_KIND in attrs or A.LLM_REQUEST_TYPE in attrs:
        return "traceloop"
    return "toolmeter"


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
        except ValueError:
            self.issue(key, f"must be a non-negative integer, got {value!r}; ignored")
            return None
        if number < 0:
            self.issue(key, f"must be a non-negative integer, got {number}; ignored")
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
    _, name = _first(attrs, _TOOL_NAME_KEYS)
    if name is None and span.name.startswith(_EXECUTE_TOOL_PREFIX):
        name = span.name[len(_EXECUTE_TOOL_PREFIX) :].strip() or None
    if name is None:
        r.issue(
            A.GEN_AI_TOOL_NAME,
            "tool span has no tool name (looked for toolmeter.tool.name, gen_ai.tool.name, tool.name, "
            "traceloop.entity.name and an 'execute_tool NAME' span name); recorded as '(unnamed)'. "
            "Set gen_ai.tool.name on the span.",
        )
        name = "(unnamed)"
    raw_key = None
    if raw is None:
        raw_key, raw_attr = _first(attrs, _RAW_KEYS, allow_empty=True)  # "" is a result: 0 bytes
        raw = _as_payload(raw_attr) if raw_attr is not None else None
    if view is None and attrs.get(A.VIEW) is not None:
        view = _as_payload(attrs[A.VIEW])
    _, args = _first(attrs, _ARGS_KEYS)
    _, call_id = _first(attrs, _CALL_ID_KEYS)
    raw_bytes = r.int_attr(A.RAW_BYTES)
    warnings: list[str] = []
    limit = attribute_value_limit()
    if raw_key and isinstance(raw, str) and limit and len(raw) == limit and raw_bytes is None:
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
        except (ValueError, TypeError) as e:
            r.issue(A.RETAINED, f"{e}; retained ranges ignored")
    shape = attrs.get(A.SHAPE)
    if shape is not None and shape not in A.SHAPES:
        r.issue(A.SHAPE, f"must be one of {', '.join(A.SHAPES)}, got {shape!r}; the shape will be inferred")
        shape = None
    call = ToolCall(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        tool_name=str(name),
        dialect=_dialect(span.name, attrs),
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        tool_call_id=str(call_id) if call_id is not None else None,
        service_name=_str_or_none(span.resource.get(A.SERVICE_NAME)),
        agent_name=_str_or_none(attrs.get(A.GEN_AI_AGENT_NAME)),
        status=span.status_code,
        error=span.status_message if span.status_code == "error" else None,
        arguments=str(args) if args is not None else None,
        raw=raw,
        view=view,
        raw_bytes_declared=raw_bytes,
        view_bytes_declared=r.int_attr(A.VIEW_BYTES),
        raw_tokens_declared=r.int_attr(A.RAW_TOKENS),
        view_tokens_declared=r.int_attr(A.VIEW_TOKENS),
        budget_tokens=r.int_attr(A.BUDGET_TOKENS),
        truncated=r.bool_attr(A.TRUNCATED),
        retained=retained,
        shape=shape,
        source=span.source,
        warnings=tuple(warnings) + tuple(i.message if not i.field else f"{i.field}: {i.message}" for i in r.issues),
    )
    return call, r.issues


def extract_llm_call(span: SpanData) -> tuple[LlmCall, list[Issue]]:
    """Read one model-call span: time, model and token usage when present."""
    attrs = span.attributes
    r = _Reader(span)
    _, model = _first(attrs, _MODEL_KEYS)
    in_key, _ = _first(attrs, _INPUT_TOKEN_KEYS)
    out_key, _ = _first(attrs, _OUTPUT_TOKEN_KEYS)
    call = LlmCall(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        dialect=_dialect(span.name, attrs),
        service_name=_str_or_none(span.resource.get(A.SERVICE_NAME)),
        model=_str_or_none(model),
        input_tokens=r.int_attr(in_key) if in_key else None,
        output_tokens=r.int_attr(out_key) if out_key else None,
        source=span.source,
    )
    return call, r.issues


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
