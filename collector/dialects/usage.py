"""Usage: the tokens a model-call span reports, in each dialect's form, and what was left out of
its input (context editing, compaction).

Most dialects put each count in its own attribute (the first present key wins, in the
precedence of :mod:`collector.dialects.conventions`); Langfuse and MLflow put a JSON
object of counts in one attribute, read only when no count attribute is present.

Input tokens are stored with the cached ones included, as the GenAI conventions ask
(``gen_ai.usage.input_tokens`` SHOULD include ``cache_read`` and ``cache_creation``). Some
instrumentations pass on Anthropic's own ``input_tokens``, which leaves them out: an input
count below its own cache reads plus writes can only be that, and the two are added to it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from collector.dialects import attributes as A
from collector.dialects.conventions import (
    CACHE_READ_KEYS,
    CACHE_WRITE_KEYS,
    INPUT_TOKEN_KEYS,
    OUTPUT_TOKEN_KEYS,
    first_present,
)
from collector.dialects.reader import MAX_COUNT, SpanReader, short


class Usage(NamedTuple):
    """What one model call reports of its tokens; None where it reports nothing."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


def read_usage(r: SpanReader) -> Usage:
    """The usage of the span ``r`` reads; None where not reported or not valid."""
    attrs = r.span.attributes
    in_key, _ = first_present(attrs, INPUT_TOKEN_KEYS)
    out_key, _ = first_present(attrs, OUTPUT_TOKEN_KEYS)
    input_tokens = r.int_attr(in_key) if in_key else None
    output_tokens = r.int_attr(out_key) if out_key else None
    if input_tokens is None and output_tokens is None:
        # the usage JSON objects of Langfuse and MLflow, read last
        for key, reader in (
            (A.LANGFUSE_OBSERVATION_USAGE_DETAILS, _langfuse_usage),
            (A.MLFLOW_CHAT_TOKEN_USAGE, _mlflow_usage),
        ):
            if attrs.get(key) is not None:
                return reader(r, key)
    read_key, _ = first_present(attrs, CACHE_READ_KEYS)
    write_key, _ = first_present(attrs, CACHE_WRITE_KEYS)
    cache_read = r.int_attr(read_key) if read_key else None
    cache_write = r.int_attr(write_key) if write_key else None
    return Usage(_with_cache(input_tokens, cache_read, cache_write), output_tokens, cache_read, cache_write)


def _with_cache(input_tokens: int | None, cache_read: int | None, cache_write: int | None) -> int | None:
    """The input tokens with the cached ones included (see the module docstring)."""
    cached = (cache_read or 0) + (cache_write or 0)
    if input_tokens is None or input_tokens >= cached:
        return input_tokens
    return min(input_tokens + cached, MAX_COUNT)


def _usage_object(r: SpanReader, key: str) -> Mapping[str, Any] | None:
    """A usage attribute that is a JSON object (as text, or already decoded from OTLP)."""
    value = r.span.attributes.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = None
    if not isinstance(value, Mapping):
        r.issue(key, f"must be a JSON object of token counts, got {short(r.span.attributes.get(key))}; ignored")
        return None
    return value


