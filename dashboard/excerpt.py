"""Excerpts of large payloads for the replay: the parts around retained ranges, marked.

A raw result can be megabytes; the page shows each retained range (long ones by their
ends), some context on each side, and one line per gap saying how many bytes it skips.
Offsets are byte offsets of the raw's UTF-8 bytes, as the collector records them. Pure
functions, no Streamlit.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from collector.store.payloads import Payload

CONTEXT_BYTES = 240
"""Bytes of unretained text shown on each side of a retained range."""

RANGE_END_BYTES = 1500
"""A retained range longer than twice this shows its first and last this-many bytes."""

UNRETAINED_PREVIEW_BYTES = 3000
"""With no retained ranges (nothing cut), this much of the head is shown."""


@dataclass(frozen=True)
class Piece:
    """A run of the raw payload to show, or a gap to say we skipped."""

    start: int
    end: int
    kind: str  # "retained" | "context" | "gap" | "not_stored"
    text: str = ""


def _slice(payload: Payload, start: int, end: int) -> bytes | None:
    """Bytes [start, end) of the original payload, or None when the store did not keep them."""
    head_end = len(payload.head)
    tail_start = payload.total_bytes - len(payload.tail)
    if end <= head_end:
        return payload.head[start:end]
    if start >= tail_start:
        return payload.tail[start - tail_start : end - tail_start]
    return None


def _pieces_of(payload: Payload, start: int, end: int, kind: str) -> list[Piece]:
    """[start, end) as pieces, splitting around the part the store did not keep."""
    head_end = len(payload.head)
    tail_start = payload.total_bytes - len(payload.tail)
    bounds = []
    if start < head_end:
        bounds.append((start, min(end, head_end), kind))
    if payload.cut and end > head_end and start < tail_start:
        bounds.append((max(start, head_end), min(end, tail_start), "not_stored"))
    if end > tail_start and payload.cut:
        bounds.append((max(start, tail_start), end, kind))
    out = []
    for s, e, k in bounds:
        if e <= s:
            continue
        data = _slice(payload, s, e) if k != "not_stored" else None
        out.append(Piece(s, e, k, data.decode("utf-8", errors="replace") if data is not None else ""))
    return out


def excerpt(payload: Payload, ranges: list[list[int]] | None) -> list[Piece]:
    """Pieces to show for a raw payload with its retained ranges."""
    total = payload.total_bytes
    windows: list[tuple[int, int, str]] = []
    for start, end in ranges or []:
        start, end = max(0, start), min(total, end)
        windows.append((max(0, start - CONTEXT_BYTES), start, "context"))
        if end - start > 2 * RANGE_END_BYTES:
            windows.append((start, start + RANGE_END_BYTES, "retained"))
            windows.append((end - RANGE_END_BYTES, end, "retained"))
        else:
            windows.append((start, end, "retained"))
        windows.append((end, min(total, end + CONTEXT_BYTES), "context"))
    if not windows:
        windows.append((0, min(total, UNRETAINED_PREVIEW_BYTES), "context"))
    # walk the windows in order; retained wins where a context window overlaps it
    windows.sort(key=lambda w: (w[0], w[2] != "retained"))
    pieces: list[Piece] = []
    cursor = 0
    for s, e, kind in windows:
        s = max(s, cursor)
        if e <= s:
            continue
        if s > cursor:
            pieces.append(Piece(cursor, s, "gap"))
        if kind == "context":  # don't let context swallow a retained window that starts inside it
            nxt = min((ws for ws, _, k in windows if k == "retained" and s < ws < e), default=e)
            e = nxt
        pieces += _pieces_of(payload, s, e, kind)
        cursor = e
    if cursor < total:
        pieces.append(Piece(cursor, total, "gap"))
    return pieces


def to_html(pieces: list[Piece]) -> str:
    """Escaped HTML: retained text marked, gaps as one line each."""
    out = ['<div class="tm-excerpt" style="font-family:monospace;font-size:12px;white-space:pre-wrap;'
           'word-break:break-all;max-height:600px;overflow:auto;border:1px solid #ddd;padding:6px">']  # fmt: skip
    for p in pieces:
        if p.kind == "gap":
            out.append(f'<div style="color:#888;margin:4px 0">··· {p.end - p.start:,} bytes not retained ···</div>')
        elif p.kind == "not_stored":
            out.append(
                f'<div style="color:#b00;margin:4px 0">··· bytes {p.start:,}-{p.end:,} not stored '
                "(over the payload cap) ···</div>"
            )
        elif p.kind == "retained":
            out.append(
                f'<mark title="retained bytes {p.start:,}-{p.end:,}" style="background:#c6f6c6">{html.escape(p.text)}</mark>'
            )
        else:
            out.append(f'<span style="color:#555">{html.escape(p.text)}</span>')
    out.append("</div>")
    return "".join(out)
