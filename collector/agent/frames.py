"""Finished spans as plain values, framed for a pipe, and as OTLP protobuf.

The forwarding helper's wire (:mod:`collector.agent.relay`): on the agent's side
:func:`record` reads each span's fields once into plain values as the span ends, :func:`flatten`
lists a batch of them and :func:`frame` serialises the list (C, no Python per value); on the
helper's side :func:`unframe` reads them back and :func:`encode` turns them into the
``ExportTraceServiceRequest`` the SDK's own encoder would make of the same spans.
"""

from __future__ import annotations

import logging
import marshal
import operator
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope as PbScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.span import DEFAULT_TRACE_STATE, SpanContext
from opentelemetry.trace.status import Status

from collector.agent.forward import with_payload_attributes
from collector.dialects import attributes as A
from collector.measure.text import without_surrogates

logger = logging.getLogger("toolmeter")

HEADER = struct.Struct("<IB")
"""A frame's header: the body's length (4 bytes, little-endian) and how it is serialised
(:data:`MSGPACK` or :data:`MARSHAL`)."""
MSGPACK: Final = 1
"""The body is MessagePack (msgspec): about a third of marshal's time on a batch of tool spans
(0.5 against 1.8 us a span of 1 KB results here), and this runs on the agent's interpreter."""
MARSHAL: Final = 2
"""The body is marshal: for a batch MessagePack cannot carry (an integer beyond 64 bits, a lone
surrogate in a string, a type it does not know)."""


def _as_base(value: Any) -> Any:
    """A subclass of a JSON-like type MessagePack would refuse, as that type (the SDK takes a
    ``numpy.float64`` attribute, a float subclass, as a float); anything else is refused and the
    batch goes as marshal."""
    for base in (float, int, str, bytes):
        if isinstance(value, base):
            return base(value)  # type: ignore[arg-type]
    raise TypeError(f"{type(value).__name__} is not sent as MessagePack")


_msgpack = msgspec.msgpack.Encoder(enc_hook=_as_base).encode
_unpack = msgspec.msgpack.Decoder().decode


def _plain(attributes: Any) -> dict[str, Any]:
    """A span's, event's or resource's attributes as the dict behind them (immutable once the
    span ended), or a copy when the SDK stores them otherwise."""
    if attributes.__class__ is BoundedAttributes:  # the SDK's own: no getattr, no isinstance
        return attributes._dict  # type: ignore[no-any-return]
    backing = getattr(attributes, "_dict", None)
    if isinstance(backing, dict):
        return backing
    return dict(attributes or {})


_KIND = {id(kind): kind.value for kind in SpanKind}
_CODE = {id(code): code.value for code in StatusCode}
"""Keyed by identity: an enum member's own hash runs Python code, ``id`` does not."""

_SDK_FIELDS = operator.itemgetter(
    "_name", "_context", "_parent", "_kind", "_start_time", "_end_time", "_attributes", "_events", "_links",
    "_status", "_resource", "_instrumentation_scope",
)  # fmt: skip
"""What the SDK's ``ReadableSpan`` keeps in its instance dict, read in one C call: each of its
properties is a Python call, and some copy (``attributes``, ``events``)."""


def _read(span: ReadableSpan) -> tuple[Any, ...]:
    """A span's fields as :func:`flatten` takes them, through its public properties (a span that
    is not the SDK's own ``ReadableSpan``: a subclass, another SDK's)."""
    ctx = span.context
    parent = span.parent
    status = span.status
    state = ctx.trace_state if ctx else None
    bounded = getattr(span, "_attributes", None)
    events = getattr(span, "_events", None)
    if events is None:
        events = span.events
    links = getattr(span, "_links", None)
    if links is None:
        links = span.links
    return (
        span.name, (ctx.trace_id if ctx else 0).to_bytes(16, "big"), ctx.span_id if ctx else 0, _state_text(state) if state else None,
        parent.span_id if parent else None, bool(parent.is_remote) if parent else False,
        span.kind, span.start_time, span.end_time, bounded if bounded is not None else span.attributes,
        status.status_code, status.description,
        events, getattr(events, "dropped", 0), links, getattr(links, "dropped", 0),
        span.resource, span.instrumentation_scope,
    )  # fmt: skip


