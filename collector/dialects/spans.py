"""Spans: the tool calls and LLM calls that spans of any supported dialect describe.

:func:`~collector.dialects.conventions.classify` (re-exported here) picks the spans;
:func:`extract_tool_call` and :func:`extract_llm_call` run in the background and turn a
:class:`SpanData` into the plain records that :mod:`collector.measure.measurement`
measures, reading each field from the first key of
:mod:`collector.dialects.conventions` the span holds.

Values that a dialect JSON-encodes (MLflow's ``mlflow.spanOutputs``, the AI SDK's
``ai.toolCall.result``) are decoded before measuring: a JSON string is measured as the
text it encodes, any other JSON value as its JSON text (see :func:`json_encoded_text`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from collector.decode import json_value
from collector.dialects import attributes as A
from collector.dialects.conventions import (
    ARGS_KEYS,
    CALL_ID_KEYS,
    JSON_ENCODED_KEYS,
    LLM,
    MODEL_KEYS,
    RAW_KEYS,
    RESULT_KEYS,
    STRINGS_AS_GIVEN_KEYS,
    TOOL,
    TOOL_NAME_KEYS,
    classify,
    dialect_of,
    first_present,
    name_from_span_name,
)
from collector.dialects.reader import MAX_COUNT, SpanReader
from collector.dialects.usage import read_context_edit, read_usage
from collector.dialects.wrappers import unwrap
from collector.measure.retention import parse_ranges
from collector.measure.text import without_surrogates
from collector.model import Issue, LlmCall, SpanData, ToolCall

__all__ = [  # classify and the key tables moved to conventions: still importable from here
    "LLM",
    "MAX_COUNT",
    "RESULT_KEYS",
    "TOOL",
    "attribute_value_limit",
    "classify",
    "extract_llm_call",
    "extract_tool_call",
    "json_encoded_text",
    "name_from_span_name",
]


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
                return "gen_ai.output.messages", conv.text(0)
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
        decoded = json_value.loads(value)
    except ValueError:
        return value, False
    except RecursionError:  # valid, but nested deeper than the parser goes: not a JSON string
        return value, True
    return (decoded if isinstance(decoded, str) else value), True


def _decoded(key: str | None, value: Any) -> Any:
    """A string attribute's real value when its dialect JSON-encodes it (model names)."""
    if key in JSON_ENCODED_KEYS and isinstance(value, str):
        text, _ = json_encoded_text(value)
        return text
    return value


def attribute_value_limit() -> int | None:
    """The SDK's attribute value length limit in force, if any."""
    raw = os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT") or os.environ.get(
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"
    )
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


READ_LIMIT: Final = -1
"""``value_limit`` of :func:`extract_tool_call` that reads the limit from the environment."""


