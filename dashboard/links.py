"""Links people can share: the sidebar's filters and each page's pick live in the URL.

Query parameters (every one optional): ``from`` and ``to`` (the first and last UTC day,
``YYYY-MM-DD``), ``service`` and ``tools`` (comma-separated), ``encoding``; the tool detail
page's ``tool``; the replay's ``trace`` and ``span``. A page opened from such a link starts
from them; as the view changes, the URL follows, so copying it gives the view on screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from collector.query.ranking import Filters

FILTER_KEYS = ("from", "to", "service", "tools", "encoding")


def _day(text: str | None, default: date, lo: date, hi: date) -> date:
    try:
        day = date.fromisoformat(text) if text else default
    except ValueError:
        return default
    return min(max(day, lo), hi)


def _names(text: str | None, known: list[str]) -> list[str]:
    return [n for n in (text or "").split(",") if n in known]


@dataclass(frozen=True)
class Initial:
    """The sidebar widgets' starting values."""

    dates: tuple[date, date]
    services: list[str]
    tools: list[str]
    encoding: str | None


def initial_filters(params: Mapping[str, str], first: date, last: date, services: list[str], tools: list[str],
                    encodings: list[str]) -> Initial:  # fmt: skip
    """The sidebar widgets' starting values from a link (unknown names and days are left out)."""
    start = _day(params.get("from"), first, first, last)
    end = _day(params.get("to"), last, start, last)
    encoding = params.get("encoding")
    return Initial((start, end), _names(params.get("service"), services), _names(params.get("tools"), tools),
                   encoding if encoding in encodings else None)  # fmt: skip


def filter_params(filters: Filters, first: date, last: date) -> dict[str, str]:
    """The query parameters that give ``filters`` (none for what is the default)."""
    out: dict[str, str] = {}
    if filters.since is not None and filters.since.date() != first:
        out["from"] = filters.since.date().isoformat()
    if filters.until is not None and (filters.until - timedelta(days=1)).date() != last:
        out["to"] = (filters.until - timedelta(days=1)).date().isoformat()
    if filters.services:
        out["service"] = ",".join(filters.services)
    if filters.tools:
        out["tools"] = ",".join(filters.tools)
    if filters.encoding:
        out["encoding"] = filters.encoding
    return out


def day_range(start: date, end: date) -> tuple[datetime, datetime]:
    """``since`` and ``until`` (exclusive) of the days ``start`` to ``end``."""
    return datetime.combine(start, time.min), datetime.combine(end, time.min) + timedelta(days=1)