def _read_sdk(span: ReadableSpan) -> tuple[Any, ...]:
    """:func:`_read` of the SDK's own ``ReadableSpan``, from its instance dict and the tuple a
    ``SpanContext`` is: about a third of the time (this runs for every span, on the agent's
    interpreter)."""
    try:
        name, ctx, parent, kind, start, end, bounded, events, links, status, resource, scope = _SDK_FIELDS(
            span.__dict__
        )
    except KeyError:  # an SDK that keeps them otherwise
        return _read(span)
    if (
        ctx.__class__ is not SpanContext
        or status.__class__ is not Status
        or (parent is not None and parent.__class__ is not SpanContext)
    ):
        return _read(span)
    state = ctx[4]
    if events.__class__ is BoundedList:  # its own deque: its __len__ and __iter__ are Python calls
        events, dropped_events = events._dq, events.dropped  # type: ignore[attr-defined]
    else:
        dropped_events = getattr(events, "dropped", 0)
    if links.__class__ is BoundedList:
        links, dropped_links = links._dq, links.dropped  # type: ignore[attr-defined]
    else:
        dropped_links = getattr(links, "dropped", 0)
    return (
        name, ctx[0].to_bytes(16, "big"), ctx[1], None if state is DEFAULT_TRACE_STATE or not state else _state_text(state),
        parent[1] if parent is not None else None, bool(parent[2]) if parent is not None else False,
        kind, start, end, bounded, status._status_code, status._description,
        events, dropped_events, links, dropped_links, resource, scope,
    )  # fmt: skip


def _state_text(state: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in state.items())


FIELDS: Final = 19
"""Values a span takes in :func:`flatten`'s list (and in a :func:`record`)."""


def record(span: ReadableSpan, raw: str | bytes | None = None, view: str | bytes | None = None) -> tuple[Any, ...]:
    """A finished span as the :data:`FIELDS` plain values :func:`flatten` sends, but for the last
    two: its resource and scope objects, which :func:`flatten` numbers. Payloads parked by
    :func:`collector.record_tool_result` join its attributes as ``toolmeter.raw`` /
    ``toolmeter.view`` (of this copy only).

    Runs in ``on_end``, on the agent's thread, while the span is fresh in its cache (``on_end`` in
    forwarding mode: 1.8-1.9 us, ``benchmarks/bench_collector.py``): nothing here grows with the
    payload (the SDK's attribute dict is taken as it is, immutable once the span ended), and the
    span itself is released at once. Held
    until the worker sent it, a span kept about ten objects alive for the agent's garbage
    collector to walk, and the worker read it again from memory the agent had moved on from."""
    (name, trace_id, span_id, state, parent_id, parent_remote, kind, start, end, bounded, code, description,
     events, dropped_events, links, dropped_links, resource, scope) = _read_sdk(span) if span.__class__ is ReadableSpan else _read(span)  # fmt: skip
    attrs: Mapping[str, Any]
    if bounded.__class__ is BoundedAttributes:
        attrs, dropped = bounded._dict, bounded.dropped
    else:
        attrs, dropped = _plain(bounded), getattr(bounded, "dropped", 0)
    if raw is not None or view is not None:
        attrs = with_payload_attributes(attrs, raw, view)
    return (
        name, trace_id, span_id, state, parent_id, parent_remote, _KIND.get(id(kind), 0), start, end,
        attrs, dropped, _CODE.get(id(code), 0), description,
        [(e.name, e.timestamp, _plain(e.attributes), e.dropped_attributes) for e in events] if events else (),
        [(link.context.trace_id.to_bytes(16, "big"), link.context.span_id, bool(link.context.is_remote),
          _plain(link.attributes), link.dropped_attributes) for link in links] if links else (),
        dropped_events, dropped_links, resource, scope,
    )  # fmt: skip