def extract_tool_call(
    span: SpanData,
    raw: str | bytes | None = None,
    view: str | bytes | None = None,
    *,
    value_limit: int | None = READ_LIMIT,
) -> tuple[ToolCall, list[Issue]]:
    """Read one tool-call span; ``raw``/``view`` override the attributes (handed over in-process);
    ``value_limit``: :func:`attribute_value_limit`, read once a batch (~2 us) or else here."""
    attrs = span.attributes
    r = SpanReader(span)
    dialect = dialect_of(span.name, attrs)
    name = _tool_name(span, dialect, r)
    result = _Result(raw) if raw is not None else _result_attribute(attrs, r)
    if result.raw is None and result.attr is None and span.events:
        result = _result_event_of(span.events)
    if view is None and attrs.get(A.VIEW) is not None:
        view = _as_payload(attrs[A.VIEW])
    _, args = first_present(attrs, ARGS_KEYS)
    _, call_id = first_present(attrs, CALL_ID_KEYS)
    if call_id is None:
        call_id = result.call_id or (attrs.get(A.CC_TOOL_USE_ID) if span.name == A.CC_TOOL_SPAN else None)
    raw_bytes = r.int_attr(A.RAW_BYTES)
    raw_tokens_approximate = False
    raw_tokens_declared = r.int_attr(A.RAW_TOKENS)
    if raw_tokens_declared is None and span.name == A.CC_TOOL_SPAN:
        raw_tokens_declared = r.int_attr(A.CC_RESULT_TOKENS)  # Claude Code's own estimate, not a count
        raw_tokens_approximate = raw_tokens_declared is not None
    warnings = _sdk_limit_warnings(span, result, raw_bytes, value_limit) + _mcp_without_result(attrs, result, raw_bytes)
    retained = _retained(attrs, r)
    shape = _shape(attrs, r)
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
        raw=result.raw,
        view=view,
        raw_bytes_declared=raw_bytes,
        # the declared figures below are read in this order so the issues keep their order
        view_bytes_declared=r.int_attr(A.VIEW_BYTES),
        raw_tokens_declared=raw_tokens_declared,
        raw_tokens_approximate=raw_tokens_approximate,
        raw_wrapper=result.wrapper,
        wrapped=result.wrapped if result.raw is not None and result.wrapper is not None else None,
        view_tokens_declared=r.int_attr(A.VIEW_TOKENS),
        budget_tokens=r.int_attr(A.BUDGET_TOKENS),
        truncated=r.bool_attr(A.TRUNCATED),
        retained=retained,
        shape=shape,
        handle=texts.get(attrs.get(A.HANDLE)),
        items_total=r.int_attr(A.ITEMS_TOTAL),
        items_shown=r.int_attr(A.ITEMS_SHOWN),
        retained_items=_retained(attrs, r, A.RETAINED_ITEMS),
        source=span.source,
        # the MCP SDK's server span of a call: the client's own tool span may stand for the same call
        origin="mcp_server" if attrs.get(A.MCP_METHOD_NAME) == A.MCP_TOOLS_CALL else "span",
        warnings=tuple(warnings)
        + tuple(i.message if not i.field else f"{i.field}: {i.message}" for i in r.issues)
        + (*texts.warnings(), *_agent_said(attrs)),
    )
    return call, r.issues


def _tool_name(span: SpanData, dialect: str, r: SpanReader) -> object:
    """The tool's name: from an attribute, else the span name; ``(unnamed)`` (and an issue) if none."""
    attrs = span.attributes
    _, name = first_present(attrs, TOOL_NAME_KEYS)
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
    return name  # as given: a non-string attribute value is stored as its text


@dataclass(slots=True)
class _Result:
    """A tool's raw result as a span carried it, with the envelope it came in (if any)."""

    raw: str | bytes | None = None
    key: str | None = None
    """The attribute (or event) it came from; None when handed over in-process."""
    attr: Any = None
    """The value of that attribute or event, as given."""
    wrapper: str | None = None
    wrapped: str | bytes | None = None
    call_id: str | None = None
    """A tool call id the envelope carried."""


def _result_attribute(attrs: Mapping[str, Any], r: SpanReader) -> _Result:
    """The raw result from the first result attribute present, decoded and unwrapped."""
    key, attr = first_present(attrs, RAW_KEYS, allow_empty=True)  # "" is a result: 0 bytes
    if attr is None:
        return _Result(None, key, attr)
    if key in JSON_ENCODED_KEYS:
        raw, valid = json_encoded_text(attr)
        if not valid:
            r.issue(
                key,
                "is not valid JSON (this dialect JSON-encodes results; was it cut by an attribute length "
                "limit?); measured as given",
            )
        elif isinstance(attr, str) and attr.lstrip().startswith('"'):
            return _Result(raw, key, attr, "json_string", attr)
        else:  # a JSON object or list: it may hold a framework's envelope
            opened = unwrap(raw, key)
            if opened.wrapper is not None:
                return _Result(opened.text, key, attr, opened.wrapper, raw, opened.call_id)
        return _Result(raw, key, attr)
    json_strings = key not in STRINGS_AS_GIVEN_KEYS and (
        key != A.OI_OUTPUT_VALUE or attrs.get(A.OI_OUTPUT_MIME_TYPE) == "application/json"
    )
    adk = A.ADK_EVENT_ID in attrs or A.ADK_TOOL_RESPONSE in attrs
    opened = unwrap(attr, A.ADK_TOOL_RESPONSE if adk else key, json_strings)
    if opened.wrapper is not None:
        return _Result(opened.text, key, attr, opened.wrapper, _as_payload(attr), opened.call_id)
    if opened.problem:
        r.issue(key, f"{opened.problem}; measured as given, wrapper included")
    return _Result(opened.text, key, attr)


