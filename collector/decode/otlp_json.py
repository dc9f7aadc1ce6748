"""The OTLP/JSON encoding: an ``ExportTraceServiceRequest`` as JSON into :class:`SpanData`.

Ids are hex (as the OTLP/JSON encoding defines them); values are ``AnyValue`` objects. Used
for trace files (:mod:`collector.decode.files`) and for JSON request bodies
(:mod:`collector.decode.request`). A span that cannot be read becomes an :class:`Issue` naming the file, the span's place
in the request and the field, and the other spans are still read.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

from collector.model import MAX_TIME_NS, Issue, SpanData, gen_ai_events

_HEX = re.compile(r"^[0-9a-fA-F]*$")
_STATUS = {
    0: "unset",
    1: "ok",
    2: "error",
    "STATUS_CODE_UNSET": "unset",
    "STATUS_CODE_OK": "ok",
    "STATUS_CODE_ERROR": "error",
}


def any_value(value: Any) -> Any:
    """Decode an OTLP ``AnyValue`` object into a Python value."""
    if not isinstance(value, dict):
        raise ValueError(f"expected an AnyValue object, got {type(value).__name__}")
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        v = value["doubleValue"]
        return float(v)  # also the strings "NaN", "Infinity", "-Infinity"
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: any_value(kv.get("value", {})) for kv in (value["kvlistValue"] or {}).get("values", [])}
    return None  # an empty AnyValue


def attributes(items: Any) -> dict[str, Any]:
    """Decode a list of OTLP ``KeyValue`` objects."""
    if items is None:
        return {}
    if not isinstance(items, list):
        raise ValueError(f"attributes must be a list of {{key, value}} objects, got {type(items).__name__}")
    out: dict[str, Any] = {}
    for kv in items:
        out[str(kv["key"])] = any_value(kv.get("value", {}))
    return out


def _hex_id(value: Any, length: int, name: str) -> str:
    if not isinstance(value, str) or len(value) != length or not _HEX.match(value):
        # OTLP/JSON uses hex; protobuf's JSON mapping (base64) is accepted too
        if isinstance(value, str):
            try:
                raw = base64.b64decode(value, validate=True)
                if len(raw) * 2 == length:
                    return raw.hex()
            except ValueError:
                pass
        raise ValueError(f"{name} must be {length} hex characters, got {value!r}")
    return value.lower()


def time_ns(value: Any, name: str) -> int:
    """An OTLP time (integer nanoseconds, or a string of them) that the store can hold.

    Raises:
        ValueError: not an integer, or outside 0 to 2**63 - 1.
    """
    try:
        number = int(value)
    except OverflowError as e:  # float("inf") read from a JSON number such as 1e400
        raise ValueError(f"{name} must be an integer count of nanoseconds, got {value!r}") from e
    if number < 0 or number > MAX_TIME_NS:
        raise ValueError(f"{name} must be between 0 and {MAX_TIME_NS} nanoseconds, got {number}")
    return number


def _span(raw: dict[str, Any], resource: dict[str, Any], source: str) -> SpanData:
    status = raw.get("status") or {}
    code = status.get("code", 0)
    parent = raw.get("parentSpanId") or None
    start = time_ns(raw.get("startTimeUnixNano", 0), "startTimeUnixNano")
    return SpanData(
        name=str(raw.get("name", "")),
        trace_id=_hex_id(raw.get("traceId"), 32, "traceId"),
        span_id=_hex_id(raw.get("spanId"), 16, "spanId"),
        parent_span_id=_hex_id(parent, 16, "parentSpanId") if parent else None,
        start_ns=start,
        end_ns=time_ns(raw.get("endTimeUnixNano", start), "endTimeUnixNano"),
        attributes=attributes(raw.get("attributes")),
        resource=resource,
        status_code=_STATUS.get(code, "unset") if isinstance(code, (int, str)) else "unset",
        status_message=status.get("message") or None,
        dropped_attributes=int(raw.get("droppedAttributesCount", 0) or 0),
        source=source,
        events=_events(raw.get("events")),
    )


def _events(value: Any) -> tuple[tuple[str, Any, Any], ...]:
    if not isinstance(value, list):
        return ()
    pairs = ((e.get("name"), e.get("attributes")) for e in value if isinstance(e, dict))
    return gen_ai_events((n, attributes(a)) for n, a in pairs if isinstance(n, str) and n.startswith("gen_ai."))


_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)
"""What reading one part of a hostile OTLP/JSON document can raise."""


def _list(value: Any, where: str, source: str, issues: list[Issue]) -> list[Any]:
    """``value`` when it is a list (None and empty mean none); otherwise an error issue and []."""
    if not value:
        return []
    if isinstance(value, list):
        return value
    issues.append(
        Issue(source, f"{where} must be a list, got {type(value).__name__}; its spans were skipped", level="error")
    )
    return []


def spans_from_request(request: Any, source: str, issues: list[Issue]) -> Iterator[SpanData]:
    """Yield the spans of one decoded ``ExportTraceServiceRequest``; problems go to ``issues``."""
    if not isinstance(request, dict) or "resourceSpans" not in request:
        issues.append(
            Issue(
                source, "is not an OTLP/JSON ExportTraceServiceRequest (no 'resourceSpans' key); skipped", level="error"
            )
        )
        return
    for ri, rs in enumerate(_list(request.get("resourceSpans"), "resourceSpans", source, issues)):
        if not isinstance(rs, dict):
            issues.append(
                Issue(source, f"resourceSpans[{ri}] must be an object, got {type(rs).__name__}; skipped", level="error")
            )
            continue
        try:
            resource = attributes((rs.get("resource") or {}).get("attributes"))
        except _READ_ERRORS as e:
            issues.append(Issue(source, f"resourceSpans[{ri}].resource.attributes: {e}; resource ignored"))
            resource = {}
        scopes = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans")
        for si, ss in enumerate(_list(scopes, f"resourceSpans[{ri}].scopeSpans", source, issues)):
            if not isinstance(ss, dict):
                issues.append(
                    Issue(
                        source,
                        f"resourceSpans[{ri}].scopeSpans[{si}] must be an object, got {type(ss).__name__}; skipped",
                        level="error",
                    )
                )
                continue
            spans = _list(ss.get("spans"), f"resourceSpans[{ri}].scopeSpans[{si}].spans", source, issues)
            for pi, raw in enumerate(spans):
                where = f"resourceSpans[{ri}].scopeSpans[{si}].spans[{pi}]"
                try:
                    yield _span(raw, resource, source)
                except _READ_ERRORS as e:
                    span_id = raw.get("spanId") if isinstance(raw, dict) else None
                    issues.append(
                        Issue(
                            source,
                            f"{where} cannot be read ({e}); this span was skipped, the others were kept",
                            span_id=str(span_id) if span_id else None,
                            level="error",
                        )
                    )
