"""Decode OTLP export requests (traces and logs; protobuf or JSON) at the edge.

One public function per signal, :func:`decode_traces` and :func:`decode_logs`, returns
plain :class:`SpanData` / :class:`LogData` records plus the number of items rejected and
why (for OTLP's partial success). Protobuf bodies are parsed with the official
``opentelemetry-proto`` messages; JSON bodies follow the OTLP/JSON encoding (hex ids,
integers as strings).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from collector.decode import json_value
from collector.decode.otlp_json import any_value as json_any_value
from collector.decode.otlp_json import attributes as json_attributes
from collector.decode.otlp_json import spans_from_request, time_ns
from collector.decode.wire import Origin
from collector.errors import InputError
from collector.model import MAX_TIME_NS, Issue, LogData, SpanData, gen_ai_events

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_STATUS = {0: "unset", 1: "ok", 2: "error"}


@dataclass
class Decoded:
    """What one export request held."""

    spans: list[SpanData] = field(default_factory=list)
    logs: list[LogData] = field(default_factory=list)
    rejected: int = 0
    issues: list[Issue] = field(default_factory=list)

    def rejection_message(self) -> str:
        return "; ".join(i.message for i in self.issues if i.level == "error")[:2000]


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def _attrs(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in items:
        out[kv.key] = _value(kv.value)
    return out


def _rejection(span: Any, ri: int, si: int, pi: int, source: str) -> Issue | None:
    """Why the store cannot hold ``span`` (``resource_spans[ri].scope_spans[si].spans[pi]``), if it cannot."""
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        return Issue(
            source,
            f"resource_spans[{ri}].scope_spans[{si}].spans[{pi}] has a trace_id of "
            f"{len(span.trace_id)} bytes and a span_id of {len(span.span_id)} bytes "
            "(OTLP requires 16 and 8); span rejected",
            level="error",
        )
    if max(span.start_time_unix_nano, span.end_time_unix_nano) > MAX_TIME_NS:
        return Issue(
            source,
            f"resource_spans[{ri}].scope_spans[{si}].spans[{pi}] has a start or end time past "
            f"{MAX_TIME_NS} ns (year 2262), the latest the store holds; span rejected",
            level="error",
        )
    return None


def _storable(
    req: ExportTraceServiceRequest, source: str, decoded: Decoded, origin: Origin = (0, 0, 0)
) -> Iterator[tuple[int, Any, Any]]:
    """(index of its resource spans, they, span) of each span the store can hold; the others are
    counted in ``decoded``. ``origin``: where the request's first resource spans, scope spans and
    span are in the whole one, when it is a piece of one (:mod:`collector.decode.wire`)."""
    r0, s0, p0 = origin
    for ri, rs in enumerate(req.resource_spans, r0):
        for si, ss in enumerate(rs.scope_spans, s0 if ri == r0 else 0):
            for pi, span in enumerate(ss.spans, p0 if ri == r0 and si == s0 else 0):
                problem = _rejection(span, ri, si, pi, source)
                if problem is None:
                    yield ri, rs, span
                else:
                    decoded.rejected += 1
                    decoded.issues.append(problem)


def _spans_from_proto(
    req: ExportTraceServiceRequest, source: str, decoded: Decoded, origin: Origin
) -> Iterator[SpanData]:
    resources: dict[int, dict[str, Any]] = {}
    for ri, rs, span in _storable(req, source, decoded, origin):
        resource = resources.get(ri)
        if resource is None:
            resource = resources[ri] = _attrs(rs.resource.attributes)
        yield SpanData(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex() if len(span.parent_span_id) == 8 else None,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano or span.start_time_unix_nano,
            attributes=_attrs(span.attributes),
            resource=resource,
            status_code=_STATUS.get(span.status.code, "unset"),
            status_message=span.status.message or None,
            dropped_attributes=span.dropped_attributes_count,
            source=source,
            events=gen_ai_events((e.name, _attrs(e.attributes)) for e in span.events if e.name.startswith("gen_ai."))
            if span.events
            else (),
        )


def decode_traces(body: bytes, content_type: str, source: str, origin: Origin = (0, 0, 0)) -> Decoded:
    """Decode an ``ExportTraceServiceRequest`` (``origin``: where a protobuf piece of a larger
    one starts in it, for the places problems are reported at).

    Raises:
        InputError: the body is not a decodable request of that content type.
    """
    decoded = Decoded()
    if content_type == PROTOBUF:
        try:
            req = ExportTraceServiceRequest.FromString(body)
        except DecodeError as e:
            raise InputError(f"body is not a protobuf ExportTraceServiceRequest ({e})") from e
        decoded.spans = list(_spans_from_proto(req, source, decoded, origin))
        return decoded
    doc = _json_body(body)
    spans = list(spans_from_request(doc, source, decoded.issues))
    decoded.rejected = sum(1 for i in decoded.issues if i.level == "error")
    decoded.spans = spans
    return decoded


def check_traces(body: bytes, content_type: str, source: str) -> Decoded:
    """What :func:`decode_traces` rejects of a request, and why, without reading its spans
    (the receiver answers with it and measures the spans later, elsewhere): a protobuf body is
    parsed and each span's ids and times checked; a JSON body is decoded, which is its check.

    Raises:
        InputError: the body is not a decodable request of that content type.
    """
    return _check(body, content_type, source, ExportTraceServiceRequest, _storable, decode_traces)


def _check(
    body: bytes,
    content_type: str,
    source: str,
    message: Any,
    storable: Callable[[Any, str, Decoded], Iterator[Any]],
    decode: Callable[[bytes, str, str], Decoded],
) -> Decoded:
    if content_type != PROTOBUF:
        decoded = decode(body, content_type, source)
        return Decoded(rejected=decoded.rejected, issues=decoded.issues)
    try:
        req = message.FromString(body)
    except DecodeError as e:
        raise InputError(f"body is not a protobuf {message.__name__} ({e})") from e
    checked = Decoded()
    for _ in storable(req, source, checked):
        pass
    return checked


def _json_body(body: bytes) -> Any:
    try:
        doc = json_value.loads(body.decode("utf-8"))  # OTLP/JSON is UTF-8; json.loads(bytes) would guess
    except UnicodeDecodeError as e:
        raise InputError(f"JSON body is not valid UTF-8 (first bad byte at offset {e.start})") from e
    except json.JSONDecodeError as e:
        raise InputError(f"body is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    except RecursionError as e:
        raise InputError("JSON body is nested too deeply to parse") from e
    except ValueError as e:  # e.g. an integer literal longer than Python converts (4300 digits)
        raise InputError(f"body is not valid JSON ({e})") from e
    if not isinstance(doc, dict):
        raise InputError(f"JSON body must be an object, got {type(doc).__name__}")
    return doc


def _storable_records(req: ExportLogsServiceRequest, source: str, decoded: Decoded) -> Iterator[tuple[int, Any, Any]]:
    """(index of its resource logs, they, record) of each log record the store can hold; the
    others are counted in ``decoded``."""
    for ri, rl in enumerate(req.resource_logs):
        for sl in rl.scope_logs:
            for rec in sl.log_records:
                if max(rec.time_unix_nano, rec.observed_time_unix_nano) <= MAX_TIME_NS:
                    yield ri, rl, rec
                    continue
                decoded.rejected += 1
                decoded.issues.append(
                    Issue(
                        source,
                        f"a log record's time is past {MAX_TIME_NS} ns (year 2262), the latest the store holds; rejected",
                        level="error",
                    )
                )


def check_logs(body: bytes, content_type: str, source: str) -> Decoded:
    """What :func:`decode_logs` rejects of a request, and why, without reading its records (as
    :func:`check_traces` for spans).

    Raises:
        InputError: the body is not a decodable request of that content type.
    """
    return _check(body, content_type, source, ExportLogsServiceRequest, _storable_records, decode_logs)


def decode_logs(body: bytes, content_type: str, source: str) -> Decoded:
    """Decode an ``ExportLogsServiceRequest`` into :class:`LogData` records.

    Raises:
        InputError: the body is not a decodable request of that content type.
    """
    decoded = Decoded()
    if content_type == PROTOBUF:
        try:
            req = ExportLogsServiceRequest.FromString(body)
        except DecodeError as e:
            raise InputError(f"body is not a protobuf ExportLogsServiceRequest ({e})") from e
        resources: dict[int, dict[str, Any]] = {}
        for ri, rl, rec in _storable_records(req, source, decoded):
            resource = resources.get(ri)
            if resource is None:
                resource = resources[ri] = _attrs(rl.resource.attributes)
            decoded.logs.append(
                LogData(
                    time_ns=rec.time_unix_nano or rec.observed_time_unix_nano,
                    attributes=_attrs(rec.attributes),
                    body=_value(rec.body),
                    event_name=rec.event_name or None,
                    trace_id=rec.trace_id.hex() if len(rec.trace_id) == 16 else None,
                    span_id=rec.span_id.hex() if len(rec.span_id) == 8 else None,
                    resource=resource,
                    source=source,
                )
            )
        return decoded
    doc = _json_body(body)
    if "resourceLogs" not in doc:
        raise InputError("JSON body is not an OTLP ExportLogsServiceRequest (no 'resourceLogs' key)")
    for ri, rl in enumerate(_json_list(doc.get("resourceLogs"), "resourceLogs", source, decoded)):
        try:
            resource = json_attributes((rl.get("resource") or {}).get("attributes"))
        except _READ_ERRORS:
            resource = {}
        scopes = _json_list(rl.get("scopeLogs"), f"resourceLogs[{ri}].scopeLogs", source, decoded)
        for si, sl in enumerate(scopes):
            where = f"resourceLogs[{ri}].scopeLogs[{si}].logRecords"
            for li, rec in enumerate(_json_list(sl.get("logRecords"), where, source, decoded)):
                try:
                    trace_id = rec.get("traceId") or None
                    span_id = rec.get("spanId") or None
                    decoded.logs.append(
                        LogData(
                            time_ns=time_ns(
                                rec.get("timeUnixNano") or rec.get("observedTimeUnixNano") or 0, "timeUnixNano"
                            ),
                            attributes=json_attributes(rec.get("attributes")),
                            body=json_any_value(rec["body"]) if rec.get("body") else None,
                            event_name=rec.get("eventName") or None,
                            trace_id=trace_id.lower() if trace_id else None,
                            span_id=span_id.lower() if span_id else None,
                            resource=resource,
                            source=source,
                        )
                    )
                except _READ_ERRORS as e:
                    decoded.rejected += 1
                    decoded.issues.append(
                        Issue(
                            source, f"resourceLogs[{ri}] logRecords[{li}] cannot be read ({e}); rejected", level="error"
                        )
                    )
    return decoded


_READ_ERRORS = (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError)


def _json_list(value: Any, where: str, source: str, decoded: Decoded) -> list[dict[str, Any]]:
    """The objects of a JSON list; anything else is rejected with a message."""
    if not value:
        return []
    if not isinstance(value, list):
        decoded.rejected += 1
        decoded.issues.append(
            Issue(source, f"{where} must be a list, got {type(value).__name__}; rejected", level="error")
        )
        return []
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            out.append(item)
        else:
            decoded.rejected += 1
            decoded.issues.append(
                Issue(source, f"{where}[{i}] must be an object, got {type(item).__name__}; rejected", level="error")
            )
    return out
