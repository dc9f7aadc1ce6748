"""Hand payloads from the tool boundary to the processor without putting them on the span.

Exporters ship every attribute of a span. A 1 MB result set as an attribute goes to
every backend (or is cut by ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``). So
:func:`collector.record_tool_result` sets only small ``toolmeter.*`` numbers on the span
and parks the payloads here, keyed by the span's (trace id, span id); ``on_end`` takes
them. The SDK hands ``on_end`` a fresh ReadableSpan, not the Span the tool held, so the
ids are the only key both sides share.

Payloads are parked only while a ToolResultProcessor is alive, and the parking lot is
bounded (entries and bytes, oldest evicted first and counted), so a span that never ends
cannot grow memory without limit.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

MAX_PARKED = 4096
MAX_PARKED_BYTES = 256 * 1024 * 1024

_lock = threading.Lock()
_parked: dict[tuple[int, int], tuple[str | bytes | None, str | bytes | None, int]] = {}
_parked_bytes = 0
evicted = 0
"""Payloads evicted before their span ended (the span is still measured from its attributes)."""

_processors: weakref.WeakSet[Any] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A fork can happen while another thread holds the lock; the child has only the forking
    thread, so the lock would never be released there. The child starts with a new lock and an
    empty lot (the parked payloads belong to the parent's spans)."""
    global _lock, _parked_bytes
    _lock = threading.Lock()
    _parked.clear()
    _parked_bytes = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def register_processor(processor: Any) -> None:
    _processors.add(processor)


def _key(span: Any) -> tuple[int, int] | None:
    ctx = span.get_span_context() if hasattr(span, "get_span_context") else getattr(span, "context", None)
    if ctx is None or not ctx.is_valid:
        return None
    return ctx.trace_id, ctx.span_id


def _size(value: str | bytes | None) -> int:
    return len(value) if value is not None else 0


def park_payloads(span: Any, raw: str | bytes | None, view: str | bytes | None) -> bool:
    """Keep ``raw``/``view`` for ``span`` until it ends; False when no processor would take them."""
    global _parked_bytes, evicted
    key = _key(span)
    if key is None or not _processors:
        return False
    size = _size(raw) + _size(view)
    with _lock:
        old = _parked.pop(key, None)
        if old is not None:
            _parked_bytes -= old[2]
        while _parked and (len(_parked) >= MAX_PARKED or _parked_bytes + size > MAX_PARKED_BYTES):
            _, (_, _, dropped_size) = _pop_oldest()
            _parked_bytes -= dropped_size
            evicted += 1
        _parked[key] = (raw, view, size)
        _parked_bytes += size
    return True


def _pop_oldest() -> tuple[tuple[int, int], tuple[str | bytes | None, str | bytes | None, int]]:
    key = next(iter(_parked))
    return key, _parked.pop(key)


def take_payloads(span: Any) -> tuple[str | bytes | None, str | bytes | None]:
    """Remove and return the payloads parked for ``span`` (None, None when there are none)."""
    global _parked_bytes
    if not _parked:
        return None, None
    key = _key(span)
    if key is None:
        return None, None
    with _lock:
        entry = _parked.pop(key, None)
        if entry is None:
            return None, None
        _parked_bytes -= entry[2]
    return entry[0], entry[1]
