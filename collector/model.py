"""Plain, read-only records that flow from the span readers to the measurer and the store.

A :class:`ToolCall` is what a span said about one tool call, before measurement: the
payloads as text, and whatever numbers the tool declared. An :class:`LlmCall` is a model
call, kept lightly so that window cost can be computed. Both are independent of where
they came from (an in-process span, an OTLP file), so the measurer is tested with plain
values. The two built for every span (:class:`SpanData`, :class:`ToolCall`) are read-only by
convention rather than frozen: a frozen dataclass costs a span several microseconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, NamedTuple

MAX_TIME_NS = 2**63 - 1
"""The latest time the store holds (a signed 64-bit nanosecond count; OTLP times are unsigned)."""

Range = tuple[int, int]
"""A half-open byte range ``[start, end)`` of a raw result's UTF-8 bytes."""


class Source(StrEnum):
    """Where a figure came from."""

    DECLARED = "declared"
    """The tool (or its adapter) said so in the span."""
    INFERRED = "inferred"
    """toolmeter worked it out from the payloads."""

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ToolCall:
    """One tool call as a span described it.

    Read-only by convention once handed on (a changed call is a :func:`dataclasses.replace` of
    it; the reader that has just made one may complete it), not frozen:
    a frozen dataclass sets each of these fields through ``object.__setattr__``, and building
    one took ~4.3 µs, about a twentieth of measuring a small span (~0.5 µs with slots)."""

    trace_id: str
    span_id: str
    tool_name: str
    dialect: str
    start_ns: int
    end_ns: int
    parent_span_id: str | None = None
    tool_call_id: str | None = None
    service_name: str | None = None
    agent_name: str | None = None
    status: str = "unset"
    error: str | None = None
    arguments: str | None = None
    raw: str | bytes | None = None
    view: str | bytes | None = None
    raw_bytes_declared: int | None = None
    view_bytes_declared: int | None = None
    raw_tokens_declared: int | None = None
    raw_tokens_approximate: bool = False
    """The declared raw tokens are the source's estimate (Claude Code's ``result_tokens``), not a count."""
    raw_wrapper: str | None = None
    """The framework envelope removed from the result (:mod:`collector.dialects.wrappers`), if any."""
    wrapped: str | bytes | None = None
    """The result as the span carried it, envelope included (to measure the envelope's overhead)."""
    view_tokens_declared: int | None = None
    budget_tokens: int | None = None
    truncated: bool | None = None
    retained: tuple[Range, ...] | None = None
    shape: str | None = None
    source: str = "process"
    view_origin: str | None = None
    """Where ``view`` came from when not from the tool itself: ``"message"`` (an LLM call's input)."""
    view_join: str | None = None
    """How a message view was matched to this call: ``call_id``, or ``order_content`` (the next
    LLM call's tool response for this tool, in order, confirmed by its content)."""
    handle: str | None = None
    """The handle the full result is kept behind (declared by :mod:`collector.adapter`)."""
    items_total: int | None = None
    items_shown: int | None = None
    retained_items: tuple[Range, ...] | None = None
    """Index ranges of the list items the view shows (declared)."""
    origin: str = "span"
    """What recorded the call: ``span`` (a tool span), ``mcp_server`` (the MCP SDK's server span
    of the call), ``log`` (a log event), ``messages`` (derived
    from an assistant tool call and the tool message after it, no tool span existing)."""
    warnings: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class LlmCall:
    """One model call: enough to know how many times later results were re-read."""

    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    dialect: str
    parent_span_id: str | None = None
    service_name: str | None = None
    model: str | None = None
    input_tokens: int | None = None
    """Every input token, cached ones included."""
    output_tokens: int | None = None
    source: str = "process"
    cache_read_tokens: int | None = None
    """Input tokens served from the provider's prompt cache (part of ``input_tokens``)."""
    cache_write_tokens: int | None = None
    """Input tokens written to the provider's prompt cache (part of ``input_tokens``)."""
    cleared_tool_uses: int | None = None
    """How many of the oldest tool results this call's input left out (context editing)."""
    cleared_input_tokens: int | None = None
    compacted: bool = False
    """The conversation before this call was replaced by a summary (said by the span)."""
    compaction_parts: int | None = None
    """Compaction parts in this call's input messages (None: its input was not recorded)."""

    def row(self) -> dict[str, Any]:
        """The call as a row of ``llm_calls``: its fields by name. Every field is a plain value, so
        this is what ``dataclasses.asdict`` gives, without the deep copy of each value it makes
        (most of the cost of recording a model call)."""
        return {name: getattr(self, name) for name in _LLM_FIELDS}


_LLM_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(LlmCall))


@dataclass(frozen=True)
class Issue:
    """A problem with one input: which source, which span, which field, and what to do."""

    source: str
    message: str
    trace_id: str | None = None
    span_id: str | None = None
    field: str | None = None
    level: str = "warning"

    def __str__(self) -> str:
        where = self.source
        if self.span_id:
            where += f" span {self.span_id}"
        if self.field:
            where += f" field {self.field}"
        return f"{where}: {self.message}"


@dataclass(slots=True)
class SpanData:
    """A finished span, independent of where it came from. Read-only by convention, not frozen,
    as :class:`ToolCall` (one is built for every span received)."""

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
    events: tuple[tuple[str, Mapping[str, Any], Any], ...] = ()
    """The span's ``gen_ai.*`` events as (name, attributes, body): some instrumentations put the
    result or the input messages there instead of in attributes."""


def gen_ai_events(events: Any) -> tuple[tuple[str, Mapping[str, Any], Any], ...]:
    """Keep only the GenAI events of ``(name, attributes)`` pairs (the rest is never read)."""
    return tuple((n, a, None) for n, a in events if isinstance(n, str) and n.startswith("gen_ai."))


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


LOG = "log"


class Item(NamedTuple):
    """One span waiting to be measured, with payloads handed over in-process.

    A NamedTuple, not a dataclass: the processor builds one per span on the agent's
    thread, and a tuple is the cheapest record Python has.
    """

    kind: str
    span: SpanData  # a LogData when kind is "log"
    raw: str | bytes | None = None
    view: str | bytes | None = None
