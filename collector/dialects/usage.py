"""Usage: the input and output tokens a model-call span reports, in each dialect's form.

Most dialects put each count in its own attribute (the first present key wins, in the
precedence of :mod:`collector.dialects.conventions`); Langfuse and MLflow put a JSON
object of counts in one attribute, read only when no count attribute is present.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from collector.dialects import attributes as A
from collector.dialects.conventions import INPUT_TOKEN_KEYS, OUTPUT_TOKEN_KEYS, first_present
from collector.dialects.reader import MAX_COUNT, SpanReader, short


def read_usage(r: SpanReader) -> tuple[int | None, int | None]:
    """(input tokens, output tokens) of the span ``r`` reads; None where not reported or not valid."""
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
    return input_tokens, output_tokens


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


def _langfuse_usage(r: SpanReader, key: str) -> tuple[int | None, int | None]:
    """Langfuse's rule: keys starting ``input`` add up to input tokens, ``output`` to output."""
    usage = _usage_object(r, key)
    if usage is None:
        return None, None
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
    return sums["input"], sums["output"]


def _mlflow_usage(r: SpanReader, key: str) -> tuple[int | None, int | None]:
    usage = _usage_object(r, key)
    if usage is None:
        return None, None
    found = []
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        found.append(None if value is None else _count(r, key, name, value))
    return found[0], found[1]
