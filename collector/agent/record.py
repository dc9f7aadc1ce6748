"""Helpers for tool authors: record a result at the tool boundary, before anything cuts it.

Two forms::

    with tracer.start_as_current_span("execute_tool search_orders") as span:
        rows = search(...)
        view = render(rows[:50]) + "\\n[truncated: 50 of 10,000 rows shown]"
        record_tool_result(span, raw=json.dumps(rows), view=view, budget_tokens=25_000,
                           truncated=True, retained=[(0, 18_240)], shape="list")

    @measured_tool("search_orders", budget_tokens=25_000, shape="list")
    def search_orders(status: str) -> str: ...

The span gets small ``toolmeter.*`` attributes (sizes, budget, truncated, ranges, shape)
that survive any exporter's attribute limits; the payloads themselves go to
:class:`collector.ToolResultProcessor` directly, not into the span other exporters ship.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from opentelemetry import trace

from collector.agent.guard import contain
from collector.agent.handoff import park_payloads
from collector.dialects import attributes as A
from collector.errors import ConfigError

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ToolResult:
    """What a tool returns when it shows the model something other than its raw output."""

    raw: Any
    view: str | None = None
    truncated: bool | None = None
    retained: tuple[tuple[int, int], ...] | None = None


def as_text(value: Any) -> str | bytes:
    """A result as recorded: text and bytes as they are, anything else JSON-encoded."""
    if isinstance(value, (str, bytes)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


_LEN_CHUNK_CHARS = 1024 * 1024


def utf8_len(value: str | bytes) -> int:
    """UTF-8 length without an encoded copy of the whole value (the agent holds it already)."""
    if isinstance(value, bytes) or value.isascii():
        return len(value)
    return sum(
        len(value[i : i + _LEN_CHUNK_CHARS].encode("utf-8", errors="surrogatepass"))
        for i in range(0, len(value), _LEN_CHUNK_CHARS)
    )


def format_ranges(ranges: Iterable[tuple[int, int]]) -> str:
    """``[(0, 10), (50, 60)]`` -> ``"0-10,50-60"``."""
    return ",".join(f"{int(s)}-{int(e)}" for s, e in ranges)


def _check_arguments(budget_tokens: Any, shape: Any) -> None:
    if shape is not None and shape not in A.SHAPES:
        raise ConfigError(f"shape={shape!r} must be one of {', '.join(A.SHAPES)}")
    if budget_tokens is not None and (
        isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 0
    ):
        raise ConfigError(f"budget_tokens={budget_tokens!r} must be a non-negative integer")


def record_tool_result(
    span: trace.Span | None = None,
    *,
    raw: Any,
    view: Any = None,
    budget_tokens: int | None = None,
    truncated: bool | None = None,
    retained: Iterable[tuple[int, int]] | None = None,
    shape: str | None = None,
    tool_name: str | None = None,
    tool_call_id: str | None = None,
) -> None:
    """Record a tool's result on ``span`` (default: the current span).

    Args:
        raw: what the tool produced (text, bytes, or a JSON-serialisable value).
        view: what the model is shown, when it differs from ``raw``.
        budget_tokens: the most this tool may put in the window.
        truncated: whether the view was cut from the raw (inferred when omitted).
        retained: byte ranges ``[start, end)`` of the raw's UTF-8 bytes that the view keeps.
        shape: ``list``, ``record``, ``document`` or ``diagnostic`` (inferred when omitted).
        tool_name: overrides the span's tool name.
        tool_call_id: the id the model gave this call.

    Raises:
        ConfigError: a bad ``shape`` or ``budget_tokens`` (a programming error at the call site).
            Anything else that goes wrong (a value that cannot be serialised) is logged once at
            warning and put on the span as ``toolmeter.record.error``, never raised into the tool.
    """
    _check_arguments(budget_tokens, shape)
    span = span or trace.get_current_span()
    if not span.is_recording():
        return
    try:
        _record(span, raw, view, budget_tokens, truncated, retained, shape, tool_name, tool_call_id)
    except Exception as e:  # a value that cannot be recorded (a circular reference...) must not fail the tool
        span.set_attribute(A.RECORD_ERROR, f"{type(e).__name__}: {e}"[:500])
        contain(f"recording the result of {tool_name or 'a tool'}", "the tool's result is returned unchanged")


def _record(span: trace.Span, raw: Any, view: Any, budget_tokens: int | None, truncated: bool | None,
            retained: Iterable[tuple[int, int]] | None, shape: str | None, tool_name: str | None,
            tool_call_id: str | None) -> None:  # fmt: skip
    raw_text = as_text(raw)
    view_text = as_text(view) if view is not None else None
    attrs: dict[str, Any] = {A.RAW_BYTES: utf8_len(raw_text)}
    if view_text is not None:
        attrs[A.VIEW_BYTES] = utf8_len(view_text)
    if budget_tokens is not None:
        attrs[A.BUDGET_TOKENS] = int(budget_tokens)
    if truncated is not None:
        attrs[A.TRUNCATED] = bool(truncated)
    if retained is not None:
        attrs[A.RETAINED] = format_ranges(retained)
    if shape is not None:
        attrs[A.SHAPE] = shape
    if tool_name is not None:
        attrs[A.TOOL_NAME] = tool_name
    if tool_call_id is not None:
        attrs[A.TOOL_CALL_ID] = tool_call_id
    span.set_attributes(attrs)
    if not park_payloads(span, raw_text, view_text):
        # No toolmeter processor in this process (e.g. spans are exported to a receiver):
        # the payloads must travel on the span itself.
        span.set_attribute(A.RAW, raw_text if isinstance(raw_text, str) else raw_text.decode("utf-8", "replace"))
        if view_text is not None:
            span.set_attribute(
                A.VIEW, view_text if isinstance(view_text, str) else view_text.decode("utf-8", "replace")
            )


def measured_tool(
    name: str,
    *,
    budget_tokens: int | None = None,
    shape: str | None = None,
    tracer: trace.Tracer | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a tool function: run it in an ``execute_tool {name}`` span and record its result.

    The function may return a :class:`ToolResult` to declare a separate view; it is
    returned to the caller unchanged. Exceptions are recorded on the span and re-raised.
    """

    _check_arguments(budget_tokens, shape)  # a bad argument fails where the decorator is applied

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            t = tracer or trace.get_tracer("toolmeter")
            with t.start_as_current_span(
                f"execute_tool {name}",
                attributes={A.GEN_AI_OPERATION_NAME: A.EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: name},
            ) as span:
                result = fn(*args, **kwargs)
                # the tool succeeded: recording its result never turns that into an error
                if isinstance(result, ToolResult):
                    record_tool_result(span, raw=result.raw, view=result.view, truncated=result.truncated,
                                       retained=result.retained, budget_tokens=budget_tokens, shape=shape)  # fmt: skip
                else:
                    record_tool_result(span, raw=result, budget_tokens=budget_tokens, shape=shape, tool_name=None)
                return result

        return wrapper

    return decorate
