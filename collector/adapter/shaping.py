"""``shape()``: a raw tool result in, what the model sees out, recorded on the current span."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from collector.adapter import positions as S
from collector.adapter.handles import HandleStore, MemoryHandles
from collector.adapter.listing import shape_list, shape_record
from collector.adapter.policy import Policy, Scope
from collector.adapter.text import shape_diagnostic, shape_document
from collector.adapter.view import View, tokens
from collector.agent.record import as_text, record_tool_result
from collector.dialects import attributes as A

_default_store = MemoryHandles()


def default_store() -> MemoryHandles:
    """The process's handle store, used when ``shape`` is given none."""
    return _default_store


@dataclass(frozen=True)
class Shaped:
    """One shaped result: what the model is shown and what it declares about the raw result."""

    view: str
    """The text to give the model."""
    shape: str
    """The shape it was given (a ``list`` policy for a result with no list falls back to ``record``
    or ``document``)."""
    handle: str | None
    truncated: bool
    retained: tuple[tuple[int, int], ...]
    """Byte ranges ``[start, end)`` of the raw result's UTF-8 text that the view keeps."""
    view_tokens: int
    budget_tokens: int
    envelope: dict[str, Any] | None = None
    """The envelope as data, for lists and cut records (``view`` is its JSON)."""
    items_total: int | None = None
    items_shown: int | None = None
    retained_items: tuple[tuple[int, int], ...] = ()
    """Index ranges ``[start, end)``, in the tool's own order, of the list items shown."""


def raw_text(raw: Any) -> str:
    """The result as the text the byte ranges refer to (a value is JSON-encoded, as recorded)."""
    text = as_text(bytes(raw) if isinstance(raw, bytearray) else raw)
    return text if isinstance(text, str) else text.decode("utf-8", errors="replace")


def _index_ranges(indices: Iterable[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for i in sorted(indices):
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return tuple(out)


def _view(text: str, policy: Policy, scope: Scope, store: HandleStore, query: str | None,
          applied_filter: str | None) -> tuple[View, str]:  # fmt: skip
    if policy.shape in ("list", "record") and text.lstrip()[:1] in ("[", "{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if parsed is not None:
            if policy.shape == "list":
                listed = shape_list(text, parsed, policy, scope, store, applied_filter)
                if listed is not None:
                    return listed, "list"
            record = shape_record(text, parsed, policy, scope, store)
            if record is not None:
                return record, "record"
    if policy.shape == "diagnostic":
        return shape_diagnostic(text, policy, scope, store), "diagnostic"
    return shape_document(text, policy, scope, store, query), "document"


def shape(
    raw: Any,
    policy: Policy,
    scope: Scope,
    *,
    store: HandleStore | None = None,
    query: str | None = None,
    applied_filter: str | None = None,
    span: trace.Span | None = None,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
) -> Shaped:
    """Bound ``raw`` to ``policy`` for the model, keep all of it behind a handle, and record both.

    Args:
        raw: the tool's result: text, bytes, or a JSON-serialisable value.
        policy: the tool's budget and shape.
        scope: the run (and principal) the handle is for.
        store: where the full result is kept (default: this process's memory).
        query: for the ``relevant`` strategy, what the agent is looking for.
        applied_filter: the filter the agent already applied (never suggested back to it).
        span: where the result is recorded (default: the current span; nothing when it is
            not recording).
        tool_name, tool_call_id: recorded with it.

    Returns:
        The view (never over ``policy.budget_tokens``) and what it declares.
    """
    text = raw_text(raw)
    store = store if store is not None else _default_store
    view, shape_name = _view(text, policy, scope, store, query, applied_filter)
    handle = view.handle
    retained = tuple(S.to_bytes(text, view.spans))
    shaped = Shaped(
        view=view.text, shape=shape_name, handle=handle, truncated=view.truncated, retained=retained,
        view_tokens=tokens(view.text), budget_tokens=policy.budget_tokens,
        envelope=view.envelope,
        items_total=view.items_total, items_shown=len(view.items) if view.items_total is not None else None,
        retained_items=_index_ranges(view.items),
    )  # fmt: skip
    _record(shaped, text, span, tool_name, tool_call_id)
    return shaped


def _record(shaped: Shaped, text: str, span: trace.Span | None, tool_name: str | None,
            tool_call_id: str | None) -> None:  # fmt: skip
    span = span or trace.get_current_span()
    if not span.is_recording():
        return
    attrs: dict[str, Any] = {A.VIEW_TOKENS: shaped.view_tokens}
    if shaped.handle:
        attrs[A.HANDLE] = shaped.handle
    if shaped.items_total is not None:
        attrs[A.ITEMS_TOTAL] = shaped.items_total
        attrs[A.ITEMS_SHOWN] = shaped.items_shown
        attrs[A.RETAINED_ITEMS] = ",".join(f"{a}-{b}" for a, b in shaped.retained_items)
    span.set_attributes(attrs)
    record_tool_result(span, raw=text, view=shaped.view, budget_tokens=shaped.budget_tokens,
                       truncated=shaped.truncated, retained=shaped.retained, shape=shaped.shape,
                       tool_name=tool_name, tool_call_id=tool_call_id)  # fmt: skip
