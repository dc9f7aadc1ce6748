"""Read the output of the OpenTelemetry Python SDK's ``ConsoleSpanExporter``.

``ConsoleSpanExporter`` writes each span as ``ReadableSpan.to_json()`` (indent 4) plus a
newline: a stream of JSON objects one after another, not a JSON array and not one object
per line. Each object looks like::

    {
        "name": "execute_tool search",
        "context": {"trace_id": "0x5b8a...", "span_id": "0x051a...", "trace_state": "[]"},
        "kind": "SpanKind.INTERNAL",
        "parent_id": "0x6e0c..." or null,
        "start_time": "2025-01-31T10:00:00.123456Z",
        "end_time": "2025-01-31T10:00:00.456789Z",
        "status": {"status_code": "UNSET" | "OK" | "ERROR", "description": "..."},
        "attributes": {...},
        "events": [...],
        "links": [...],
        "resource": {"attributes": {...}, "schema_url": ""}
    }

Times have microsecond precision (the SDK prints them so). Other projects publish the same
objects in variants, all read here: a ``{"spans": [...]}`` wrapper or a JSON array of them,
ids as decimal integers or hex without ``0x``, times as integer nanoseconds, the context's
ids at the top level (``trace_id``, ``span_id``), and the parent as ``parent_id``,
``parent_span_id`` or a ``parent`` object (``{"trace_id", "span_id"}``). The objects are parsed one
after another with :meth:`json.JSONDecoder.raw_decode`; an object that cannot be parsed
becomes an :class:`Issue` naming its number and character offset, and reading resumes at
the next line that starts with ``{`` (every object starts on a line of its own; the
lines inside an indented object never start with ``{``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from collector.model import MAX_TIME_NS, Issue, SpanData, gen_ai_events

_STATUS = {"UNSET": "unset", "OK": "ok", "ERROR": "error"}
_HEX = frozenset("0123456789abcdefABCDEF")
_SNIFF_CHARS = 4096


def looks_like_console_json(text: str) -> bool:
    """Whether ``text`` starts like ``ReadableSpan.to_json()`` output (not OTLP/JSON)."""
    head = text[:_SNIFF_CHARS]
    if not head.lstrip().startswith(("{", "[")) or '"resourceSpans"' in head:
        return False
    return '"trace_id"' in head and '"span_id"' in head


def iso_to_ns(value: str) -> int:
    """Unix nanoseconds of an ISO 8601 time (``Z`` or an offset; up to 9 fractional digits)."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    extra_ns = 0
    dot = text.find(".")
    if dot != -1:
        end = dot + 1
        while end < len(text) and text[end].isdigit():
            end += 1
        digits = text[dot + 1 : end]
        if not digits:
            raise ValueError(f"not an ISO 8601 time: {value!r}")
        padded = (digits + "000000000")[:9]
        extra_ns = int(padded)
        text = text[:dot] + text[end:]
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    whole = moment.replace(microsecond=0)
    seconds = int(whole.timestamp())
    return seconds * 1_000_000_000 + extra_ns


