"""Reader: the typed values of one span's attributes, and the issues met reading them.

A value of the wrong type or out of range is never raised: it is ignored and reported as
an :class:`~collector.model.Issue` naming the attribute, so one bad attribute costs only
its own figure.
"""

from __future__ import annotations

from typing import Any

from collector.measure.retention import MAX_INT64
from collector.model import Issue, SpanData

MAX_COUNT = MAX_INT64
"""Largest byte or token count the store holds."""


class SpanReader:
    """Collects typed values and the issues met while reading one span."""

    def __init__(self, span: SpanData) -> None:
        self.span = span
        self.issues: list[Issue] = []

    def issue(self, field_name: str | None, message: str) -> None:
        s = self.span
        self.issues.append(Issue(s.source, message, s.trace_id, s.span_id, field_name))

    def int_attr(self, key: str) -> int | None:
        value = self.span.attributes.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.issue(key, f"must be a non-negative integer, got {value!r}; ignored")
            return None
        try:
            number = int(value)
        except (ValueError, OverflowError):  # "abc", NaN, Infinity
            self.issue(key, f"must be a non-negative integer, got {value!r}; ignored")
            return None
        if number < 0:
            self.issue(key, f"must be a non-negative integer, got {number}; ignored")
            return None
        if number > MAX_COUNT:
            self.issue(key, f"must be at most {MAX_COUNT} (a 64-bit integer), got {number}; ignored")
            return None
        return number

    def bool_attr(self, key: str) -> bool | None:
        value = self.span.attributes.get(key)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.issue(key, f"must be a boolean, got {value!r}; ignored")
        return None


def short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters for an issue message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
