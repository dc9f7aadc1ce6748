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

from collections.abc import Iterable, Iterator

PIECE_BYTES = 4 * 2**20
"""About the size of a piece: the Collector's file exporter writes batches of a few MB, which
measure and write at the rate of the whole file without holding it (BENCHMARKS.md)."""

Origin = tuple[int, int, int]
"""The index of a piece's first ``resource_spans``, of that one's first ``scope_spans`` and of
that one's first span in the whole request."""

_LENGTH_DELIMITED = 2
_NESTED = (1, 2, 2)
"""The repeated field a piece is cut along, level by level: ``TracesData.resource_spans``,
``ResourceSpans.scope_spans``, ``ScopeSpans.spans``."""

_Field = tuple[int, int, int]
"""Where a field's tag starts, where its value starts, where it ends."""


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
    resources = ((t, v, e) for number, t, v, e in _fields(buf, 0, len(buf)) if number == _NESTED[0])
    for piece, place in _pieces(buf, b"", resources, 0, limit, ()):
        r, s, p = (*place, 0, 0)[:3]
        yield piece, (r, s, p)


def _pieces(
    buf: memoryview, head: bytes, fields: Iterable[_Field], level: int, budget: int, place: tuple[int, ...]
) -> Iterator[tuple[bytes, tuple[int, ...]]]:
    """A message's content as pieces: its other fields (``head``) with a run of its ``fields``
    (those of its repeated field at ``level``) at a time; a field larger than the budget alone
    is cut the same way along its own repeated field, and wrapped back. With each piece, the
    index of its first field at each level."""
    budget -= len(head)
    for i, run in _runs(fields, budget):
        tag_at, value_at, end = run[0]
        if len(run) > 1 or end - tag_at <= budget or level + 1 == len(_NESTED):
            yield head + b"".join(buf[t:e] for t, _, e in run), (*place, i)
            continue
        inner_head, inner = _split(buf, value_at, end, _NESTED[level + 1])
        for body, origin in _pieces(buf, inner_head, inner, level + 1, budget, (*place, i)):
            yield head + _field(_NESTED[level], body), origin


def _runs(fields: Iterable[_Field], budget: int) -> Iterator[tuple[int, list[_Field]]]:
    """Consecutive fields of at most ``budget`` bytes together (a larger one alone), with the
    index of each run's first; at a broken field, the run before it is given first."""
    run: list[_Field] = []
    size = first = 0
    try:
        for i, f in enumerate(fields):
            if run and size + f[2] - f[0] > budget:
                yield first, run
                run, size = [], 0
            if not run:
                first = i
            run.append(f)
            size += f[2] - f[0]
    except WireError:
        if run:
            yield first, run
        raise
    if run:
        yield first, run


def _split(buf: memoryview, start: int, end: int, repeated: int) -> tuple[bytes, list[_Field]]:
    """The fields of the message in ``buf[start:end]``: those other than ``repeated`` (tagged,
    joined), and where each ``repeated`` one is."""
    head: list[memoryview] = []
    fields: list[_Field] = []
    for number, tag_at, value_at, field_end in _fields(buf, start, end):
        if number == repeated:
            fields.append((tag_at, value_at, field_end))
        else:
            head.append(buf[tag_at:field_end])
    return b"".join(head), fields


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
