"""Read trace files into :class:`SpanData`: OTLP/JSON, JSON lines, ConsoleSpanExporter output, protobuf.

Accepted: one ``ExportTraceServiceRequest`` per file, or one request per line (JSON Lines,
as the OpenTelemetry Collector's file exporter writes), length-prefixed requests (its layout
for ``format: proto`` and for ``compression: zstd``), the SDK's ``ConsoleSpanExporter`` output,
or an OTLP protobuf request; any of them gzip- or zstd-compressed. A span that cannot be read
becomes an :class:`Issue` and the others are still read.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from itertools import islice

import zstandard

from collector.decode import json_value
from collector.decode.console import looks_like_console_json, read_console_spans
from collector.decode.framed import framed_spans
from collector.decode.lines import GZIP_MAGIC, ZSTD_MAGIC, json_lines, line_spans, not_utf8, text_lines, unzstd
from collector.decode.otlp_json import spans_from_request
from collector.decode.request import PROTOBUF, decode_traces
from collector.decode.wire import Origin, WireError, request_pieces
from collector.errors import InputError
from collector.model import Issue, SpanData


def read_file(path: str, issues: list[Issue]) -> Iterator[SpanData]:
    """Yield every span in a trace file: OTLP/JSON (one request, or one per line), the
    OpenTelemetry SDK's ``ConsoleSpanExporter`` output, or an OTLP protobuf
    ``ExportTraceServiceRequest``, one or length-prefixed ones; any of them gzip- or zstd-compressed.

    Raises:
        InputError: the file cannot be opened, decompressed or parsed at all.
    """
    streamed = json_lines(path, issues)  # JSON Lines, the collector's file exporter's: a line at a time
    if streamed is not None:
        yield from streamed
        return
    framed = framed_spans(path, issues)  # the file exporter's proto and zstd layout: a message at a time
    if framed is not None:
        yield from framed
        return
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read the file ({e.strerror})") from e
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise InputError(f"{path}: looks gzip-compressed but cannot be decompressed ({e})") from e
    elif data[:4] == ZSTD_MAGIC:
        try:
            data = unzstd(data)
        except zstandard.ZstdError as e:
            raise InputError(f"{path}: looks zstd-compressed but cannot be decompressed ({e})") from e
    if not data.strip():
        raise InputError(f"{path}: the file is empty")
    if data.lstrip()[:1] not in (b"{", b"["):
        yield from _read_protobuf(path, data, issues)
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        issues.append(not_utf8(path, e.start))
        text = data.decode("utf-8", errors="replace")
    if looks_like_console_json(text):
        yield from read_console_spans(text, path, issues)
        return
    try:
        request = json_value.loads(text)
        if isinstance(request, dict) and isinstance(request.get("spans"), list) and "resourceSpans" not in request:
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
        if len(list(islice(filter(str.strip, text_lines(text)), 2))) < 2:  # one line: the file's own error
            raise InputError(
                f"{path}: not valid JSON (line {whole_error.lineno}, column {whole_error.colno}: {whole_error.msg}). "
                "Expected an OTLP/JSON ExportTraceServiceRequest, one per line, or ConsoleSpanExporter output."
            ) from whole_error
    except RecursionError as e:
        raise InputError(f"{path}: JSON nested too deeply to parse") from e
    for n, line in enumerate(text_lines(text), 1):
        if line.strip():
            yield from line_spans(line, n, path, issues)


def _read_protobuf(path: str, data: bytes, issues: list[Issue]) -> Iterator[SpanData]:
    """The spans of one protobuf request, a piece of a few MB at a time (:mod:`collector.decode.wire`):
    a request of hundreds of MB is not held as messages and records all at once."""
    read = 0
    try:
        for piece, origin in request_pieces(data):
            try:
                decoded = decode_traces(piece, PROTOBUF, path, origin)
            except InputError as e:
                if not read:
                    break  # the first piece: the file is read whole below, for the parser's own verdict
                issues.append(Issue(path, f"the part from {_place(origin)} is not readable ({e}); it was skipped",
                                    level="error"))  # fmt: skip
                continue
            read += 1
            issues += decoded.issues
            yield from decoded.spans
    except WireError as e:
        if read:
            issues.append(Issue(path, f"the request is damaged or cut short ({e}); the rest of the file was not read",
                                level="error"))  # fmt: skip
    if read:
        return
    try:  # nothing read from its pieces: read whole, for the protobuf library's own verdict
        decoded = decode_traces(data, PROTOBUF, path)
    except InputError as e:
        raise InputError(
            f"{path}: neither JSON nor an OTLP protobuf ExportTraceServiceRequest ({e}). "
            "Accepted: OTLP/JSON, JSON lines, ConsoleSpanExporter output, OTLP protobuf (one request, or length-prefixed "
            "ones as the Collector's file exporter writes them); optionally gzip- or zstd-compressed."
        ) from e
    issues += decoded.issues
    yield from decoded.spans


def _place(origin: Origin) -> str:
    r, s, p = origin
    return f"resource_spans[{r}].scope_spans[{s}].spans[{p}]"
