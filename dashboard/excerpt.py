"""Excerpts of large payloads for the replay: the parts around retained ranges, marked.

A raw result can be megabytes; the page shows each retained range (long ones by their
ends, the middle folded and counted as retained), some context on each side, and one line
per gap saying how many bytes it skips and why.
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

FOLD_EXPAND_BYTES = 64_000
"""A folded retained stretch up to this size can be expanded in place; a longer one is read
with the page's "show the whole stored raw payload" switch."""


@dataclass(frozen=True)
class Piece:
    """A run of the raw payload to show, or a gap to say we skipped."""

    start: int
    end: int
    kind: str  # "retained" | "retained_fold" | "context" | "gap" | "more" | "not_stored"
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


def _merged(ranges: list[list[int]] | None, total: int) -> list[tuple[int, int]]:
    """The retained ranges clipped to the payload, sorted, overlapping and touching ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted((max(0, int(s)), min(total, int(e))) for s, e in ranges or []):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _fold(payload: Payload, start: int, end: int) -> Piece:
    """The folded middle of a long retained stretch, with its text when it is stored and short
    enough to expand in place."""
    data = _slice(payload, start, end) if end - start <= FOLD_EXPAND_BYTES else None
    return Piece(start, end, "retained_fold", data.decode("utf-8", errors="replace") if data is not None else "")


def _retained(payload: Payload, start: int, end: int) -> list[Piece]:
    """A retained stretch: whole, or (when long) its two ends around a fold that says how much is in between."""
    if end - start <= 2 * RANGE_END_BYTES:
        return _pieces_of(payload, start, end, "retained")
    return [
        *_pieces_of(payload, start, start + RANGE_END_BYTES, "retained"),
        _fold(payload, start + RANGE_END_BYTES, end - RANGE_END_BYTES),
        *_pieces_of(payload, end - RANGE_END_BYTES, end, "retained"),
    ]


def excerpt(payload: Payload, ranges: list[list[int]] | None) -> list[Piece]:
    """Pieces that cover the raw payload once, in order, from one retained mask.

    Every byte is retained (marked; a long stretch folded, its middle counted as retained),
    shown as context (up to :data:`CONTEXT_BYTES` beside a retained range, never a retained
    byte), a gap ("not retained"), or not stored (outside the stored head and tail). With
    no ranges (``None``: nothing was cut, or nothing is known) the head is previewed and the
    rest is counted as "not shown", not as "not retained".
    """
    total = payload.total_bytes
    kept = _merged(ranges, total)
    if not kept:
        end = min(total, UNRETAINED_PREVIEW_BYTES)
        preview = _pieces_of(payload, 0, end, "context")
        if end < total:
            preview.append(Piece(end, total, "more" if ranges is None else "gap"))
        return preview
    pieces: list[Piece] = []
    cursor = 0
    for n, (start, end) in enumerate(kept):
        lead = max(cursor, start - CONTEXT_BYTES)
        if lead > cursor:
            pieces.append(Piece(cursor, lead, "gap"))
        pieces += _pieces_of(payload, lead, start, "context") if start > lead else []
        pieces += _retained(payload, start, end)
        following = kept[n + 1][0] if n + 1 < len(kept) else total
        trail = min(end + CONTEXT_BYTES, following)
        pieces += _pieces_of(payload, end, trail, "context") if trail > end else []
        cursor = max(end, trail)
    if cursor < total:
        pieces.append(Piece(cursor, total, "gap"))
    return pieces


def _mark(p: Piece) -> str:
    # data-start/data-end: the byte offsets in the raw, so a reader (or a test) can check the mark
    return (f'<mark data-start="{p.start}" data-end="{p.end}" title="retained bytes {p.start:,}-{p.end:,}" '
            f'style="background:#c6f6c6">{html.escape(p.text)}</mark>')  # fmt: skip


def to_html(pieces: list[Piece]) -> str:
    """Escaped HTML: retained text marked, gaps as one line each."""
    out = ['<div class="tm-excerpt" style="font-family:monospace;font-size:12px;white-space:pre-wrap;'
           'word-break:break-all;max-height:600px;overflow:auto;border:1px solid #ddd;padding:6px">']  # fmt: skip
    for p in pieces:
        if p.kind == "gap":
            out.append(f'<div class="tm-gap" style="color:#888;margin:4px 0">··· {p.end - p.start:,} bytes not '
                       "retained ···</div>")  # fmt: skip
        elif p.kind == "retained_fold":
            label = (f"··· {p.end - p.start:,} retained bytes not shown here (bytes {p.start:,}-{p.end:,}; "
                     "the model saw them) ···")  # fmt: skip
            body = (_mark(p) if p.text else '<div style="color:#888">too long to expand here: switch on '
                    "'show the whole stored raw payload' below</div>")  # fmt: skip
            out.append(f'<details class="tm-fold" style="color:#2a7d2a;margin:4px 0"><summary style="cursor:pointer">'
                       f"{label} (expand)</summary>{body}</details>")  # fmt: skip
        elif p.kind == "more":
            out.append(f'<div class="tm-more" style="color:#888;margin:4px 0">··· {p.end - p.start:,} more bytes '
                       "not shown here ···</div>")  # fmt: skip
        elif p.kind == "not_stored":
            out.append(
                f'<div style="color:#b00;margin:4px 0">··· bytes {p.start:,}-{p.end:,} not stored '
                "(over the payload cap) ···</div>"
            )
        elif p.kind == "retained":
            out.append(_mark(p))
        else:
            out.append(f'<span style="color:#555">{html.escape(p.text)}</span>')
    out.append("</div>")
    return "".join(out)


def stored_text(payload: Payload) -> str:
    """The stored payload as text; a head and tail stored apart are joined by a line saying so."""
    if not payload.cut:
        return (payload.head + payload.tail).decode("utf-8", errors="replace")
    omitted = payload.total_bytes - len(payload.head) - len(payload.tail)
    return (
        payload.head.decode("utf-8", errors="replace")
        + f"\n\n··· {omitted:,} bytes not stored (over the payload cap) ···\n\n"
        + payload.tail.decode("utf-8", errors="replace")
    )


VIEW_HEAD_CHARS = 16_000
VIEW_TAIL_CHARS = 4_000
"""A longer view is shown as its head and its tail, with the count of characters between them."""


def preview(text: str, head: int = VIEW_HEAD_CHARS, tail: int = VIEW_TAIL_CHARS) -> str:
    """``text`` itself, or its head and tail around a line counting what is between (cut at line
    ends near the bounds, so no row is split)."""
    if len(text) <= head + tail:
        return text
    cut_head = text.rfind("\n", head - 500, head)
    cut_head = head if cut_head < 0 else cut_head + 1
    cut_tail = text.find("\n", len(text) - tail, len(text) - tail + 500)
    cut_tail = len(text) - tail if cut_tail < 0 else cut_tail + 1
    hidden = cut_tail - cut_head
    return (
        f"{text[:cut_head]}\n··· {hidden:,} more characters (switch on 'show the whole view') ···\n\n{text[cut_tail:]}"
    )
