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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import duckdb

from collector.alerts.detection import Envelope

DAYS_SQL = """
    SELECT start_time::DATE AS day, count(*) AS calls,
           sum(hash(trace_id, span_id, status, view_tokens, raw_tokens, truncated, over_budget, later_llm_calls))
    FROM tool_calls WHERE {where} GROUP BY 1 ORDER BY 1"""
"""The fingerprint of each day of a subject's calls: the figures an envelope reads, per call,
hashed and summed. Not XOR-ed: DuckDB combines a hash's arguments so that changing one by the
same value changes every call's hash by the same bits, and an even number of them cancel out."""

Read = Callable[[datetime, datetime], Envelope]


@dataclass(frozen=True)
class Windows:
    """The envelopes of one subject's windows in one evaluation: kept ones, or read by ``read``."""

    memo: Memo | None
    key: tuple[str, ...]
    days: Sequence[date]
    prints: Sequence[tuple[Any, ...]]
    reach: timedelta
    """How far past a window's end its envelope can still change (a run's later calls)."""
    read: Read

    def envelope(self, start: datetime, end: datetime) -> Envelope:
        if self.memo is None:
            return self.read(start, end)
        lo = bisect.bisect_left(self.days, start.date())
        hi = bisect.bisect_right(self.days, (end + self.reach - timedelta(microseconds=1)).date())
        seen = (tuple(self.days[lo:hi]), tuple(self.prints[lo:hi]))
        return self.memo.kept((*self.key, start.isoformat(), end.isoformat()), seen, lambda: self.read(start, end))


class Memo:
    """Envelopes of the windows of past evaluations, by window, with the days they were read from.

    Only the windows the last evaluation used are kept, so its size follows the store's history:
    two a day for each tool and service."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, ...], tuple[Any, Envelope]] = {}
        self._used: dict[tuple[str, ...], tuple[Any, Envelope]] = {}
        self._lock = threading.Lock()
        self.read = 0
        """Windows read from the store in the evaluation under way (the rest were kept)."""
        self.before_read: Callable[[], None] | None = None
        """Called before a window is read from the store (the evaluation lets a writer in there)."""

    def windows(
        self, con: duckdb.DuckDBPyConnection, key: tuple[str, ...], where: str, params: list[Any],
        reach: timedelta, read: Read,
    ) -> Windows:  # fmt: skip
        """The windows of the subject whose calls ``where`` selects (``key`` names it)."""
        rows = con.execute(DAYS_SQL.format(where=where), params).fetchall()
        return Windows(self, key, [r[0] for r in rows], [r[1:] for r in rows], reach, read)

    def kept(self, window: tuple[str, ...], seen: Any, read: Callable[[], Envelope]) -> Envelope:
        with self._lock:
            hit = self._kept.get(window)
        if hit is not None and hit[0] == seen:
            envelope = hit[1]
        else:
            if self.before_read is not None:
                self.before_read()
            envelope = read()
            self.read += 1
        with self._lock:
            self._used[window] = (seen, envelope)
        return envelope

    def start(self) -> None:
        """Begin an evaluation (what one that failed midway used is dropped)."""
        with self._lock:
            self._used = {}
        self.read = 0

    def finish(self) -> None:
        """End an evaluation: keep what it used, drop the rest (subjects and days gone)."""
        with self._lock:
            self._kept, self._used = self._used, {}


def windows(
    con: duckdb.DuckDBPyConnection, memo: Memo | None, key: tuple[str, ...], where: str, params: list[Any],
    read: Read, reach: timedelta = timedelta(0),
) -> Windows:  # fmt: skip
    """A subject's windows, kept in ``memo`` from one evaluation to the next, or read each time without one."""
    if memo is None:
        return Windows(None, key, (), (), reach, read)
    return memo.windows(con, key, where, params, reach, read)
