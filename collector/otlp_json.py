"""Read trace files (OTLP/JSON, ConsoleSpanExporter output, OTLP protobuf) into :class:`SpanData`.

Accepted: one ``ExportTraceServiceRequest`` per file (as the OTLP/JSON encoding defines
it, with hex trace and span ids), or one request per line (JSON Lines, as the
OpenTelemetry Collector's file exporter writes), optionally gzip-compressed (``.gz``).

A span that cannot be read becomes an :class:`Issue` naming the file, the span's place
in the request and the field, and the other spans are still read.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterator
from typing import Any

from collector.dialects import SpanData, gen_ai_events
from collector.errors import InputError
from collector.model import Issue

_HEX = re.compile(r"^[0-9a-fA-F]*$")
MAX_TIME_NS = 2**63 - 1
"""Latest time the store holds (a signed 64-bit nanosecond count); OTLP times are unsigned."""
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


def read_file(path: str, issues: list[Issue]) -> Iterator[SpanData]:
    """Yield every span in a trace file: OTLP/JSON (one request, or one per line), the
    OpenTelemetry SDK's ``ConsoleSpanExporter`` output, or an OTLP protobuf
    ``ExportTraceServiceRequest``; any of them gzip-compressed.

    Raises:
        InputError: the file cannot be opened, decompressed or parsed at all.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read the file ({e.strerror})") from e
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise InputError(f"{path}: looks gzip-compressed but cannot be decompressed ({e})") from e
    if not data.strip():
        raise InputError(f"{path}: the file is empty")
    if data.lstrip()[:1] not in (b"{", b"["):
        yield from _read_protobuf(path, data, issues)
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        issues.append(
            Issue(
                path,
                f"is not valid UTF-8 (first bad byte at offset {e.start}); OTLP/JSON must be UTF-8. "
                "Invalid bytes were replaced with U+FFFD and the rest was read.",
            )
        )
        text = data.decode("utf-8", errors="replace")
    from collector.console_json import looks_like_console_json, read_console_spans

    if looks_like_console_json(text):
        yield from read_console_spans(text, path, issues)
        return
    try:
        request = json.loads(text)
        if isinstance(request, dict) and isinstance(request.get("spans"), list) and "resourceSpans" not in request:
            from collector.console_json import read_console_spans

            yield from read_console_spans(text, path, issues)  # a {"spans": [...]} wrapper of to_json() objects
            return
        if not isinstance(request, dict) or "resourceSpans" not in request:
            what = (
                type(request).__name__
                if not isinstance(request, dict)
                else "object with keys " + ", ".join(sorted(request)[:8])
            )
            raise InputError(
                f"{path}: a JSON {what}, which is not a trace file toolmeter reads. Expected an OTLP/JSON "
                "ExportTraceServiceRequest ('resourceSpans'), one per line, ConsoleSpanExporter / "
                "ReadableSpan.to_json() output (objects with 'context' or 'trace_id' and 'span_id', alone, in a "
                "list or under 'spans'), or OTLP protobuf"
            )
        yield from spans_from_request(request, path, issues)
        return
    except json.JSONDecodeError as whole_error:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) < 2:
            raise InputError(
                f"{path}: not valid JSON (line {whole_error.lineno}, column {whole_error.colno}: {whole_error.msg}). "
                "Expected an OTLP/JSON ExportTraceServiceRequest, one per line, or ConsoleSpanExporter output."
            ) from whole_error
    except RecursionError as e:
        raise InputError(f"{path}: JSON nested too deeply to parse") from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            issues.append(Issue(path, f"line {n} is not valid JSON ({e}); that line was skipped", level="error"))
            continue
        yield from spans_from_request(request, f"{path}:{n}", issues)


def _read_protobuf(path: str, data: bytes, issues: list[Issue]) -> Iterator[SpanData]:
    from collector.otlp_decode import PROTOBUF, decode_traces

    try:
        decoded = decode_traces(data, PROTOBUF, path)
    except InputError as e:
        raise InputError(
            f"{path}: neither JSON nor an OTLP protobuf ExportTraceServiceRequest ({e}). "
            "Accepted: OTLP/JSON, JSON lines, ConsoleSpanExporter output, OTLP protobuf; optionally gzipped."
        ) from e
    issues += decoded.issues
    yield from decoded.spans