def _result_event_of(events: tuple[tuple[str, Mapping[str, Any], Any], ...]) -> _Result:
    """The raw result from an event of the span (no result attribute was present)."""
    key, attr = _result_event(events)
    if attr is None:
        return _Result(None, key, attr)
    opened = unwrap(attr, key)
    if opened.wrapper is not None:
        return _Result(opened.text, key, attr, opened.wrapper, _as_payload(attr))
    return _Result(opened.text, key, attr)


def _agent_said(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    """What toolmeter's agent side put on the span about its own recording: a result
    ``record_tool_result`` could not record, values forwarding had to change to send."""
    said = []
    for key, what in ((A.RECORD_ERROR, "the result could not be recorded at the tool"),
                      (A.RELAY_CHANGED, "forwarding changed values OTLP cannot carry")):  # fmt: skip
        value = attrs.get(key)
        if value is not None:
            said.append(f"{key}: {what}: {value}")
    return tuple(said)


def _mcp_without_result(attrs: Mapping[str, Any], result: _Result, raw_bytes: int | None) -> list[str]:
    """Say how to get the result of an MCP SDK server span, which carries none of its own."""
    if attrs.get(A.MCP_METHOD_NAME) != A.MCP_TOOLS_CALL or result.raw is not None or raw_bytes is not None:
        return []
    return [
        "the MCP SDK's tools/call span carries no result: shape it in the tool with "
        "collector.adapter.mcp.shape_call_result (or collector.record_tool_result), or trace the client's "
        "tool span, which has it"
    ]


def _sdk_limit_warnings(span: SpanData, result: _Result, raw_bytes: int | None, limit: int | None) -> list[str]:
    """Say when the SDK's attribute limits probably cut the result or dropped attributes
    (``limit``: the value length limit, or :data:`READ_LIMIT`)."""
    warnings: list[str] = []
    key, attr = result.key, result.attr
    if not (key and isinstance(attr, str) and raw_bytes is None):
        limit = None  # a result that could not have met it
    elif limit == READ_LIMIT:
        limit = attribute_value_limit()
    if limit and len(attr) == limit:  # type: ignore[arg-type]
        warnings.append(
            f"raw result ({key}) is exactly {limit} characters, the OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: "
            "it was probably cut by the SDK. Record results with collector.record_tool_result, or raise the limit"
        )
    if span.dropped_attributes:
        warnings.append(
            f"the SDK dropped {span.dropped_attributes} attributes of this span (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT); "
            "figures may be missing"
        )
    return warnings


def _retained(attrs: Mapping[str, Any], r: SpanReader, key: str = A.RETAINED) -> tuple[tuple[int, int], ...] | None:
    """Declared ranges (``toolmeter.retained``, or the list items of ``toolmeter.retained.items``),
    or None (and an issue) when unreadable."""
    value = attrs.get(key)
    if value is None:
        return None
    try:
        return parse_ranges(str(value))
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        r.issue(key, f"{str(e)[:300]}; retained ranges ignored")
        return None


def _shape(attrs: Mapping[str, Any], r: SpanReader) -> str | None:
    """The declared shape, or None (and an issue) when it is not one of the shapes."""
    shape = attrs.get(A.SHAPE)
    if shape is not None and (not isinstance(shape, str) or shape not in A.SHAPES):
        r.issue(A.SHAPE, f"must be one of {', '.join(A.SHAPES)}, got {shape!r}; the shape will be inferred")
        return None
    return shape


def extract_llm_call(span: SpanData) -> tuple[LlmCall, list[Issue]]:
    """Read one model-call span: time, model and token usage when present."""
    attrs = span.attributes
    r = SpanReader(span)
    model_key, model = first_present(attrs, MODEL_KEYS)
    usage = read_usage(r)
    edit = read_context_edit(r)
    call = LlmCall(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        start_ns=span.start_ns,
        end_ns=span.end_ns,
        dialect=dialect_of(span.name, attrs),
        service_name=_str_or_none(span.resource.get(A.SERVICE_NAME)),
        model=_str_or_none(_decoded(model_key, model)),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        source=span.source,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cleared_tool_uses=edit.cleared_tool_uses,
        cleared_input_tokens=edit.cleared_input_tokens,
        compacted=edit.compacted,
        compaction_parts=edit.compaction_parts,
    )
    return call, r.issues


def _args_text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


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
