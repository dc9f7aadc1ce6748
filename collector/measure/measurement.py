"""Measure one tool call: pure functions from a :class:`ToolCall` to a row of figures.

Everything here works on plain values (text, bytes, numbers), never on spans or
protobuf messages, so it is the same for the in-process processor and for file ingest.

What is measured, and how:

* bytes: UTF-8 bytes of the raw result and of the model-facing view;
* tokens: exact tiktoken counts (see :mod:`collector.measure.tokens`);
* truncated: declared by the tool, or inferred when the view differs from the raw;
* retained ranges: declared byte ranges of the raw, or inferred by locating the
  view's pieces in the raw (:func:`infer_retained`);
* shape: declared, or inferred (:func:`infer_shape`);
* schema fingerprint: key paths and types of JSON results (:func:`schema_of`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from collector.measure.tokens import TokenCounter
from collector.model import Range, Source, ToolCall

MIN_MATCH = 16
"""Shortest piece of the view that counts as copied from the raw."""

MAX_FAILED_SEARCHES = 4000
"""Bound on raw scans while inferring retained ranges (keeps a 100 MB raw fast)."""

ANCHOR_SIZES = (256, 64, MIN_MATCH)
"""Anchor lengths tried, longest first, when locating a piece of the view in the raw."""

OCCURRENCES_TRIED = 8
"""Occurrences of a repeated piece compared before the longest match is taken."""

MAX_JSON_BYTES = 64 * 1024 * 1024
"""Larger JSON results are not parsed for shape and fingerprint (said in a warning)."""

MAX_SCHEMA_NODES = 2_000_000
"""Fingerprints walk at most this many JSON values (said in a warning when hit)."""

MAX_INT64 = 2**63 - 1
"""Largest byte offset or count the store holds (its integer columns are signed 64-bit)."""

_DECLARED_MARKERS = (
    re.compile(rb"\.\.\. \[truncated: [\d,]+ chars removed\] \.\.\."),  # Strands' head/tail cut
)
"""Explicit truncation notes that frameworks write into the view: a view carrying one was cut
by its framework, which is read as declared truncation."""


@dataclass(frozen=True)
class Retention:
    """Which parts of the raw the view kept."""

    ranges: tuple[Range, ...]
    retained_bytes: int
    view_bytes_from_raw: int
    """Bytes of the view that are copies of raw bytes (the rest is notes or rewrites)."""


def to_text(value: str | bytes, what: str) -> tuple[str, bytes, list[str]]:
    """Return ``value`` as text and as UTF-8 bytes, with warnings about bad bytes."""
    warnings: list[str] = []
    if isinstance(value, bytes):
        data = value
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            text = data.decode("utf-8", errors="replace")
            warnings.append(
                f"{what} is not valid UTF-8 (first bad byte at offset {e.start}); bytes are measured "
                "as received, tokens after replacing invalid bytes with U+FFFD"
            )
        if b"\x00" in data[:8192]:
            warnings.append(f"{what} looks binary (NUL bytes); tokens count its text decoding")
        return text, data, warnings
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        data = value.encode("utf-8", errors="surrogatepass")
        warnings.append(f"{what} holds lone surrogates (not valid Unicode); measured with surrogatepass")
    return value, data, warnings


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many there were.

    JSON allows escapes such as ``\\ud800`` that decode to text no UTF-8 encoder (and so
    no store column) accepts; payloads are measured as they are, names and ids cleaned.
    """
    if text.isascii():
        return text, 0
    return _SURROGATE.subn("\ufffd", text)


# --- retained ranges ------------------------------------------------------------------


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


# --- shape and schema --------------------------------------------------------------------

