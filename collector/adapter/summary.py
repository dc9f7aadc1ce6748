"""Summaries computed by code over the whole result, never by a model.

For each field of a list's items: counts of a categorical field's values (at most
:data:`MAX_CATEGORIES` distinct ones), sum, minimum and maximum of a numeric one, oldest
and newest of a timestamp. Exact over every item, so an outlier on page forty still shows
as the maximum and one ``refund_pending`` among 312 orders shows in the counts. Sums use
``math.fsum``: the same items in any order give the same figure.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

MAX_CATEGORIES = 20
"""A string field with more distinct values than this is an identifier, not a category: not counted."""
MAX_CATEGORY_CHARS = 64
"""A longer string is text, not a category: a field with one is not counted."""

_TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$")


def _instant(text: str) -> datetime | None:
    if not _TIMESTAMP.match(text):
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class _Field:
    __slots__ = ("categories", "instants", "many", "missing", "numbers", "strings")

    def __init__(self) -> None:
        self.numbers: list[float] = []
        self.categories: dict[str, int] = {}
        self.instants: list[tuple[datetime, str]] = []
        self.strings = 0
        self.missing = 0
        self.many = False

    def add(self, value: Any) -> None:
        if isinstance(value, bool):
            self._count("true" if value else "false")
        elif isinstance(value, (int, float)):
            if math.isfinite(value):
                self.numbers.append(value)
        elif isinstance(value, str):
            self.strings += 1
            instant = _instant(value)
            if instant is not None:
                self.instants.append((instant, value))
            self._count(value)

    def _count(self, value: str) -> None:
        if self.many:
            return
        if len(value) > MAX_CATEGORY_CHARS:
            self.many, self.categories = True, {}
            return
        self.categories[value] = self.categories.get(value, 0) + 1
        if len(self.categories) > MAX_CATEGORIES:
            self.many, self.categories = True, {}

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.numbers:
            total = math.fsum(self.numbers)
            out.update(sum=int(total) if total.is_integer() and all(isinstance(n, int) for n in self.numbers)
                       else total, min=min(self.numbers), max=max(self.numbers))  # fmt: skip
        if self.instants and len(self.instants) == self.strings:
            out.update(oldest=min(self.instants)[1], newest=max(self.instants)[1])
        elif self.categories:
            out["counts"] = dict(sorted(self.categories.items(), key=lambda kv: (-kv[1], kv[0])))
        if self.missing:
            out["missing"] = self.missing
        return out


def summarize(items: list[Any]) -> dict[str, Any]:
    """The summary of ``items``: ``{"count": n, "<field>": {...figures}}`` for dict items."""
    fields: dict[str, _Field] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        for key, value in item.items():
            field = fields.get(key)
            if field is None:
                fields[key] = field = _Field()
            field.add(value)
            field.missing -= 1  # counted as present; the item count is added below
    dicts = sum(1 for item in items if isinstance(item, dict))
    summary: dict[str, Any] = {"count": len(items)}
    for key, field in fields.items():
        field.missing += dicts
        figures = field.figures()
        if figures and set(figures) != {"missing"}:
            summary[key] = figures
    return summary


def shorter(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Smaller forms of ``summary``, in order, for a budget the whole one does not fit: counts
    limited to the five largest (the rest as ``others``), then numbers only, then the count."""
    capped: dict[str, Any] = {}
    for key, figures in summary.items():
        if isinstance(figures, dict) and "counts" in figures and len(figures["counts"]) > 5:
            counts = list(figures["counts"].items())
            figures = {**figures, "counts": dict(counts[:5]), "others": sum(n for _, n in counts[5:])}
        capped[key] = figures
    numbers = {k: v for k, v in capped.items() if not isinstance(v, dict) or "sum" in v}
    numbers = {k: ({f: v[f] for f in ("sum", "min", "max")} if isinstance(v, dict) else v) for k, v in numbers.items()}
    return [capped, numbers, {"count": summary["count"]}]