def _count(r: SpanReader, key: str, name: str, value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_COUNT:
        r.issue(key, f"{name} must be a non-negative number up to {MAX_COUNT}, got {short(value)}; ignored")
        return None
    return int(value)


_CACHE_READ_NAMES = ("input_cache_read", "input_cached_tokens", "cache_read_input_tokens", "cache_read_tokens")
_CACHE_WRITE_NAMES = ("input_cache_creation", "input_cache_write", "cache_creation_input_tokens",
                      "cache_write_tokens")  # fmt: skip


def _cache_counts(r: SpanReader, key: str, usage: Mapping[str, Any]) -> tuple[int | None, int | None, int]:
    """(cache reads, cache writes, how many of them sit outside the ``input*`` keys) of a usage object."""
    found: list[int | None] = []
    outside = 0
    for names in (_CACHE_READ_NAMES, _CACHE_WRITE_NAMES):
        name = next((n for n in names if usage.get(n) is not None), None)
        n = None if name is None else _count(r, key, name, usage[name])
        found.append(n)
        if n is not None and name is not None and not name.startswith("input"):
            outside += n
    return found[0], found[1], outside


def _langfuse_usage(r: SpanReader, key: str) -> Usage:
    """Langfuse's rule: keys starting ``input`` add up to input tokens, ``output`` to output."""
    usage = _usage_object(r, key)
    if usage is None:
        return Usage()
    sums: dict[str, int | None] = {"input": None, "output": None}
    aliases = {"prompt_tokens": "input", "promptTokens": "input", "completion_tokens": "output",
               "completionTokens": "output"}  # fmt: skip
    for name, value in usage.items():
        side = "input" if name.startswith("input") else "output" if name.startswith("output") else aliases.get(name)
        if side is None:
            continue
        n = _count(r, key, name, value)
        if n is not None:
            sums[side] = (sums[side] or 0) + n
    cache_read, cache_write, outside = _cache_counts(r, key, usage)
    input_tokens = sums["input"]
    if input_tokens is not None and outside:  # cache keys outside ``input*`` are not in Langfuse's sum
        input_tokens = min(input_tokens + outside, MAX_COUNT)
    return Usage(input_tokens, sums["output"], cache_read, cache_write)


def _mlflow_usage(r: SpanReader, key: str) -> Usage:
    usage = _usage_object(r, key)
    if usage is None:
        return Usage()
    found = []
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        found.append(None if value is None else _count(r, key, name, value))
    cache_read, cache_write, _ = _cache_counts(r, key, usage)
    return Usage(_with_cache(found[0], cache_read, cache_write), found[1], cache_read, cache_write)


# --- what was left out of a call's input ---------------------------------------------


class ContextEdit(NamedTuple):
    """What one model call's input left out: the oldest ``cleared_tool_uses`` tool results
    (context editing), or everything before it (``compacted``: replaced by a summary).

    ``compaction_parts`` counts the compaction parts in its input messages: a summary stays in
    the conversation, so every later call carries it too, and a call compacts only where that
    count grows (the store compares it with the call before)."""

    cleared_tool_uses: int | None = None
    cleared_input_tokens: int | None = None
    compacted: bool = False
    compaction_parts: int | None = None


_BODY_KEYS = (A.OI_OUTPUT_VALUE, A.LANGFUSE_OBSERVATION_OUTPUT, A.MLFLOW_SPAN_OUTPUTS)
"""Attributes that hold a response body, where Anthropic's ``context_management`` report is."""
_INPUT_KEYS = ("gen_ai.input.messages", A.OI_INPUT_VALUE, A.LANGFUSE_OBSERVATION_INPUT, A.MLFLOW_SPAN_INPUTS,
               "ai.prompt.messages", A.ADK_LLM_REQUEST)  # fmt: skip
"""Attributes that hold a call's input messages, where a compaction part is."""
_COMPACTION_PART = re.compile(r'"type"\s*:\s*"compaction"')
MAX_SCANNED = 64 * 1024 * 1024
"""Larger texts are not searched for context edits (as large as the JSON the measurer parses)."""


def read_context_edit(r: SpanReader) -> ContextEdit:
    """The context edit the span ``r`` reads reports, if any."""
    attrs = r.span.attributes
    cleared = r.int_attr(A.TOOLMETER_CLEARED_TOOL_USES)
    cleared_tokens = r.int_attr(A.TOOLMETER_CLEARED_INPUT_TOKENS)
    if cleared is None:
        cleared, cleared_tokens = _applied_edits(r)
    compacted = bool(r.bool_attr(A.GEN_AI_CONVERSATION_COMPACTED) or r.bool_attr(A.TOOLMETER_COMPACTED))
    parts = None
    for key in _INPUT_KEYS:
        text = attrs.get(key)
        if isinstance(text, str) and len(text) <= MAX_SCANNED:
            parts = len(_COMPACTION_PART.findall(text)) if "compaction" in text else 0
            break
    return ContextEdit(cleared, cleared_tokens, compacted, parts)


def _applied_edits(r: SpanReader) -> tuple[int | None, int | None]:
    """(tool uses, input tokens) cleared, from an Anthropic ``context_management.applied_edits``
    report in a response body attribute or an attribute of its own."""
    attrs = r.span.attributes
    for key in _BODY_KEYS:
        text = attrs.get(key)
        if isinstance(text, str) and len(text) <= MAX_SCANNED and "applied_edits" in text:
            try:
                body = json.loads(text)
            except (ValueError, RecursionError):
                continue
            if isinstance(body, Mapping) and isinstance(body.get(A.CONTEXT_MANAGEMENT), Mapping):
                return _edit_counts(r, key, body[A.CONTEXT_MANAGEMENT])
    for key, value in attrs.items():
        if key.endswith(A.CONTEXT_MANAGEMENT):
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except (ValueError, RecursionError):
                    r.issue(key, f"must be a JSON object with applied_edits, got {short(value)}; ignored")
                    continue
            if isinstance(value, Mapping):
                return _edit_counts(r, key, value)
    return None, None


def _edit_counts(r: SpanReader, key: str, report: Mapping[str, Any]) -> tuple[int | None, int | None]:
    edits = report.get("applied_edits")
    if not isinstance(edits, list):
        return None, None
    uses = tokens = None
    for edit in edits:
        if not isinstance(edit, Mapping) or "cleared_tool_uses" not in edit:
            continue  # thinking-block clearing leaves tool results alone
        n = _count(r, key, "cleared_tool_uses", edit.get("cleared_tool_uses"))
        t = edit.get("cleared_input_tokens")
        m = None if t is None else _count(r, key, "cleared_input_tokens", t)
        if n is not None:
            uses = (uses or 0) + n
        if m is not None:
            tokens = (tokens or 0) + m
    return uses, tokens