class _BadField(ValueError):
    """A span object whose ``field`` cannot be read."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field


def _hex_id(value: Any, length: int, name: str) -> str:
    if isinstance(value, str):
        digits = value[2:] if value[:2] in ("0x", "0X") else value
        if len(digits) == length and all(c in _HEX for c in digits):
            return digits.lower()
        if digits.isdigit() and value[:2] not in ("0x", "0X"):
            value = int(digits)  # a decimal id written as a string
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 16**length:
        return f"{value:0{length}x}"
    raise _BadField(name, f"{name} must be {length} hex digits (0x optional) or a decimal integer, got {value!r}")


def _time(value: Any, name: str) -> int:
    if isinstance(value, str):
        if value.strip().isdigit():
            value = int(value)
        else:
            try:
                return iso_to_ns(value)
            except ValueError:
                pass
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_TIME_NS:
        return int(value)
    raise _BadField(name, f"{name} must be an ISO 8601 time or integer nanoseconds, got {value!r}")


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _BadField(name, f"{name} must be an object, got {type(value).__name__}")
    return value


def _span(obj: Any, source: str) -> SpanData:
    if not isinstance(obj, dict):
        raise _BadField(None, f"is a JSON {type(obj).__name__}, not a span object")
    context = obj.get("context")
    if context is None and "trace_id" in obj and "span_id" in obj:
        context = obj
    if not isinstance(context, dict):
        raise _BadField("context", "context must be an object with trace_id and span_id")
    parent = obj.get("parent_id", obj.get("parent_span_id"))
    if isinstance(obj.get("parent"), dict):
        parent = obj["parent"].get("span_id")
    start_ns = _time(obj.get("start_time"), "start_time")
    end = obj.get("end_time")
    status = _mapping(obj.get("status"), "status")
    code = str(status.get("status_code", "UNSET")).upper().removeprefix("STATUSCODE.")
    resource = _mapping(obj.get("resource"), "resource")
    return SpanData(
        name=str(obj.get("name", "")),
        trace_id=_hex_id(context.get("trace_id"), 32, "context.trace_id"),
        span_id=_hex_id(context.get("span_id"), 16, "context.span_id"),
        parent_span_id=_hex_id(parent, 16, "parent_id") if parent else None,
        start_ns=start_ns,
        end_ns=_time(end, "end_time") if end is not None else start_ns,
        attributes=_mapping(obj.get("attributes"), "attributes"),
        resource=_mapping(resource.get("attributes"), "resource.attributes"),
        status_code=_STATUS.get(code, "unset"),
        status_message=status.get("description") or None,
        source=source,
        events=gen_ai_events(
            (e.get("name"), e.get("attributes") or {}) for e in obj.get("events") or [] if isinstance(e, dict)
        ),
    )


def read_console_spans(text: str, source: str, issues: list[Issue]) -> Iterator[SpanData]:
    """Yield the spans of ConsoleSpanExporter output; problems are appended to ``issues``."""
    decoder = json.JSONDecoder()
    pos, number, size = 0, 0, len(text)
    while True:
        while pos < size and text[pos] in " \t\r\n":
            pos += 1
        if pos >= size:
            return
        number += 1
        where = f"object {number} (character {pos})"
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            issues.append(Issue(source, f"{where}: not valid JSON at character {e.pos}: {e.msg}; skipped"))
            resume = text.find("\n{", max(pos, e.pos - 1) if e.pos > pos else pos + 1)
            if resume == -1:
                return
            pos = resume + 1
            continue
        pos = end
        if isinstance(obj, dict) and isinstance(obj.get("spans"), list) and "name" not in obj:
            objects: list[Any] = obj["spans"]  # a {"spans": [...]} wrapper
        elif isinstance(obj, list):
            objects = obj
        else:
            objects = [obj]
        for n, one in enumerate(objects):
            label = where if len(objects) == 1 else f"{where} span {n}"
            span = _read_one(one, source, label, issues)
            if span is not None:
                yield span


def _read_one(obj: Any, source: str, where: str, issues: list[Issue]) -> SpanData | None:
    """One span object, or None with an issue naming the field that cannot be read."""
    try:
        return _span(obj, source)
    except _BadField as e:
        trace_id = span_id = None
        if isinstance(obj, dict) and isinstance(obj.get("context"), dict):
            trace_id = _id_or_none(obj["context"].get("trace_id"), 32)
            span_id = _id_or_none(obj["context"].get("span_id"), 16)
        issues.append(Issue(source, f"{where}: {e}; span skipped", trace_id, span_id, e.field))
        return None


def _id_or_none(value: Any, length: int) -> str | None:
    try:
        return _hex_id(value, length, "id")
    except _BadField:
        return None
