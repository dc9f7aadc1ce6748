"""Shaping text: documents by head, tail, both or relevance; diagnostics by their error lines.

Every part left out is replaced by a marker that says which bytes (and for logs which
lines) are missing and the ``read_result`` call that returns them: a view that simply
stops reads as complete, and the model would reason as if it were.
"""

from __future__ import annotations

import re
from typing import Any

from collector.adapter import positions as S
from collector.adapter.handles import MAX_PAGE_BYTES, HandleStore, keep
from collector.adapter.policy import Policy, Scope
from collector.adapter.view import View, tokens
from collector.agent.record import utf8_len

# a line a diagnostic view keeps whatever its place (also what a what-if counts as lost)
ERROR_LINE = re.compile(r"(?i)\b(error|errors|fatal|critical|panic|exception|traceback|fail(ed|ure)?|denied|refused)\b"
                    r"|^[EF]\d{4} ")  # fmt: skip
_NUMBERS = re.compile(r"\d+")
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
MAX_LINE_CHARS = 400
"""A log line longer than this is shown cut (the marker on it says by how much)."""
_TERM = re.compile(r"\w{3,}")


def _fits_prefix(text: str, start: int, end: int, budget: int, backwards: bool = False) -> int:
    """The most characters of ``text[start:end]`` (from its start, or from its end when
    ``backwards``) whose exact count is within ``budget``, cut at a line end when one is near."""
    length = end - start

    def piece(c: int) -> str:
        return text[end - c : end] if backwards else text[start : start + c]

    if length == 0 or budget <= 0:
        return 0
    if tokens(piece(length)) <= budget:
        return length
    good, bad = 0, length
    probe = min(budget * 4, length - 1)
    while probe > good and tokens(piece(probe)) <= budget:  # doubling: probes stay near the answer
        good, probe = probe, min(probe * 2, length - 1)
    bad = probe if probe > good else bad
    while bad - good > 1:
        mid = (good + bad) // 2
        if tokens(piece(mid)) <= budget:
            good = mid
        else:
            bad = mid
    chosen = piece(good)
    if backwards:  # start at a line's beginning within the first fifth
        cut = chosen.find("\n", 0, max(good // 5, 1))
        return good - cut - 1 if cut != -1 else good
    cut = chosen.rfind("\n", good * 4 // 5)  # end at a line's end within the last fifth
    return cut + 1 if cut != -1 else good


def _marker(raw: str, handle: str, a: int, b: int, total: int, lines: tuple[int, int] | None = None) -> str:
    """The line that stands for the characters ``[a, b)`` of ``raw`` left out."""
    start, end = S.to_bytes(raw, [(a, b)])[0]
    where = f"lines {lines[0]:,}-{lines[1]:,}, " if lines else ""
    return (f"[... {where}bytes {start:,}-{end:,} of {total:,} not shown; read_result(handle='{handle}', "
            f"offset={start}, limit={min(end - start, MAX_PAGE_BYTES)}) returns them ...]\n")  # fmt: skip


def _assemble(raw: str, pieces: list[tuple[int, int]], handle: str, total: int) -> str:
    out: list[str] = []
    position = 0
    for a, b in pieces:
        if a > position:
            out.append(_marker(raw, handle, position, a, total))
        out.append(raw[a:b] if raw[a:b].endswith("\n") or b == len(raw) else raw[a:b] + "\n")
        position = b
    if position < len(raw):
        out.append(_marker(raw, handle, position, len(raw), total))
    return "".join(out)


def _relevant(raw: str, query: str, room: int) -> list[tuple[int, int]]:
    """Chunks of ~a few lines that mention the query's words most, in the text's order."""
    terms = {t.lower() for t in _TERM.findall(query)}
    chunks: list[tuple[int, int]] = []
    start = 0
    for m in _LINE.finditer(raw):
        if m.end() - start >= 400:
            chunks.append((start, m.end()))
            start = m.end()
    if start < len(raw):
        chunks.append((start, len(raw)))
    scored = []
    for i, (a, b) in enumerate(chunks):
        low = raw[a:b].lower()
        score = sum(low.count(t) for t in terms)
        if score:
            scored.append((-score, i))
    picked: list[tuple[int, int]] = []
    used = 0
    for _, i in sorted(scored):
        a, b = chunks[i]
        b = a + _fits_prefix(raw, a, b, room - used - 40) if tokens(raw[a:b]) + 40 > room - used else b
        if b <= a:
            break
        picked.append((a, b))
        used += tokens(raw[a:b]) + 40  # the marker before it
    return sorted(picked)


def _pieces(raw: str, policy: Policy, room: int, query: str | None) -> list[tuple[int, int]]:
    n = len(raw)
    strategy = policy.strategy
    if strategy == "relevant":
        picked = _relevant(raw, query or "", room)
        if picked:
            return picked
        strategy = "head_tail"  # nothing mentions the query: the ends say most
    if strategy == "head":
        return [(0, _fits_prefix(raw, 0, n, room))]
    if strategy == "tail":
        return [(n - _fits_prefix(raw, 0, n, room, backwards=True), n)]
    head = _fits_prefix(raw, 0, n, room * 2 // 3)
    tail = _fits_prefix(raw, head, n, room - tokens(raw[:head]), backwards=True)
    return [(0, head), (n - tail, n)] if tail else [(0, head)]


def shape_document(raw: str, policy: Policy, scope: Scope, store: HandleStore, query: str | None) -> View:
    handle = keep(store, scope, text=raw)  # stored even when it all fits: the handle is recorded
    if tokens(raw) <= policy.budget_tokens:
        return View(raw, False, [(0, len(raw))] if raw else [], handle=handle)
    total = utf8_len(raw)
    room = policy.budget_tokens - 2 * tokens(_marker(raw, handle, 0, len(raw), total))
    while True:
        pieces = [(a, b) for a, b in _pieces(raw, policy, max(room, 0), query) if b > a]
        text = _assemble(raw, pieces, handle, total)
        if tokens(text) <= policy.budget_tokens or not pieces:
            return View(text, True, pieces, handle=handle)
        room = int(room * 0.9)  # joins between pieces and markers cost a few tokens more


def _lines(raw: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _LINE.finditer(raw)]


def _shown_line(raw: str, a: int, b: int) -> tuple[str, int]:
    """A line as shown (cut at :data:`MAX_LINE_CHARS`) and where its shown part ends."""
    line = raw[a:b].rstrip("\n")
    if len(line) <= MAX_LINE_CHARS:
        return line, b
    return f"{line[:MAX_LINE_CHARS]} [line cut: {len(line) - MAX_LINE_CHARS:,} more characters]", a + MAX_LINE_CHARS


def shape_diagnostic(raw: str, policy: Policy, scope: Scope, store: HandleStore) -> View:
    """Distinct error lines (with how often each form occurs), then the first and last lines."""
    handle = keep(store, scope, text=raw)
    if tokens(raw) <= policy.budget_tokens:
        return View(raw, False, [(0, len(raw))] if raw else [], handle=handle)
    lines = _lines(raw)
    total = utf8_len(raw)
    groups: dict[str, list[int]] = {}
    for i, (a, b) in enumerate(lines):
        if ERROR_LINE.search(raw[a:b]):
            groups.setdefault(_NUMBERS.sub("#", raw[a:b].strip()), []).append(i)
    errors = sum(len(v) for v in groups.values())
    header = (f"[diagnostic: {len(lines):,} lines, {errors:,} error lines in {len(groups):,} distinct forms; "
              f"shown: the distinct error lines, then the first and last lines; full log: handle '{handle}']\n")  # fmt: skip
    room = policy.budget_tokens - tokens(header) - 2 * tokens(_marker(raw, handle, 0, len(raw), total, (1, 1))) - 8
    picked_errors, head, tail = _allocate(raw, lines, groups, room)
    while True:
        text, spans = _diagnostic_text(raw, lines, groups, picked_errors, head, tail, header, handle, total)
        if tokens(text) <= policy.budget_tokens or not (picked_errors or head or tail):
            return View(text, True, S.merged(spans, raw), handle=handle)
        # joins cost a few tokens more than the lines' own counts: give up the last line taken
        if tail:
            tail = tail[1:]
        elif head:
            head = head[:-1]
        else:
            picked_errors = picked_errors[:-1]


def _allocate(raw: str, lines: list[tuple[int, int]], groups: dict[str, list[int]],
              room: int) -> tuple[list[str], list[int], list[int]]:  # fmt: skip
    """Which error forms, head lines and tail lines fit ``room`` (by each line's own count)."""
    used = 0
    picked: list[str] = []
    for form, where in groups.items():  # first occurrence order
        a, b = lines[where[0]]
        cost = tokens(_shown_line(raw, a, b)[0]) + 8
        if used + cost > room // 2:
            break
        picked.append(form)
        used += cost
    head: list[int] = []
    tail: list[int] = []
    lo, hi = 0, len(lines) - 1
    turn = 0
    while lo <= hi:
        i = lo if turn % 2 == 0 else hi
        a, b = lines[i]
        cost = tokens(_shown_line(raw, a, b)[0]) + 1
        if used + cost > room:
            break
        used += cost
        if turn % 2 == 0:
            head.append(i)
            lo += 1
        else:
            tail.insert(0, i)
            hi -= 1
        turn += 1
    return picked, head, tail


def _diagnostic_text(raw: str, lines: list[tuple[int, int]], groups: dict[str, list[int]], picked: list[str],
                     head: list[int], tail: list[int], header: str, handle: str,
                     total: int) -> tuple[str, list[tuple[int, int]]]:  # fmt: skip
    out = [header]
    spans: list[tuple[int, int]] = []
    if picked:
        out.append("errors:\n")
        for form in picked:
            where = groups[form]
            a, b = lines[where[0]]
            shown, end = _shown_line(raw, a, b)
            times = f"  (x{len(where)})" if len(where) > 1 else ""
            out.append(f"  line {where[0] + 1:,}: {shown.strip()}{times}\n")
            spans.append((a, end))
    out.append("first lines:\n" if head else "")
    out += _collapsed(raw, lines, head, spans)
    last_shown = head[-1] if head else -1
    first_tail = tail[0] if tail else len(lines)
    if first_tail - last_shown > 1:
        a = lines[last_shown + 1][0]
        b = lines[first_tail - 1][1]
        out.append(_marker(raw, handle, a, b, total, (last_shown + 2, first_tail)))
    out.append("last lines:\n" if tail else "")
    out += _collapsed(raw, lines, tail, spans)
    return "".join(out), spans


def _collapsed(raw: str, lines: list[tuple[int, int]], chosen: list[int], spans: list[tuple[int, int]]) -> list[Any]:
    """The chosen lines, a run of identical ones as one line with its count."""
    out: list[str] = []
    previous: str | None = None
    repeats = 0
    for i in chosen:
        a, b = lines[i]
        shown, end = _shown_line(raw, a, b)
        spans.append((a, end))
        if shown == previous:
            repeats += 1
            continue
        if repeats:
            out[-1] = out[-1].rstrip("\n") + f"  (repeated {repeats + 1} times)\n"
        previous, repeats = shown, 0
        out.append(shown + "\n")
    if repeats:
        out[-1] = out[-1].rstrip("\n") + f"  (repeated {repeats + 1} times)\n"
    return out