_LOG_LINE = re.compile(
    r"^\s*(\[?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|[IWEF]\d{4} |\{\"(ts|time|timestamp|level)\""
    r"|(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\b|Traceback|\s+at |\s+File \"|[A-Z][a-z]{2} +\d+ \d{2}:)"
)
_LIST_KEYS = ("items", "data", "results", "rows", "records", "entries", "hits", "issues", "orders", "values")


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parse ``text`` as JSON when it looks like JSON; return (value, problem)."""
    stripped = text.lstrip()[:1]
    if stripped not in ("{", "["):
        return None, None
    if len(text) > MAX_JSON_BYTES:
        return None, f"JSON result over {MAX_JSON_BYTES // (1024 * 1024)} MiB is not parsed; no shape or fingerprint"
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "JSON result is nested deeper than the parser allows; shape and fingerprint not computed"
    except ValueError:
        return None, None  # text that merely starts with a bracket


def infer_shape(text: str, parsed: Any) -> str:
    """Classify a result as list, record, document or diagnostic."""
    if isinstance(parsed, list):
        return "list"
    if isinstance(parsed, dict):
        if parsed.get("kind") == "List" or any(
            isinstance(parsed.get(k), list) and len(parsed[k]) > 1 for k in _LIST_KEYS
        ):
            return "list"
        return "record"
    head = text[:65536]
    low = head[:2048].lower()
    if "<html" in low or "<!doctype" in low or head.count("<div") > 5:
        return "document"
    lines = [ln for ln in head.splitlines() if ln.strip()][:400]
    if not lines:
        return "document"
    log_like = sum(1 for ln in lines if _LOG_LINE.match(ln))
    if log_like >= max(3, len(lines) * 0.3):
        return "diagnostic"
    # a table (kubectl get, ps, SQL clients): an upper-case header among the first lines
    for i, line in enumerate(lines[:5]):
        header = [h for h in re.split(r"\s{2,}|\t", line.strip()) if h]
        if (
            len(header) >= 3
            and len(lines) - i >= 3
            and all(h.replace("-", "").replace("_", "").isupper() for h in header)
        ):
            return "list"
    return "document"


_DYNAMIC_KEY = re.compile(r"^(\d+|[0-9a-f]{8}-[0-9a-f-]{27,}|[0-9a-f]{12,})$", re.I)
_key_names: dict[str, str] = {}
"""Memo of key -> path component: rows of a list repeat the same keys thousands of times."""


def _key_name(key: str) -> str:
    name = _key_names.get(key)
    if name is None:
        name = "*" if _DYNAMIC_KEY.match(key) else key
        if len(_key_names) < 65536:  # bounded: id-like keys are unbounded in number
            _key_names[key] = name
    return name


_TYPE_NAMES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string",
                                 list: "array", dict: "object", type(None): "null"}  # fmt: skip


def _type_name(value: Any) -> str:
    name = _TYPE_NAMES.get(type(value))
    if name is not None:
        return name
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


_KIND = {"object": "object", "array": "array"}


def schema_of(parsed: Any) -> tuple[str, list[str], bool]:
    """Fingerprint a JSON value by its structure: key paths and the kind of value at each.

    The fingerprint hashes each key path with its kind (object, array or scalar), so it
    is stable under value changes (3 vs 3.5, null vs "late") and key order, and changes
    when a field is added, removed, or turns from a scalar into an object or a list.
    Array elements share the path ``a[]``; keys that look like ids or numbers collapse
    to ``*`` so maps keyed by id do not explode it. The field list keeps the precise
    JSON types (``$[].amount:integer|number``) for diffs.

    Returns:
        (fingerprint, sorted ``path:type`` fields, complete) where ``complete`` is False
        when :data:`MAX_SCHEMA_NODES` stopped the walk.
    """
    types: dict[str, set[str]] = {}
    stack: list[tuple[str, Any]] = [("$", parsed)]
    seen = 0
    type_names = _TYPE_NAMES
    while stack and seen < MAX_SCHEMA_NODES:
        path, value = stack.pop()
        seen += 1
        kind = type_names.get(type(value)) or _type_name(value)
        path_types = types.get(path)
        if path_types is None:
            types[path] = path_types = set()
        path_types.add(kind)
        if kind == "object":
            for key, child in value.items():
                child_path = f"{path}.{_key_name(key)}"
                child_kind = type_names.get(type(child))
                if child_kind is not None and child_kind not in ("object", "array"):
                    # scalars are recorded here, without a trip through the stack
                    seen += 1
                    child_types = types.get(child_path)
                    if child_types is None:
                        types[child_path] = child_types = set()
                    child_types.add(child_kind)
                else:
                    stack.append((child_path, child))
        elif kind == "array":
            child_path = f"{path}[]"
            for child in value:
                stack.append((child_path, child))
    fields = []
    structure = []
    for path, seen_types in types.items():
        concrete = seen_types - {"null"} or {"null"}
        fields.append(f"{path}:{'|'.join(sorted(concrete))}")
        kinds = sorted({_KIND.get(t, "scalar") for t in concrete})
        structure.append(f"{path}:{'|'.join(kinds)}")
    fields.sort()
    structure.sort()
    digest = hashlib.sha256("\n".join(structure).encode()).hexdigest()[:16]
    return digest, fields, not stack


def _envelope_of(view: str | None, raw: str | None) -> bool:
    """Whether the view is the whole raw inside a framework envelope (ADK sends the model
    ``{"result": raw}``): the model read all of it, so nothing was cut."""
    if view is None or raw is None or len(view) <= len(raw) or len(view) > 2 * len(raw) + 4096:
        return False
    from collector.dialects.wrappers import ADK_TOOL_RESPONSE, unwrap

    return unwrap(view, ADK_TOOL_RESPONSE).text == raw


# --- the measurement -----------------------------------------------------------------------


def measure(call: ToolCall, counter: TokenCounter) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Measure ``call``.

    Returns:
        (row, payloads): the figures as a dict of store columns, and the payloads
        (``raw``, ``view``) as UTF-8 bytes for the payload store.
    """
    warnings = list(call.warnings)
    payloads: dict[str, bytes] = {}
    raw_text: str | None = None
    raw_data: bytes | None = None
    if call.raw is not None:
        raw_text, raw_data, w = to_text(call.raw, "raw result")
        warnings += w
        payloads["raw"] = raw_data
    view_text: str | None = None
    view_data: bytes | None = None
    if call.view is not None:
        view_text, view_data, w = to_text(call.view, "view")
        warnings += w
        payloads["view"] = view_data

    # raw size: the payload when we have it whole, else what the tool declared
    raw_bytes: int | None = len(raw_data) if raw_data is not None else call.raw_bytes_declared
    raw_tokens: int | None = None
    raw_exact = True
    if raw_data is not None and call.raw_bytes_declared and call.raw_bytes_declared > len(raw_data):
        warnings.append(
            f"raw result payload was cut before toolmeter saw it ({len(raw_data)} of "
            f"{call.raw_bytes_declared} bytes, e.g. by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT); "
            "raw bytes are the declared figure, raw tokens are estimated from the part received"
        )
        raw_bytes = call.raw_bytes_declared
        assert raw_text is not None
        partial = counter.count(raw_text)
        estimate = min(round(partial.tokens * raw_bytes / max(len(raw_data), 1)), MAX_INT64)
        raw_tokens = call.raw_tokens_declared or estimate
        raw_exact = bool(call.raw_tokens_declared)
    elif raw_text is not None:
        counted = counter.count(raw_text)
        raw_tokens, raw_exact = counted.tokens, counted.exact
    else:
        raw_tokens = call.raw_tokens_declared
        if raw_tokens is not None and call.raw_tokens_approximate:
            raw_exact = False
            warnings.append("raw tokens are the figure the source reported (its own estimate), not a tiktoken count")
    wrapper_bytes: int | None = None
    wrapper_tokens: int | None = None
    if call.raw_wrapper is not None and call.wrapped is not None and raw_data is not None and raw_tokens is not None:
        wrapped_text, wrapped_data, _ = to_text(call.wrapped, "wrapped result")
        wrapper_bytes = len(wrapped_data) - len(raw_data)
        wrapper_tokens = counter.count(wrapped_text).tokens - raw_tokens
        del wrapped_text, wrapped_data

    # view: what the model was shown
    view_source = call.view_origin or "view"
    view_bytes: int | None
    view_tokens: int | None
    view_exact = True
    if view_text is not None:
        assert view_data is not None
        view_bytes = len(view_data)
        counted = counter.count(view_text)
        view_tokens, view_exact = counted.tokens, counted.exact
    elif call.view_bytes_declared is not None or call.view_tokens_declared is not None:
        view_source = "declared"
        view_bytes, view_tokens = call.view_bytes_declared, call.view_tokens_declared
    elif call.truncated and call.retained and raw_data is not None:
        view_source = "retained"
        cleaned, _ = clean_declared_ranges(call.retained, len(raw_data))
        joined = b"".join(raw_data[s:e] for s, e in cleaned)
        view_bytes = len(joined)
        counted = counter.count(joined.decode("utf-8", errors="replace"))
        view_tokens, view_exact = counted.tokens, counted.exact
    else:
        view_source = "raw"  # nothing says the model saw anything else
        view_bytes, view_tokens, view_exact = raw_bytes, raw_tokens, raw_exact

    # truncation and retained ranges
    truncated = call.truncated
    truncation_source: str | None = str(Source.DECLARED) if truncated is not None else None
    if truncated is None and view_data is not None and b"truncated" in view_data:
        marker = next((m for m in _DECLARED_MARKERS if m.search(view_data)), None)
        if marker is not None:
            truncated, truncation_source = True, str(Source.DECLARED)
            warnings.append("the view carries its framework's truncation note: read as declared truncation")
    retained: list[Range] | None = None
    retained_source: str | None = None
    kind: str | None = None
    from_raw_share = 1.0
    if call.retained is not None:
        retained, w = clean_declared_ranges(call.retained, len(raw_data) if raw_data is not None else raw_bytes)
        warnings += w
        retained_source = str(Source.DECLARED)
    if raw_data is not None and view_data is not None:
        if view_data == raw_data or _envelope_of(view_text, raw_text):
            inferred_ranges: list[Range] = [(0, len(raw_data))] if raw_data else []
            inferred_truncated = False
        else:
            ret = infer_retained(raw_data, view_data)
            inferred_ranges = list(ret.ranges)
            inferred_truncated = ret.retained_bytes < len(raw_data)
            from_raw_share = ret.view_bytes_from_raw / max(len(view_data), 1)
        if retained is None:
            retained, retained_source = inferred_ranges, str(Source.INFERRED)
        if truncated is None:
            truncated, truncation_source = inferred_truncated, str(Source.INFERRED)
        elif truncated != inferred_truncated and not (truncated and from_raw_share < 0.5):
            warnings.append(
                f"declared truncated={truncated} but the view {'keeps' if not inferred_truncated else 'omits'} "
                "parts of the raw; the declared value is kept"
            )
    elif truncated is None and raw_bytes is not None and view_bytes is not None and view_source == "declared":
        truncated, truncation_source = view_bytes < raw_bytes, str(Source.INFERRED)
    if truncated and retained is not None and raw_bytes:
        kind = truncation_kind(retained, raw_bytes, from_raw_share)
    elif truncated:
        kind = "rewritten" if view_data is not None else "unknown"
    retained_bytes = sum(e - s for s, e in merge_ranges(retained)) if retained is not None else None
    omitted_bytes = (
        raw_bytes - retained_bytes
        if truncated and retained_bytes is not None and raw_bytes is not None and kind != "rewritten"
        else (raw_bytes - view_bytes if truncated and raw_bytes is not None and view_bytes is not None else None)
    )
    coverage = None
    if retained is not None and view_bytes:
        coverage = min(sum(e - s for s, e in retained) / view_bytes, 1.0)

    # shape and schema
    shape = call.shape
    shape_source: str | None = str(Source.DECLARED) if shape else None
    fingerprint: str | None = None
    fields: list[str] | None = None
    if raw_text is not None and raw_bytes == len(raw_data or b""):
        parsed, problem = parse_json(raw_text)
        if problem:
            warnings.append(problem)
        if parsed is not None:
            fingerprint, fields, complete = schema_of(parsed)
            if not complete:
                warnings.append(f"schema fingerprint walked the first {MAX_SCHEMA_NODES:,} JSON values only")
        if shape is None:
            shape, shape_source = infer_shape(raw_text, parsed), str(Source.INFERRED)
    if not raw_exact or not view_exact:
        warnings.append(
            "token count is approximate: a run of text with no word or line break was cut to count it"
            if raw_text is not None
            else "token count is approximate"
        )

    budget = call.budget_tokens
    row: dict[str, Any] = {
        "trace_id": call.trace_id,
        "span_id": call.span_id,
        "parent_span_id": call.parent_span_id,
        "tool_call_id": call.tool_call_id,
        "tool_name": call.tool_name,
        "service_name": call.service_name,
        "agent_name": call.agent_name,
        "dialect": call.dialect,
        "source": call.source,
        "start_ns": call.start_ns,
        "end_ns": call.end_ns,
        "duration_ms": max(call.end_ns - call.start_ns, 0) / 1e6,
        "status": call.status,
        "error": call.error,
        "encoding": counter.encoding_name,
        "raw_bytes": raw_bytes,
        "raw_tokens": raw_tokens,
        "raw_tokens_exact": raw_exact if raw_tokens is not None else None,
        "view_bytes": view_bytes,
        "view_tokens": view_tokens,
        "view_tokens_exact": view_exact if view_tokens is not None else None,
        "view_source": view_source,
        "budget_tokens": budget,
        "over_budget": (raw_tokens > budget) if budget is not None and raw_tokens is not None else None,
        "view_over_budget": (view_tokens > budget) if budget is not None and view_tokens is not None else None,
        "truncated": truncated,
        "truncation_source": truncation_source,
        "truncation_kind": kind,
        "retained_ranges": [list(r) for r in retained] if retained is not None else None,
        "retained_source": retained_source,
        "retained_bytes": retained_bytes,
        "retained_coverage": coverage,
        "omitted_bytes": omitted_bytes,
        "shape": shape,
        "shape_source": shape_source,
        "schema_fingerprint": fingerprint,
        "schema_fields": fields,
        "arguments": call.arguments,
        "warnings": warnings,
        "raw_wrapper": call.raw_wrapper if wrapper_bytes is not None else None,
        "wrapper_bytes": wrapper_bytes,
        "wrapper_tokens": wrapper_tokens,
        "view_join": call.view_join,
        "origin": call.origin,
    }
    return row, payloads
