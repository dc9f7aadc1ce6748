"""Envelopes kept from one evaluation of the alert rules to the next, while their calls are unchanged.

An evaluation reads, for every tool and service, the windows before and after each day of its
history: two queries a day, and for a service the runs grouped from all of its calls. ``serve``
and ``toolmeter watch`` evaluate every few minutes, and between two evaluations most windows
hold only days that did not change. A :class:`Memo` keeps each window's envelope with the
fingerprint of every day it covers (its calls' count and the sum of a hash of each call's
figures, read in one query a subject), and reads the window again only when one of those days
changed: new calls, a view or later model calls joined late, retention. Those fingerprints,
the store's tools and services and each tool's dominant result schema a day come from one pass
over the calls an evaluation (:func:`survey`), not from a read of each subject's calls.
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

SURVEY_SQL = """
    SELECT tool_name, coalesce(service_name, ?), start_time::DATE, schema_fingerprint, count(*),
           count(*) FILTER (WHERE status <> 'error' AND schema_fingerprint IS NOT NULL),
           sum(hash(view_tokens, raw_tokens, truncated, over_budget, later_llm_calls, status, schema_fingerprint))
    FROM tool_calls GROUP BY ALL"""
"""Every (tool, service, day, result schema) of the calls: their count, those a schema change is
judged on (not errors, fingerprinted), and the sum of :data:`DAYS_SQL`'s hash."""

Read = Callable[[datetime, datetime], Envelope]
Days = tuple[list[date], list[tuple[int, int]]]
"""A subject's days, in order, and each day's fingerprint (its calls, the sum of their hashes)."""
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


@dataclass(frozen=True)
class Survey:
    """What one pass over the store's calls tells an evaluation, instead of two reads of each tool's
    calls and one of each service's: at ten million calls an evaluation after another took 2.45 s
    instead of 4.86 (``benchmarks/bench_alerts.py``; BENCHMARKS.md)."""

    tools: list[str]
    services: list[str]
    """Named as the runs name them (:data:`~collector.query.runs.NO_SERVICE` for calls without one)."""
    days: dict[tuple[str, ...], Days]
    """By subject: ``("tool", name)``, ``("runs", service)``, the keys :func:`windows` is given."""
    daily: dict[str, list[tuple[date, str | None, int]]]
    """By tool: (day, dominant fingerprint, fingerprinted calls), as ``detection._daily`` reads them."""


def survey(con: duckdb.DuckDBPyConnection, no_service: str) -> Survey:
    """One pass over the calls: each subject's days' fingerprints and each tool's schemas a day."""
    sums: dict[tuple[str, ...], dict[date, list[int]]] = {}
    schemas: dict[str, dict[date, dict[str | None, int]]] = {}
    key: tuple[str, ...]
    for tool, service, day, fp, calls, judged, hashed in con.execute(SURVEY_SQL, [no_service]).fetchall():
        for key in (("tool", tool), ("runs", service)):
            print_ = sums.setdefault(key, {}).setdefault(day, [0, 0])
            print_[0] += calls
            print_[1] += hashed
        by_fp = schemas.setdefault(tool, {}).setdefault(day, {})
        by_fp[fp] = by_fp.get(fp, 0) + judged
    days: dict[tuple[str, ...], Days] = {}
    for key, by_day in sums.items():
        ordered = sorted(by_day)
        days[key] = (ordered, [(c, h) for c, h in (by_day[d] for d in ordered)])
    daily = {tool: [(day, _dominant(by_day[day]), sum(by_day[day].values())) for day in sorted(by_day)]
             for tool, by_day in schemas.items()}  # fmt: skip
    return Survey(sorted(t for k, t in sums if k == "tool"), sorted(s for k, s in sums if k == "runs"), days, daily)


def _dominant(counts: dict[str | None, int]) -> str | None:
    """The fingerprint most of a day's judged calls have (the smallest of a tie), None without any."""
    judged = [(-n, fp) for fp, n in counts.items() if n > 0 and fp is not None]
    return min(judged)[1] if judged else None


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
        self.survey: Survey | None = None
        """The evaluation's pass over the calls, when it made one (else each subject's are read)."""

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

    def start(self, found: Survey | None = None) -> None:
        """Begin an evaluation (what one that failed midway used is dropped), with its survey."""
        self._used = {}
        self.read = 0
        self.survey = found

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
    surveyed = memo.survey.days.get(key) if memo.survey is not None else None
    if surveyed is not None:
        return Windows(memo, key, surveyed[0], surveyed[1], reach, read)
    rows = con.execute(DAYS_SQL.format(where=where), params).fetchall()
    return Windows(memo, key, [r[0] for r in rows], [r[1:] for r in rows], reach, read)
