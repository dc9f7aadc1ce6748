"""Measure one tool call: pure functions from a :class:`ToolCall` to a :class:`Measurement`.

Everything here works on plain values (text, bytes, numbers), never on spans or
protobuf messages, so it is the same for the in-process processor and for file ingest.

What is measured, and how:

* bytes: UTF-8 bytes of the raw result and of the model-facing view;
* tokens: exact tiktoken counts (see :mod:`collector.measure.tokens`);
* truncated: declared by the tool, or inferred when the view differs from the raw;
* retained ranges: declared byte ranges of the raw, or inferred by locating the
  view's pieces in the raw (:func:`~collector.measure.retention.infer_retained`);
* shape: declared, or inferred (:func:`~collector.measure.shape.infer_shape`);
* schema fingerprint: key paths and types of JSON results (:func:`~collector.measure.shape.schema_of`).

:func:`measure` runs these as steps, in this order (each step's warnings follow the
previous step's, so the row's warning list reads in the same order every time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from collector.measure.figures import Measurement, ResultShape, Size, Truncation, Wrapper
from collector.measure.retention import (
    MAX_INT64,
    MIN_MATCH,
    Retention,
    clean_declared_ranges,
    infer_retained,
    merge_ranges,
    parse_ranges,
    truncation_kind,
)
from collector.measure.shape import MAX_JSON_BYTES, MAX_SCHEMA_NODES, infer_shape, parse_json, schema_of
from collector.measure.text import to_text, without_surrogates
from collector.measure.tokens import TokenCounter
from collector.model import Range, Source, ToolCall

__all__ = [  # the helpers moved to retention, shape and text stay importable from here
    "MAX_INT64",
    "MAX_JSON_BYTES",
    "MAX_SCHEMA_NODES",
    "MIN_MATCH",
    "Measurement",
    "ResultShape",
    "Retention",
    "Size",
    "Truncation",
    "Wrapper",
    "clean_declared_ranges",
    "infer_retained",
    "infer_shape",
    "measure",
    "merge_ranges",
    "parse_json",
    "parse_ranges",
    "schema_of",
    "to_text",
    "truncation_kind",
    "without_surrogates",
]

_DECLARED_MARKERS = (
    re.compile(rb"\.\.\. \[truncated: [\d,]+ chars removed\] \.\.\."),  # Strands' head/tail cut
)
"""Explicit truncation notes that frameworks write into the view: a view carrying one was cut
by its framework, which is read as declared truncation."""


@dataclass(slots=True)
class _Texts:
    """The payloads as text and as UTF-8 bytes (None when the call did not carry them)."""

    raw_text: str | None
    raw_data: bytes | None
    view_text: str | None
    view_data: bytes | None
    warnings: tuple[str, ...]


# --- the steps -------------------------------------------------------------------------------


def measure(call: ToolCall, counter: TokenCounter) -> Measurement:
    """Measure ``call``: its payloads' sizes, what the view kept of the raw, and the raw's shape."""
    texts = _texts(call)
    raw, raw_warnings = _raw_size(call, texts, counter)
    wrapper = _wrapper_size(call, texts, raw, counter)
    view, view_source = _view_size(call, texts, raw, counter)
    truncation, cut_warnings = _truncation(call, texts, raw, view, view_source)
    shape, shape_warnings = _shape(call, texts, raw)
    warnings = (
        *call.warnings, *texts.warnings, *raw_warnings, *cut_warnings, *shape_warnings,
        *_approximate_note(texts, raw, view),
    )  # fmt: skip
    payloads = {k: v for k, v in (("raw", texts.raw_data), ("view", texts.view_data)) if v is not None}
    return Measurement(
        call,
        counter.encoding_name,
        counter.name_for(texts.raw_text, texts.view_text, call.wrapped),
        raw,
        view,
        view_source,
        wrapper,
        truncation,
        shape,
        warnings,
        payloads,
    )


def _texts(call: ToolCall) -> _Texts:
    """Step 1: the raw and the view as text and as bytes."""
    raw_text = raw_data = view_text = view_data = None
    warnings: list[str] = []
    if call.raw is not None:
        raw_text, raw_data, w = to_text(call.raw, "raw result")
        warnings += w
    if call.view is not None:
        view_text, view_data, w = to_text(call.view, "view")
        warnings += w
    return _Texts(raw_text, raw_data, view_text, view_data, tuple(warnings))


def _raw_size(call: ToolCall, texts: _Texts, counter: TokenCounter) -> tuple[Size, list[str]]:
    """Step 2: bytes and tokens of the raw: the payload's when we have it whole, else declared ones."""
    raw_text, raw_data = texts.raw_text, texts.raw_data
    declared = call.raw_bytes_declared
    if raw_text is not None and raw_data is not None and declared and declared > len(raw_data):
        # cut on the way (an attribute length limit): count the part received, scale it up
        partial = counter.count(raw_text)
        estimate = min(round(partial.tokens * declared / max(len(raw_data), 1)), MAX_INT64)
        warning = (
            f"raw result payload was cut before toolmeter saw it ({len(raw_data)} of "
            f"{declared} bytes, e.g. by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT); "
            "raw bytes are the declared figure, raw tokens are estimated from the part received"
        )
        tokens = call.raw_tokens_declared or estimate
        return Size(declared, tokens, bool(call.raw_tokens_declared)), [warning]
    if raw_text is not None and raw_data is not None:
        counted = counter.count(raw_text)
        return Size(len(raw_data), counted.tokens, counted.exact), []
    if call.raw_tokens_declared is not None and call.raw_tokens_approximate:
        warning = "raw tokens are the figure the source reported (its own estimate), not a tiktoken count"
        return Size(declared, call.raw_tokens_declared, False), [warning]
    return Size(declared, call.raw_tokens_declared), []


