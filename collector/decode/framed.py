"""Length-prefixed OTLP messages, read from disk a message at a time: the OpenTelemetry
Collector's file exporter's layout for ``format: proto`` and for ``compression: zstd``.

The file exporter writes each request as a 4-byte big-endian length and then the message: a
protobuf ``TracesData`` (wire-identical to ``ExportTraceServiceRequest``) or, with compression
and ``format: json``, the OTLP/JSON text; with ``compression: zstd`` each message is a zstd
frame of its own. With its native-compression feature gate the whole file is one zstd stream
holding these messages (or JSON Lines, read by :mod:`collector.decode.lines`), which
:func:`collector.decode.lines.open_file` undoes as it reads.

A file is read this way when its first message is a request with spans; the messages after it
are named ``path:N`` (the Nth request) as JSON Lines are by line, and a message that cannot be
read is an issue of its own, the others still read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from typing import IO

import zstandard

from collector.decode.lines import ZSTD_MAGIC, open_file, unzstd
from collector.decode.request import JSON, PROTOBUF, Decoded, decode_traces
from collector.errors import InputError
from collector.model import Issue, SpanData

MAX_MESSAGE_BYTES = 0x0A00_0000 - 1
"""A longer first length is not this layout: a plain protobuf request's first byte is 0x0A (its
field 1), a JSON document's ``{`` or whitespace, and read as lengths those start at 160 MiB, where
the file exporter's messages are batches of a few MB. Read as one, a long plain request would
be read twice (here, then whole)."""


def framed_spans(path: str, issues: list[Issue]) -> Iterator[SpanData] | None:
    """The spans of ``path`` read a message at a time, when it starts with a length-prefixed
    request that holds spans (stored or rejected); None when it does not (the other readers say
    what it is).

    Raises:
        InputError: the file is length-prefixed messages, none of them a request toolmeter reads
            (the file exporter's snappy or lz4 compression).
    """
    try:
        f, compressed = open_file(path)
    except (OSError, zstandard.ZstdError):
        return None
    size = None if compressed else os.path.getsize(path)
    first: bytes | str | None = None
    try:
        first = _next(f, size)
        decoded = _decoded(first, path) if isinstance(first, bytes) else None
    except (OSError, EOFError, InputError, zstandard.ZstdError):  # not this layout, or unreadable
        decoded = None
    if decoded is not None and (decoded.spans or decoded.rejected):
        return _spans(path, issues, f, decoded, size)
    f.close()
    if isinstance(first, bytes) and first and size is not None and _tiles(path, size):
        raise InputError(
            f"{path}: length-prefixed messages (the OpenTelemetry Collector's file exporter's layout) whose first "
            "is no OTLP protobuf or OTLP/JSON request with spans, plain or zstd-compressed: snappy or lz4 "
            "compression? toolmeter reads the file exporter's files with `compression: zstd` or none"
        )
    return None


def _tiles(path: str, size: int) -> bool:
    """Whether the file is a run of 4-byte lengths each followed by that many bytes, to its end."""
    at = 0
    with open(path, "rb") as f:
        while at < size:
            f.seek(at)
            head = f.read(4)
            if len(head) < 4:
                return False
            at += 4 + int.from_bytes(head, "big")
    return at == size


def _next(f: IO[bytes], size: int | None) -> bytes | str | None:
    """The next message's bytes; None at the end of the file; a text saying how it was cut
    (``size``: the file's, when it is not compressed)."""
    head = f.read(4)
    if not head:
        return None
    if len(head) < 4:
        return f"the file ends inside a message's length ({len(head)} of 4 bytes)"
    n = int.from_bytes(head, "big")
    if size is not None and n > size - 4:
        return f"a message's length ({n:,} bytes) runs past the end of the file"
    if n > MAX_MESSAGE_BYTES:
        return f"a message's length ({n:,} bytes) is over {MAX_MESSAGE_BYTES // 2**20 + 1} MiB"
    body = f.read(n)
    if len(body) < n:
        return f"the file ends inside a message ({len(body):,} of {n:,} bytes)"
    return body


def _decoded(message: bytes, source: str) -> Decoded:
    """A message's request: zstd-compressed or not, protobuf or OTLP/JSON.

    Raises:
        InputError: it is neither (or does not decompress).
    """
    if message[:4] == ZSTD_MAGIC:
        try:
            message = unzstd(message)
        except zstandard.ZstdError as e:
            raise InputError(f"its zstd frame does not decompress ({e})") from e
    content_type = JSON if message.lstrip()[:1] == b"{" else PROTOBUF
    return decode_traces(message, content_type, source)


def _spans(path: str, issues: list[Issue], f: IO[bytes], first: Decoded, size: int | None) -> Iterator[SpanData]:
    """Every message's spans; the first message's are renamed ``path:1`` once a second one comes
    (a file of one message is named by the file, as a whole document is)."""
    n = 1
    pending: Decoded | None = first
    try:
        with f:
            while True:
                message = _next(f, size)
                if message is None:
                    break
                if pending is not None:
                    yield from _named(pending, f"{path}:1", issues)
                    pending = None
                n += 1
                if isinstance(message, str):
                    issues.append(Issue(path, f"message {n}: {message} (cut short?); the rest of the file was not read",
                                        level="error"))  # fmt: skip
                    break
                try:
                    decoded = _decoded(message, f"{path}:{n}")
                except InputError as e:
                    issues.append(Issue(path, f"message {n} is not an OTLP request ({e}); that message was skipped",
                                        level="error"))  # fmt: skip
                    continue
                yield from _named(decoded, f"{path}:{n}", issues)
    except (OSError, EOFError, zstandard.ZstdError) as e:
        raise InputError(f"{path}: cannot be read to its end ({e})") from e
    if pending is not None:
        yield from _named(pending, path, issues)


def _named(decoded: Decoded, source: str, issues: list[Issue]) -> Iterator[SpanData]:
    """The spans and issues of a decoded message, named ``source`` (the first message was
    decoded before the file was known to hold more)."""
    issues += [i if i.source == source else replace(i, source=source) for i in decoded.issues]
    for span in decoded.spans:
        yield span if span.source == source else replace(span, source=source)
