"""OTLP/JSON Lines read from disk a line at a time (plain, gzip- or zstd-compressed).

The OpenTelemetry Collector's file exporter writes one ``ExportTraceServiceRequest`` a line,
and its files grow to gigabytes. Read whole, a file's bytes, its text and its spans were in
memory together (512 MB at the peak for 65 MB of lines); read a line at a time, the spans come
as the file is read and the reader (``toolmeter ingest``) measures and writes them in parts.
Lines are cut at ``\\n`` only: U+2028, U+2029 and U+0085 may stand unescaped in a JSON string.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from typing import IO, cast

import zstandard

from collector.decode import json_value
from collector.decode.otlp_json import spans_from_request
from collector.errors import InputError
from collector.model import Issue, SpanData


def json_lines(path: str, issues: list[Issue]) -> Iterator[SpanData] | None:
    """The spans of ``path`` read a line at a time, when its first line is a whole OTLP/JSON
    request; None when it is not (another format, a request over several lines, a file that
    cannot be read: the whole-file reader says what it is). The first line is read once: a file
    of one long line (one request, as ``json.dump`` writes it) is not parsed twice."""
    try:
        f, _ = open_file(path)
    except OSError:
        return None
    n = offset = 0
    request: object = None
    try:
        for raw in f:
            n, offset = n + 1, offset + len(raw)
            if raw.strip():
                request = json_value.loads(raw.decode("utf-8"))
                break
    except (OSError, EOFError, ValueError, RecursionError, zstandard.ZstdError):  # ValueError: not JSON, not UTF-8
        request = None
    if not isinstance(request, dict) or "resourceSpans" not in request:
        f.close()
        return None
    return _spans(path, issues, f, (n, offset, request))


GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
"""The first bytes of a gzip member and of a zstd frame."""


def open_file(path: str) -> tuple[IO[bytes], bool]:
    """``path`` opened for reading its bytes, gzip or zstd undone as they are read (a zstd file
    may hold several frames, as the Collector's file exporter writes them); and whether it was."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic[:2] == GZIP_MAGIC:
        return cast(IO[bytes], gzip.open(path, "rb")), True
    if magic == ZSTD_MAGIC:
        raw = open(path, "rb")  # noqa: SIM115 (closed with the reader that wraps it: closefd)
        frames = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)
        return cast(IO[bytes], io.BufferedReader(frames)), True  # type: ignore[arg-type]
    return open(path, "rb"), False


def unzstd(data: bytes) -> bytes:
    """``data`` decompressed, every zstd frame of it.

    Raises:
        zstandard.ZstdError: it is not zstd, or is cut short.
    """
    return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read()


def _spans(path: str, issues: list[Issue], f: IO[bytes], read: tuple[int, int, object]) -> Iterator[SpanData]:
    """Every request's spans, named ``path:N`` by line, or ``path`` when the file holds one;
    ``read``: the first request's line number, the bytes up to its end, and it (parsed)."""
    first: tuple[int, object] | None = (read[0], read[2])
    offset = read[1]
    said_utf8 = False
    try:
        with f:
            for n, raw in enumerate(f, read[0] + 1):
                start, offset = offset, offset + len(raw)
                if not raw.strip():
                    continue
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    if not said_utf8:
                        issues.append(not_utf8(path, start + e.start))
                        said_utf8 = True
                    line = raw.decode("utf-8", errors="replace")
                if first is not None:  # a second line: the file has several, each named by its number
                    yield from spans_from_request(first[1], f"{path}:{first[0]}", issues)
                    first = None
                yield from line_spans(line, n, path, issues)
    except (OSError, EOFError, zstandard.ZstdError) as e:
        raise InputError(f"{path}: cannot be read to its end ({e})") from e
    if first is not None:  # the only request: named by the file, as a whole document is
        yield from spans_from_request(first[1], path, issues)


def line_spans(line: str, n: int, path: str, issues: list[Issue]) -> Iterator[SpanData]:
    """The spans of line ``n`` of a JSON Lines file, named ``path:n``; a line that is not JSON is
    one issue and skipped."""
    try:
        request = json_value.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        issues.append(Issue(path, f"line {n} is not valid JSON ({e}); that line was skipped", level="error"))
        return
    yield from spans_from_request(request, f"{path}:{n}", issues)


def not_utf8(path: str, offset: int) -> Issue:
    """The issue of a file whose bytes are not UTF-8 from ``offset`` (they are read as U+FFFD)."""
    return Issue(path, f"is not valid UTF-8 (first bad byte at offset {offset}); OTLP/JSON must be UTF-8. "
                       "Invalid bytes were replaced with U+FFFD and the rest was read.")  # fmt: skip


def text_lines(text: str) -> Iterator[str]:
    """The lines of a JSON Lines text, one at a time, cut at ``\\n`` only (see the module's docstring)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            end = len(text)
        yield text[start:end]
        start = end + 1
