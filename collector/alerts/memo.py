"""Envelopes kept from one evaluation of the alert rules to the next, while their calls are unchanged.

An evaluation reads, for every tool and service, the windows before and after each day of its
history: two queries a day, and for a service the runs grouped from all of its calls. ``serve``
and ``toolmeter watch`` evaluate every few minutes, and between two evaluations most windows
hold only days that did not change. A :class:`Memo` keeps each window's envelope with the
fingerprint of every day it covers (its calls' count and the sum of a hash of each call's
figures, read in one query a subject), and reads the window again only when one of those days
changed: new calls, a view or later model calls joined late, retention.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

import duckdb

from collector.alerts.detection import Envelope

DAYS_SQL = """
    SELECT start_time::DATE AS day, count(*) AS calls,
           sum(hash(view_tokens, raw_tokens, truncated, over_budget, later_llm_calls, status, schema_fingerprint))
    FROM tool_calls WHERE {where} GROUP BY 1 ORDER BY 1"""
"""The fingerprint of each day of a subject's calls: the figures a window's envelope and shares
are read from, per call, hashed and summed. What a window holds depends on those figures only,
not on which call has which (so ids are left out: hashing them tripled the query's time). Summed,
not XOR-ed: DuckDB combines a hash's arguments so that changing one by the same value changes
every call's hash by the same bits, and an even number of them would cancel out."""

Read = Callable[[datetime, datetime], Envelope]
_T = TypeVar("_T")


@dataclass(frozen=True)
class Windows:
    """What one subject's windows hold in one evaluation (envelopes, shares): kept, or read again."""

    memo: Memo | None
    key: tuple[str, ...]
    days: Sequence[date]
    prints: Sequence[tuple[Any, ...]]
    reach: timedelta
    """How far past a window's end its envelope can still change (a run's later calls)."""
    read: Read

    def envelope(self, start: datetime, end: datetime) -> Envelope:
        return self.of(("envelope",), start, end, lambda: self.read(start, end))

    def of(self, what: tuple[str, ...], start: datetime, end: datetime, read: Callable[[], _T]) -> _T:
        """``what`` of the window [start, end) (its envelope, a fingerprint's share), as ``read`` gives it."""
        if self.memo is None:
            return read()
        lo = bisect.bisect_left(self.days, start.date())
        hi = bisect.bisect_right(self.days, (end + self.reach - timedelta(microseconds=1)).date())
        seen = (tuple(self.days[lo:hi]), tuple(self.prints[lo:hi]))
        return self.memo.kept((*self.key, *what, start.isoformat(), end.isoformat()), seen, read)


class Memo:
    """Envelopes of the windows of past evaluations, by window, with the days they were read from.

    Only the windows the last evaluation used are kept, so its size follows the store's history:
    two a day for each tool and service. One evaluation uses it at a time (``serve``'s watcher
    thread, ``toolmeter watch``)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self._used: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.read = 0
        """Windows read from the store in the evaluation under way (the rest were kept): envelopes,
        and the shares of fingerprints after a change of the dominant one."""
        self.before_read: Callable[[], None] | None = None
        """Called before a window is read from the store (the evaluation lets a writer in there)."""

    def kept(self, window: tuple[str, ...], seen: Any, read: Callable[[], _T]) -> _T:
        hit = self._kept.get(window)
        if hit is not None and hit[0] == seen:
            value: _T = hit[1]
        else:
            if self.before_read is not None:
                self.before_read()
            value = read()
            self.read += 1
        self._used[window] = (seen, value)
        return value

    def start(self) -> None:
        """Begin an evaluation (what one that failed midway used is dropped)."""
        self._used = {}
        self.read = 0

    def finish(self) -> None:
        """End an evaluation: keep what it used, drop the rest (subjects and days gone)."""
        self._kept, self._used = self._used, {}


def windows(
    con: duckdb.DuckDBPyConnection, memo: Memo | None, key: tuple[str, ...], where: str, params: list[Any],
    read: Read, reach: timedelta = timedelta(0),
) -> Windows:  # fmt: skip
    """The windows of the subject whose calls ``where`` selects (``key`` names it), kept in ``memo``
    from one evaluation to the next, or read each time without one."""
    if memo is None:
        return Windows(None, key, (), (), reach, read)
    rows = con.execute(DAYS_SQL.format(where=where), params).fetchall()
    return Windows(memo, key, [r[0] for r in rows], [r[1:] for r in rows], reach, read)