def _wrapper_size(call: ToolCall, texts: _Texts, raw: Size, counter: TokenCounter) -> Wrapper:
    """Step 3: what the framework envelope around the raw added, when the span carried both."""
    if call.raw_wrapper is None or call.wrapped is None or texts.raw_data is None or raw.tokens is None:
        return Wrapper()
    wrapped_text, wrapped_data, _ = to_text(call.wrapped, "wrapped result")
    return Wrapper(
        call.raw_wrapper,
        len(wrapped_data) - len(texts.raw_data),
        counter.count(wrapped_text).tokens - raw.tokens,
    )


def _view_size(call: ToolCall, texts: _Texts, raw: Size, counter: TokenCounter) -> tuple[Size, str]:
    """Step 4: bytes and tokens of what the model was shown, and where those figures come from."""
    if texts.view_text is not None and texts.view_data is not None:
        if texts.view_data == texts.raw_data and raw.tokens is not None and raw.byte_count == len(texts.raw_data):
            # the model was shown the whole raw (a message view mostly is): counted once
            return Size(raw.byte_count, raw.tokens, raw.exact), call.view_origin or "view"
        counted = counter.count(texts.view_text)
        return Size(len(texts.view_data), counted.tokens, counted.exact), call.view_origin or "view"
    if call.view_bytes_declared is not None or call.view_tokens_declared is not None:
        return Size(call.view_bytes_declared, call.view_tokens_declared), "declared"
    if call.truncated and call.retained and texts.raw_data is not None:
        # no view, but declared ranges of a raw we have: the view is those bytes
        cleaned, _ = clean_declared_ranges(call.retained, len(texts.raw_data))
        joined = b"".join(texts.raw_data[s:e] for s, e in cleaned)
        counted = counter.count(joined.decode("utf-8", errors="replace"))
        return Size(len(joined), counted.tokens, counted.exact), "retained"
    return raw, "raw"  # nothing says the model saw anything else


def _truncation(call: ToolCall, texts: _Texts, raw: Size, view: Size, view_source: str) -> tuple[Truncation, list[str]]:
    """Step 5: whether the view was cut, which ranges of the raw it kept, and the figures that follow."""
    raw_data, view_data = texts.raw_data, texts.view_data
    warnings: list[str] = []
    truncated, truncation_source = _declared_truncated(call, view_data, warnings)
    retained: list[Range] | None = None
    retained_source: str | None = None
    from_raw_share = 1.0
    if call.retained is not None:
        retained, w = clean_declared_ranges(call.retained, len(raw_data) if raw_data is not None else raw.byte_count)
        warnings += w
        retained_source = str(Source.DECLARED)
    if raw_data is not None and view_data is not None:
        inferred_ranges, inferred_truncated, from_raw_share = _compare(texts, raw_data, view_data)
        if retained is None:
            retained, retained_source = inferred_ranges, str(Source.INFERRED)
        if truncated is None:
            truncated, truncation_source = inferred_truncated, str(Source.INFERRED)
        elif truncated != inferred_truncated and not (truncated and from_raw_share < 0.5):
            warnings.append(
                f"declared truncated={truncated} but the view {'keeps' if not inferred_truncated else 'omits'} "
                "parts of the raw; the declared value is kept"
            )
    elif truncated is None and raw.byte_count is not None and view.byte_count is not None and view_source == "declared":
        truncated, truncation_source = view.byte_count < raw.byte_count, str(Source.INFERRED)
    kind = _kind(truncated, retained, raw.byte_count, from_raw_share, view_data is not None)
    figures = _retained_figures(truncated, kind, retained, raw.byte_count, view.byte_count)
    ranges = tuple(retained) if retained is not None else None
    return Truncation(truncated, truncation_source, kind, ranges, retained_source, *figures), warnings


