"""Figures: the typed result of measuring one tool call, and its row of store columns.

:meth:`Measurement.row` is the one place that names the ``tool_calls`` columns a
measurement fills; its keys are the store's column list, so change them together.

The figures are read-only by convention, as :class:`~collector.model.ToolCall` is, and not
frozen: a frozen dataclass sets each field through ``object.__setattr__``, and the ten or so
small objects measuring a span builds paid a few microseconds for it (BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collector.model import Range, ToolCall


@dataclass(slots=True)
class Size:
    """Bytes and tokens of one payload (each None when neither received nor declared)."""

    byte_count: int | None
    tokens: int | None
    exact: bool = True
    """Whether ``tokens`` is an exact count (not an estimate, nor a count of a cut run)."""


@dataclass(slots=True)
class Wrapper:
    """The framework envelope around the raw result, and what it added (None when not measured)."""

    name: str | None = None
    byte_count: int | None = None
    tokens: int | None = None


@dataclass(slots=True)
class Truncation:
    """Whether the view was cut from the raw, how, and which bytes of the raw it kept."""

    truncated: bool | None = None
    source: str | None = None
    kind: str | None = None
    retained: tuple[Range, ...] | None = None
    """Byte ranges of the raw the view kept, in view order (declared ones sorted and merged)."""
    retained_source: str | None = None
    retained_bytes: int | None = None
    coverage: float | None = None
    omitted_bytes: int | None = None


@dataclass(slots=True)
class ResultShape:
    """The kind of result, and the fingerprint of its JSON structure."""

    shape: str | None = None
    source: str | None = None
    fingerprint: str | None = None
    fields: tuple[str, ...] | None = None


@dataclass(slots=True)
class Measurement:
    """The figures of one tool call, and its payloads for the payload store.

    :meth:`row` gives the figures as a dict of store columns (a new dict each time: the
    pipeline completes its rows); :attr:`payloads` the bytes for the payload store.
    """

    call: ToolCall = field(repr=False)
    encoding: str
    counter: str
    """Who counted the tokens (``TokenCounter.name_for`` the call's texts: counter and version)."""
    raw: Size
    view: Size
    view_source: str
    """Where the view figures come from: ``view``, ``message``, ``declared``, ``retained`` or ``raw``."""
    wrapper: Wrapper
    truncation: Truncation
    shape: ResultShape
    warnings: tuple[str, ...]
    payloads: dict[str, bytes] = field(repr=False)
    """``raw`` and ``view`` as UTF-8 bytes, for those the call carried."""

    @property
    def over_budget(self) -> bool | None:
        return _over_budget(self.raw.tokens, self.call.budget_tokens)

    @property
    def view_over_budget(self) -> bool | None:
        return _over_budget(self.view.tokens, self.call.budget_tokens)

    def row(self) -> dict[str, Any]:
        """The figures as a new dict of store columns (callers may change it)."""
        call, raw, view, cut, shape = self.call, self.raw, self.view, self.truncation, self.shape
        return {
            "trace_id": call.trace_id,
            "span_id": call.span_id,
            "parent_span_id": call.parent_span_id,
            "tool_call_id": call.tool_call_id,
            "tool_name": call.tool_name,
            "service_name": call.service_name,
            "agent_name": call.agent_name,
            "dialect": call.dialect,
            "source": call.source,
            "start_ns": call.start_ns,
            "end_ns": call.end_ns,
            "duration_ms": max(call.end_ns - call.start_ns, 0) / 1e6,
            "status": call.status,
            "error": call.error,
            "encoding": self.encoding,
            "raw_bytes": raw.byte_count,
            "raw_tokens": raw.tokens,
            "raw_tokens_exact": raw.exact if raw.tokens is not None else None,
            "view_bytes": view.byte_count,
            "view_tokens": view.tokens,
            "view_tokens_exact": view.exact if view.tokens is not None else None,
            "view_source": self.view_source,
            "budget_tokens": call.budget_tokens,
            "over_budget": self.over_budget,
            "view_over_budget": self.view_over_budget,
            "truncated": cut.truncated,
            "truncation_source": cut.source,
            "truncation_kind": cut.kind,
            "retained_ranges": [list(r) for r in cut.retained] if cut.retained is not None else None,
            "retained_source": cut.retained_source,
            "retained_bytes": cut.retained_bytes,
            "retained_coverage": cut.coverage,
            "omitted_bytes": cut.omitted_bytes,
            "shape": shape.shape,
            "shape_source": shape.source,
            "schema_fingerprint": shape.fingerprint,
            "schema_fields": list(shape.fields) if shape.fields is not None else None,
            "arguments": call.arguments,
            "warnings": list(self.warnings),
            "raw_wrapper": self.wrapper.name,
            "wrapper_bytes": self.wrapper.byte_count,
            "wrapper_tokens": self.wrapper.tokens,
            "view_join": call.view_join,
            "origin": call.origin,
            "token_counter": self.counter,
            "handle": call.handle,
            "items_total": call.items_total,
            "items_shown": call.items_shown,
            "retained_items": [list(r) for r in call.retained_items] if call.retained_items is not None else None,
        }


def _over_budget(tokens: int | None, budget: int | None) -> bool | None:
    """Whether ``tokens`` exceed the tool's token budget (None when either is unknown)."""
    return (tokens > budget) if budget is not None and tokens is not None else None
