"""Where each part of a raw result sits in its text: the byte ranges a view declares it retained.

The retained ranges toolmeter stores are byte offsets into the raw result's UTF-8 text. The
adapter parses a JSON result once, element by element with the standard decoder, so it
knows the exact character span of every list item and every member of an object; the
spans are turned into byte offsets in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"

Span = tuple[int, int]


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def array_items(text: str, start: int) -> tuple[list[Any], list[Span], int]:
    """The values of the JSON array at ``start`` (its ``[``), their character spans, and the end.

    Raises:
        ValueError: ``text`` is not a JSON array there.
    """
    if text[start] != "[":
        raise ValueError(f"no JSON array at character {start}")
    values: list[Any] = []
    spans: list[Span] = []
    i = _skip(text, start + 1)
    if i < len(text) and text[i] == "]":
        return values, spans, i + 1
    while True:
        value, end = _DECODER.raw_decode(text, i)
        values.append(value)
        spans.append((i, end))
        i = _skip(text, end)
        if i >= len(text):
            raise ValueError("unterminated JSON array")
        if text[i] == "]":
            return values, spans, i + 1
        if text[i] != ",":
            raise ValueError(f"expected ',' or ']' at character {i}")
        i = _skip(text, i + 1)


def object_members(text: str, start: int) -> tuple[dict[str, Any], dict[str, Span], int]:
    """The members of the JSON object at ``start``, each member's span (key through value), and the end.

    Raises:
        ValueError: ``text`` is not a JSON object there.
    """
    if text[start] != "{":
        raise ValueError(f"no JSON object at character {start}")
    values: dict[str, Any] = {}
    spans: dict[str, Span] = {}
    i = _skip(text, start + 1)
    if i < len(text) and text[i] == "}":
        return values, spans, i + 1
    while True:
        key, after_key = _DECODER.raw_decode(text, i)
        if not isinstance(key, str):
            raise ValueError(f"object key expected at character {i}")
        colon = _skip(text, after_key)
        if text[colon] != ":":
            raise ValueError(f"expected ':' at character {colon}")
        value_start = _skip(text, colon + 1)
        value, end = _DECODER.raw_decode(text, value_start)
        values[key] = value
        spans[key] = (i, end)
        i = _skip(text, end)
        if i >= len(text):
            raise ValueError("unterminated JSON object")
        if text[i] == "}":
            return values, spans, i + 1
        if text[i] != ",":
            raise ValueError(f"expected ',' or '}}' at character {i}")
        i = _skip(text, i + 1)


def value_start(text: str, member: Span) -> int:
    """Where the value of an object member (its span from :func:`object_members`) begins."""
    _, after_key = _DECODER.raw_decode(text, member[0])
    return _skip(text, text.index(":", after_key) + 1)


def merged(spans: Iterable[Span], text: str) -> list[Span]:
    """Sorted spans, joined where only separators (commas, white space) lie between two."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and (start <= out[-1][1] or not text[out[-1][1] : start].strip(_SPACE + ",")):
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def to_bytes(text: str, spans: list[Span]) -> list[Span]:
    """Character spans of ``text`` as UTF-8 byte spans."""
    if text.isascii():
        return list(spans)
    cuts = sorted({p for span in spans for p in span})
    offsets: dict[int, int] = {}
    position = count = 0
    for cut in cuts:
        count += len(text[position:cut].encode("utf-8", errors="surrogatepass"))
        offsets[cut] = count
        position = cut
    return [(offsets[s], offsets[e]) for s, e in spans]