def flatten(records: Iterable[tuple[Any, ...]]) -> tuple[list[Any], list[Any], list[Any]]:
    """(resources, scopes, values) for :func:`frame`: the :func:`record` of each span, one after
    the other in one list (:func:`records` groups them again), its resource and scope numbered.

    On the processor's worker thread, where its Python work is GIL time taken from the agent:
    one list, not a tuple a span, so nothing a span outlives this for the garbage collector."""
    resources: list[Any] = []
    scopes: list[Any] = []
    resource_index: dict[int, int] = {}
    scope_index: dict[int, int] = {}
    out: list[Any] = []
    extend = out.extend
    for rec in records:
        resource, scope = rec[17], rec[18]
        r = resource_index.get(id(resource))
        if r is None:
            r = resource_index[id(resource)] = len(resources)
            resources.append((_plain(resource.attributes), resource.schema_url or ""))
        s = scope_index.get(id(scope))
        if s is None:
            s = scope_index[id(scope)] = len(scopes)
            scopes.append(
                (scope.name, scope.version, scope.schema_url, _plain(scope.attributes)) if scope is not None else None
            )
        extend(rec)
        out[-2] = r
        out[-1] = s
    return resources, scopes, out


def frame(message: tuple[Any, ...]) -> tuple[bytes, bytes]:
    """The frame's header and body, written one after the other (a batch is megabytes: joined,
    they would be copied once more on the agent's interpreter)."""
    try:
        return _framed(_msgpack(message), MSGPACK)
    except (TypeError, ValueError, OverflowError):  # see MARSHAL; ValueError: a lone surrogate
        pass
    try:
        data = marshal.dumps(message)
    except ValueError:  # a value marshal does not know either (a custom SDK's attribute type): as text
        data = marshal.dumps(_as_text(message))
    return _framed(data, MARSHAL)


def _framed(data: bytes, kind: int) -> tuple[bytes, bytes]:
    return HEADER.pack(len(data), kind), data


def unframe(kind: int, data: bytes) -> Any:
    """The message a frame's body holds (sequences come back as lists from MessagePack)."""
    if kind == MSGPACK:
        return _unpack(data)
    if kind == MARSHAL:
        return marshal.loads(data)
    raise ValueError(f"unknown frame format {kind}: the helper and the agent run different versions of toolmeter")


def _as_text(value: Any) -> Any:
    if value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_text(v) for v in value) if isinstance(value, tuple) else [_as_text(v) for v in value]
    return str(value)


