"""Retention: which byte ranges of the raw result the model-facing view kept, and how it was cut.

Ranges are declared by the tool (then validated, :func:`clean_declared_ranges`) or inferred
by locating the view's pieces in the raw (:func:`infer_retained`). Offsets are bytes of the
raw's UTF-8, so they stay valid after redaction masks secrets with same-length text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from collector.model import Range

MIN_MATCH = 16
"""Shortest piece of the view that counts as copied from the raw."""

MAX_FAILED_SEARCHES = 4000
"""Bound on raw scans while inferring retained ranges (keeps a 100 MB raw fast)."""

ANCHOR_SIZES = (256, 64, MIN_MATCH)
"""Anchor lengths tried, longest first, when locating a piece of the view in the raw."""

OCCURRENCES_TRIED = 8
"""Occurrences of a repeated piece compared before the longest match is taken."""

MAX_INT64 = 2**63 - 1
"""Largest byte offset or count the store holds (its integer columns are signed 64-bit)."""


@dataclass(frozen=True)
class Retention:
    """Which parts of the raw the view kept."""

    ranges: tuple[Range, ...]
    retained_bytes: int
    view_bytes_from_raw: int
    """Bytes of the view that are copies of raw bytes (the rest is notes or rewrites)."""


def _match_length(raw: bytes, r: int, view: bytes, v: int) -> int:
    """Length of the common run of ``raw[r:]`` and ``view[v:]`` (binary search on slices)."""
    lo, hi = 0, min(len(raw) - r, len(view) - v)
    if raw[r : r + hi] == view[v : v + hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if raw[r : r + mid] == view[v : v + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _best_occurrence(raw: bytes, view: bytes, v: int, cursor: int) -> tuple[int, int]:
    """Where the view's text at ``v`` occurs in the raw, and how long the match runs.

    Repetitive text (logs, JSON rows) has the same 16 bytes on every line, so longer
    anchors are tried first (they usually reach a unique id), and among the first
    occurrences of an anchor the one whose match runs longest wins. Occurrences after
    ``cursor`` (the end of the previous match) are preferred: views keep raw order.
    """
    for size in ANCHOR_SIZES:
        if v + size > len(view) and size != MIN_MATCH:
            continue
        anchor = view[v : v + size]
        best, best_len = -1, 0
        for lo, hi in ((cursor, len(raw)), (0, min(cursor + size, len(raw)))):
            p = raw.find(anchor, lo, hi)
            tries = 0
            while p != -1 and tries < OCCURRENCES_TRIED:
                length = _match_length(raw, p, view, v)
                if length > best_len:
                    best, best_len = p, length
                tries += 1
                p = raw.find(anchor, p + 1, hi)
            if best != -1:
                return best, best_len
    return -1, 0


def infer_retained(raw: bytes, view: bytes) -> Retention:
    """Locate the view's pieces in the raw and return them as byte ranges of the raw, in view order.

    Each range is contiguous in both the raw and the view: two pieces that touch in the raw but
    have text between them in the view (a separator, a note) stay two ranges, so every range
    names bytes the model read in one run. ``retained_bytes`` counts the raw bytes covered once.

    Greedy: from each position of the view, take the longest run that also occurs in
    the raw (searching forward from the last match first, then from the start), keep
    runs of at least :data:`MIN_MATCH` bytes, and skip to the next line where nothing
    matches (truncation notes, separators, rewritten text).
    """
    if not raw or not view:
        return Retention((), 0, 0)
    pieces: list[Range] = []
    v = 0
    cursor = 0
    failed = 0
    copied = 0
    last_v_end = -1
    n_view = len(view)
    while v + MIN_MATCH <= n_view and failed < MAX_FAILED_SEARCHES:
        if pieces and raw[cursor : cursor + MIN_MATCH] == view[v : v + MIN_MATCH]:  # the view goes on
            p, length = cursor, _match_length(raw, cursor, view, v)
        else:
            p, length = _best_occurrence(raw, view, v, cursor)
        if p == -1:
            failed += 1
            nl = view.find(b"\n", v, v + MIN_MATCH * 8)
            v = nl + 1 if nl != -1 else v + MIN_MATCH
            continue
        if pieces and pieces[-1][1] == p and last_v_end == v:
            pieces[-1] = (pieces[-1][0], p + length)  # contiguous in both the raw and the view
        else:
            pieces.append((p, p + length))
        copied += length
        v += length
        last_v_end = v
        cursor = p + length
    union = merge_ranges(pieces)
    return Retention(tuple(pieces), sum(e - s for s, e in union), copied)


def merge_ranges(ranges: list[Range] | tuple[Range, ...]) -> list[Range]:
    """Sort and merge overlapping or touching ranges."""
    merged: list[Range] = []
    for s, e in sorted(ranges):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    return merged


def parse_ranges(text: str) -> tuple[Range, ...]:
    """Parse ``"0-4096,9000-9500"`` (or a JSON list of pairs) into ranges.

    Raises:
        ValueError: with the piece that is not a range.
    """
    text = text.strip()
    if not text:
        return ()
    if text.startswith("["):
        pairs = json.loads(text)
        return tuple((int(a), int(b)) for a, b in pairs)
    out: list[Range] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if not m:
            raise ValueError(f"{part!r} is not a byte range; write ranges as 'start-end,start-end'")
        out.append((int(m.group(1)), int(m.group(2))))
    return tuple(out)


def clean_declared_ranges(ranges: tuple[Range, ...], raw_len: int | None) -> tuple[list[Range], list[str]]:
    """Validate declared ranges: drop empty or reversed ones, clip to the raw, merge overlaps."""
    warnings: list[str] = []
    kept: list[Range] = []
    for s, e in ranges:
        if s < 0 or e <= s:
            warnings.append(f"retained range {s}-{e} is empty or reversed; ignored")
            continue
        if raw_len is not None and e > raw_len:
            warnings.append(f"retained range {s}-{e} ends past the raw result ({raw_len} bytes); clipped")
            e = raw_len
            if e <= s:
                continue
        elif e > MAX_INT64:  # size unknown: the store still needs 64-bit offsets
            warnings.append(f"retained range {s}-{e} ends past {MAX_INT64} bytes; clipped")
            e = MAX_INT64
            if e <= s:
                continue
        kept.append((s, e))
    merged = merge_ranges(kept)
    if len(merged) < len(kept):
        warnings.append("retained ranges overlap; merged")
    return merged, warnings


def truncation_kind(ranges: list[Range] | tuple[Range, ...], raw_len: int, from_raw_share: float) -> str:
    """Name how the view relates to the raw: head, tail, head_tail, ranges, rewritten."""
    if from_raw_share < 0.5:
        return "rewritten"  # extraction, summary, projection: mostly new text
    if not ranges:
        return "rewritten"
    starts_at_0 = ranges[0][0] == 0
    ends_at_end = ranges[-1][1] == raw_len
    if len(ranges) == 1:
        return "head" if starts_at_0 else "tail" if ends_at_end else "middle"
    if len(ranges) == 2 and starts_at_0 and ends_at_end:
        return "head_tail"
    return "ranges"