def _declared_truncated(call: ToolCall, view_data: bytes | None, warnings: list[str]) -> tuple[bool | None, str | None]:
    """Truncation the tool declared, or its framework wrote as a note into the view."""
    if call.truncated is not None:
        return call.truncated, str(Source.DECLARED)
    # the word itself is a cheap screen before the patterns
    if view_data is not None and b"truncated" in view_data and any(m.search(view_data) for m in _DECLARED_MARKERS):
        warnings.append("the view carries its framework's truncation note: read as declared truncation")
        return True, str(Source.DECLARED)
    return None, None


def _compare(texts: _Texts, raw_data: bytes, view_data: bytes) -> tuple[list[Range], bool, float]:
    """The raw's ranges found in the view, whether some of the raw is missing, and the share of
    the view copied from the raw."""
    if view_data == raw_data or _envelope_of(texts.view_text, texts.raw_text):
        return ([(0, len(raw_data))] if raw_data else []), False, 1.0
    ret = infer_retained(raw_data, view_data)
    return list(ret.ranges), ret.retained_bytes < len(raw_data), ret.view_bytes_from_raw / max(len(view_data), 1)


def _envelope_of(view: str | None, raw: str | None) -> bool:
    """Whether the view is the whole raw inside a framework envelope (ADK sends the model
    ``{"result": raw}``): the model read all of it, so nothing was cut."""
    if view is None or raw is None or len(view) <= len(raw) or len(view) > 2 * len(raw) + 4096:
        return False
    from collector.dialects.wrappers import ADK_TOOL_RESPONSE, unwrap

    return unwrap(view, ADK_TOOL_RESPONSE).text == raw


def _kind(
    truncated: bool | None, retained: list[Range] | None, raw_bytes: int | None, from_raw_share: float, has_view: bool
) -> str | None:
    """How the view was cut (:func:`truncation_kind`), when it was."""
    if truncated and retained is not None and raw_bytes:
        return truncation_kind(retained, raw_bytes, from_raw_share)
    if truncated:
        return "rewritten" if has_view else "unknown"
    return None


def _retained_figures(
    truncated: bool | None,
    kind: str | None,
    retained: list[Range] | None,
    raw_bytes: int | None,
    view_bytes: int | None,
) -> tuple[int | None, float | None, int | None]:
    """(retained bytes, coverage of the view by retained ranges, omitted bytes of the raw)."""
    retained_bytes = sum(e - s for s, e in merge_ranges(retained)) if retained is not None else None
    omitted_bytes = None
    if truncated and raw_bytes is not None:
        if retained_bytes is not None and kind != "rewritten":
            omitted_bytes = raw_bytes - retained_bytes
        elif view_bytes is not None:
            omitted_bytes = raw_bytes - view_bytes  # a rewrite keeps no ranges: the bytes it saved
    coverage = None
    if retained is not None and view_bytes:
        coverage = min(sum(e - s for s, e in retained) / view_bytes, 1.0)
    return retained_bytes, coverage, omitted_bytes


def _shape(call: ToolCall, texts: _Texts, raw: Size) -> tuple[ResultShape, list[str]]:
    """Step 6: the raw's shape and JSON fingerprint (only from a raw received whole)."""
    declared = call.shape
    source = str(Source.DECLARED) if declared else None
    raw_text = texts.raw_text
    if raw_text is None or raw.byte_count != len(texts.raw_data or b""):
        return ResultShape(declared, source), []
    warnings: list[str] = []
    parsed, problem = parse_json(raw_text)
    if problem:
        warnings.append(problem)
    fingerprint: str | None = None
    fields: tuple[str, ...] | None = None
    if parsed is not None:
        fingerprint, field_list, complete = schema_of(parsed)
        fields = tuple(field_list)
        if not complete:
            warnings.append(f"schema fingerprint walked the first {MAX_SCHEMA_NODES:,} JSON values only")
    if declared is None:
        return ResultShape(infer_shape(raw_text, parsed), str(Source.INFERRED), fingerprint, fields), warnings
    return ResultShape(declared, source, fingerprint, fields), warnings


def _approximate_note(texts: _Texts, raw: Size, view: Size) -> list[str]:
    """Step 7: say when a token figure is not an exact count."""
    if raw.exact and view.exact:
        return []
    if texts.raw_text is not None:
        return ["token count is approximate: a run of text with no word or line break was cut to count it"]
    return ["token count is approximate"]