def records(values: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    """:func:`flatten`'s values, a tuple a span."""
    return zip(*[iter(values)] * FIELDS, strict=True)


def span_count(values: Sequence[Any]) -> int:
    """How many spans :func:`flatten`'s values hold."""
    return len(values) // FIELDS


def encode(resources: list[Any], scopes: list[Any], flat: list[Any]) -> bytes:
    """An OTLP ``ExportTraceServiceRequest`` of flattened spans, field for field what the SDK's
    encoder (``encode_spans``) makes of the same spans, in a quarter of its time: no SDK span
    is rebuilt and no value passes through a mapping proxy (a test holds the two equal)."""
    local, remote = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
    grouped: dict[int, dict[int, list[Any]]] = {}
    for (name, trace_id, span_id, trace_state, parent_id, parent_remote, kind, start, end, attrs, dropped,
         code, description, events, links, dropped_events, dropped_links, r, s) in records(flat):  # fmt: skip
        changes: list[str] = []
        span = PbSpan(
            trace_id=trace_id,
            span_id=span_id.to_bytes(8, "big"),
            trace_state=trace_state,
            parent_span_id=parent_id.to_bytes(8, "big") if parent_id is not None else b"",
            name=name,
            kind=kind + 1,  # OTLP counts SPAN_KIND_UNSPECIFIED as 0
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=_key_values(attrs, changes),
            events=[
                PbSpan.Event(name=n, time_unix_nano=t, attributes=_key_values(a, changes), dropped_attributes_count=d)
                for n, t, a, d in events
            ]
            or None,
            links=[
                PbSpan.Link(
                    trace_id=lt,
                    span_id=ls.to_bytes(8, "big"),
                    attributes=_key_values(a, changes),
                    dropped_attributes_count=d,
                    flags=local | (remote if lr else 0),
                )
                for lt, ls, lr, a, d in links
            ]
            or None,
            status=PbStatus(code=code, message=description),
            dropped_attributes_count=dropped,
            dropped_events_count=dropped_events,
            dropped_links_count=dropped_links,
            flags=local | (remote if parent_remote else 0),
        )
        if changes:  # said on the span, so the stored row says it (see _any_value)
            span.attributes.append(KeyValue(key=A.RELAY_CHANGED, value=AnyValue(string_value="; ".join(changes))))
        grouped.setdefault(r, {}).setdefault(s, []).append(span)
    out = []
    for r, by_scope in grouped.items():
        attrs, schema_url = resources[r]
        scope_spans = []
        for s, spans in by_scope.items():
            scope = scopes[s]
            scope_spans.append(
                ScopeSpans(
                    scope=PbScope(name=scope[0], version=scope[1], attributes=_key_values(scope[3]))
                    if scope is not None
                    else PbScope(),
                    spans=spans,
                    schema_url=(scope[2] or "") if scope is not None else "",
                )
            )
        out.append(
            ResourceSpans(
                resource=PbResource(attributes=_key_values(attrs)), scope_spans=scope_spans, schema_url=schema_url
            )
        )
    return bytes(ExportTraceServiceRequest(resource_spans=out).SerializeToString())


def _key_values(attrs: dict[str, Any] | None, changes: list[str] | None = None) -> list[Any]:
    """``attrs`` as OTLP key-values; what had to change to be sent is added to ``changes``."""
    if not attrs:
        return []
    out = []
    for key, value in attrs.items():
        changed: list[str] = []
        encoded = _any_value(value, changed)
        if changed and changes is not None:
            changes.append(f"{key}: {', '.join(changed)}")
        if encoded is not None:
            out.append(KeyValue(key=key, value=encoded))
    return out


def _any_value(value: Any, changed: list[str]) -> Any:
    """``value`` as an OTLP AnyValue; a value OTLP cannot carry is sent changed, and said in
    ``changed`` (it made the whole batch fail to encode, and the helper exit, before)."""
    t = value.__class__
    if t is str:
        try:
            return AnyValue(string_value=value)
        except UnicodeEncodeError:  # a lone surrogate: protobuf strings are UTF-8, which cannot hold one
            text, n = without_surrogates(value)
            changed.append(f"{n} lone surrogate(s) (not valid Unicode) sent as U+FFFD")
            _warn_once("a lone surrogate (not valid Unicode) sent as U+FFFD")
            return AnyValue(string_value=text)
    if t is bool:
        return AnyValue(bool_value=value)
    if t is int:
        try:
            return AnyValue(int_value=value)
        except ValueError:  # beyond OTLP's 64-bit integers
            changed.append("an integer beyond 64 bits sent as its decimal text")
            _warn_once(changed[-1])
            return AnyValue(string_value=str(value))
    if t is float:
        return AnyValue(double_value=value)
    if value is None:
        return AnyValue()
    if t is bytes:
        return AnyValue(bytes_value=value)
    if t is tuple or t is list:
        items = [_any_value(v, changed) for v in value]
        return AnyValue(array_value=ArrayValue(values=[v for v in items if v is not None]))
    if t is dict:
        inner = _key_values({str(k): v for k, v in value.items()}, changed)
        return AnyValue(kvlist_value=KeyValueList(values=inner))
    logger.warning("toolmeter relay: an attribute value of type %s cannot be sent; left out", t.__name__)
    return None


_warned: set[str] = set()


def _warn_once(what: str) -> None:
    """Say once per helper and kind of change (a fixed text: the set stays small), in its log,
    that an attribute value had to be changed to be sent (each span says which, and how many, in
    :data:`collector.dialects.attributes.RELAY_CHANGED`)."""
    if what not in _warned:
        _warned.add(what)
        logger.warning("toolmeter relay: an attribute value changed to be sent: %s", what)
