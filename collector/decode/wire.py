"""A large protobuf trace request cut into small ones along its own fields, without parsing it.

A trace file can be one ``ExportTraceServiceRequest`` (``TracesData``) of hundreds of MB: a
request body saved to disk, or a dump of a day. Parsed whole, every span of it is in memory as
a message and then as a record before the first is measured. The protobuf wire format lets the
request be walked by its tags and lengths instead: its ``resource_spans`` (field 1) are taken a
few MB at a time, and one larger than that is cut further, its ``scope_spans`` (field 2) and
their ``spans`` (field 2) taken a run at a time, each run re-wrapped with its resource's and its
scope's other fields. Every piece is itself a valid request, parsed by the official messages as
a whole one would be; the spans come out in the same order.

Each piece comes with its :data:`Origin`: where its first resource spans, scope spans and span
sit in the whole request, so that a problem with a span is reported by its place in the file.
"""

from __future__ import annotations

from collections.abc import Iterator

PIECE_BYTES = 4 * 2**20
"""About the size of a piece: the Collector's file exporter writes batches of a few MB, which
measure and write at the rate of the whole file without holding it (BENCHMARKS.md)."""

Origin = tuple[int, int, int]
"""The index of a piece's first ``resource_spans``, of that one's first ``scope_spans`` and of
that one's first span in the whole request."""

_LENGTH_DELIMITED = 2
_RESOURCE_SPANS = 1  # TracesData.resource_spans
_SCOPE_SPANS = 2  # ResourceSpans.scope_spans
_SPANS = 2  # ScopeSpans.spans


class WireError(ValueError):
    """The bytes are not a protobuf message: a field's tag or length is broken, or runs past the end."""

    def __init__(self, message: str, at: int) -> None:
        super().__init__(f"{message} at byte {at:,}")
        self.at = at


def request_pieces(data: bytes, limit: int = PIECE_BYTES) -> Iterator[tuple[bytes, Origin]]:
    """``data``, a protobuf ``TracesData`` / ``ExportTraceServiceRequest``, as requests of about
    ``limit`` bytes (a single span larger than that is a piece of its own), each with its origin.

    Raises:
        WireError: while walking, at the first field that is not well formed; the pieces before
            it were whole.
    """
    buf = memoryview(data)
    start = end = 0  # the run of whole resource spans (and any other fields between them) not yet given
    first = ri = -1
    try:
        for number, tag_at, value_at, field_end in _fields(buf, 0, len(buf)):
            if number != _RESOURCE_SPANS:
                continue
            ri += 1
            if field_end - tag_at > limit:
                if end > start:
                    yield bytes(buf[start:end]), (first, 0, 0)
                start = end = field_end
                yield from _resource_pieces(buf, value_at, field_end, ri, limit)
                continue
            if end > start and field_end - start > limit:
                yield bytes(buf[start:end]), (first, 0, 0)
                start = end
            if end == start:
                start, first = tag_at, ri
            end = field_end
    except WireError:  # the whole resource spans walked before a broken field are given first
        if end > start:
            yield bytes(buf[start:end]), (first, 0, 0)
        raise
    if end > start:
        yield bytes(buf[start:end]), (first, 0, 0)


def _resource_pieces(buf: memoryview, start: int, end: int, ri: int, limit: int) -> Iterator[tuple[bytes, Origin]]:
    """One ``resource_spans`` larger than a piece: its scope spans a run at a time, each run
    with the resource's other fields (its resource, its schema URL)."""
    head: list[memoryview] = []
    scopes: list[tuple[int, int, int]] = []
    for number, tag_at, value_at, field_end in _fields(buf, start, end):
        if number == _SCOPE_SPANS:
            scopes.append((tag_at, value_at, field_end))
        else:
            head.append(buf[tag_at:field_end])
    resource = b"".join(head)
    run: list[memoryview] = []
    size = first = 0
    for si, (tag_at, value_at, field_end) in enumerate(scopes):
        whole = field_end - tag_at
        if run and len(resource) + size + whole > limit:
            yield _request(resource + b"".join(run)), (ri, first, 0)
            run, size = [], 0
        if len(resource) + whole <= limit:
            if not run:
                first = si
            run.append(buf[tag_at:field_end])
            size += whole
            continue
        for scope, pi in _scope_pieces(buf, value_at, field_end, limit - len(resource)):
            yield _request(resource + _field(_SCOPE_SPANS, scope)), (ri, si, pi)
    if run:
        yield _request(resource + b"".join(run)), (ri, first, 0)


def _scope_pieces(buf: memoryview, start: int, end: int, limit: int) -> Iterator[tuple[bytes, int]]:
    """One ``scope_spans`` larger than a piece, as scope spans of a run of its spans each, with
    the index of the run's first span."""
    head: list[memoryview] = []
    spans: list[tuple[int, int]] = []
    for number, tag_at, _, field_end in _fields(buf, start, end):
        if number == _SPANS:
            spans.append((tag_at, field_end))
        else:
            head.append(buf[tag_at:field_end])
    scope = b"".join(head)
    run: list[memoryview] = []
    size = first = 0
    for pi, (tag_at, field_end) in enumerate(spans):
        if run and len(scope) + size + field_end - tag_at > limit:
            yield scope + b"".join(run), first
            run, size = [], 0
        if not run:
            first = pi
        run.append(buf[tag_at:field_end])
        size += field_end - tag_at
    if run:
        yield scope + b"".join(run), first


def _request(resource_spans: bytes) -> bytes:
    return _field(_RESOURCE_SPANS, resource_spans)


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return _varint_bytes(number << 3 | _LENGTH_DELIMITED) + _varint_bytes(len(value)) + value


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint(buf: memoryview, at: int, end: int) -> tuple[int, int]:
    """The varint at ``at`` and where the next value starts."""
    value = shift = 0
    start = at
    while at < end and shift < 64:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise WireError("a varint runs past its message or past ten bytes", start)


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, where its tag starts, where its value starts, where it ends) of each field
    of the message in ``buf[start:end]``; a length-delimited field's value is its bytes.

    Groups (wire types 3 and 4, deprecated since proto2) are not walked: no OTLP message has one,
    and the caller reads such a request whole.
    """
    at = start
    while at < end:
        tag_at = at
        tag, at = _varint(buf, at, end)
        number, kind = tag >> 3, tag & 7
        if number == 0:
            raise WireError("a field numbered 0", tag_at)
        if kind == _LENGTH_DELIMITED:
            length, at = _varint(buf, at, end)
            value_at, at = at, at + length
        elif kind == 0:
            value_at = at
            _, at = _varint(buf, at, end)
        elif kind in (1, 5):
            value_at, at = at, at + (8 if kind == 1 else 4)
        else:
            raise WireError(f"a field of wire type {kind}", tag_at)
        if at > end:
            raise WireError(f"field {number} runs past the end of its message", tag_at)
        yield number, tag_at, value_at, at
