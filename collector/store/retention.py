"""Keeping the store bounded: rows older than a retention, payloads older than a shorter one,
and an optional cap on the store's size.

What goes, in this order:

1. payloads (the raw and view bytes kept for replay) of tool calls that started before the
   payload cutoff, and message views carried by LLM calls before it; the figures stay;
2. rows (tool calls, LLM calls, their payloads, ingest issues, resolved alerts) before the
   row cutoff;
3. with a size cap, while the store is over it: the oldest remaining payloads, a tenth at a
   time, then the oldest rows;
4. payload files no row points at any more (older than :data:`BLOB_GRACE`, so a batch that
   wrote its blobs and has not committed yet keeps them).

Rows go by their own start time, so every call that started after the cutoff keeps its
figures, and rankings over the kept window do not change. Each run is recorded in
``retention_runs``, so the replay can say a payload was removed by retention rather than
never stored. Deleting does not shrink a DuckDB file (freed blocks are reused by later
writes); ``compact=True`` rewrites the file when a quarter of it is free or a quarter of its
calls lie in small row groups (:func:`collector.store.compaction.compact_file`); no writer may
write meanwhile (``toolmeter prune``; a running ``serve`` pauses its writer for it when the load
allows).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb

from collector.config import DEFAULT_RETAIN, DEFAULT_RETAIN_PAYLOADS
from collector.errors import InputError
from collector.store import lake as L
from collector.store import rollup
from collector.store.compaction import NoRoom, checkpoint, compact_file, survey
from collector.store.connection import connect
from collector.store.database import Store
from collector.store.payloads import blob_id_of, payload_files
from collector.store.prune_summary import BLOB_GRACE, PruneSummary


@dataclass(frozen=True)
class Retention:
    """How long rows and payloads are kept (None: forever), and the store's size cap in bytes."""

    rows: timedelta | None = DEFAULT_RETAIN
    payloads: timedelta | None = DEFAULT_RETAIN_PAYLOADS
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("rows", "payloads"):
            value = getattr(self, name)
            if value is not None and value <= timedelta(0):
                raise InputError(f"retention {name}={value} must be longer than zero (or None: keep forever)")
        if self.max_bytes is not None and self.max_bytes < 1:
            raise InputError(f"max_bytes={self.max_bytes!r} must be a positive number of bytes")


def prune(
    store: str, retention: Retention, *, now: datetime | None = None, compact: bool = False, dry_run: bool = False
) -> PruneSummary:
    """Apply ``retention`` to ``store`` (a DuckDB file or a lake); returns what was removed.

    ``dry_run``: count what a run would remove and remove nothing (its deletes are made in a
    transaction that is rolled back; no file is removed or rewritten, no run recorded).

    Raises:
        InputError: a size cap on a lake (its size is its object store's: prune by time).
        StoreError: the store cannot be opened or written.
    """
    lake = L.is_lake(store)
    if lake and retention.max_bytes is not None:
        raise InputError(
            "a size cap applies to a DuckDB file; on a DuckLake prune by time (--retain, --retain-payloads)"
        )
    Store(store).ensure_schema()
    now = (now or datetime.now(UTC)).replace(tzinfo=None)
    rows_cut = now - retention.rows if retention.rows is not None else None
    payloads_cut = now - retention.payloads if retention.payloads is not None else None
    if rows_cut is not None and (payloads_cut is None or payloads_cut < rows_cut):
        payloads_cut = rows_cut  # a payload never outlives its row
    summary = PruneSummary(rows_cut, payloads_cut, max_bytes=retention.max_bytes, dry_run=dry_run)
    summary.size_before = None if lake else store_bytes(store)
    kept = _remove(store, summary, payloads_cut, rows_cut, dry_run)
    if kept is not None:  # a dry run
        if not lake:
            summary.payload_files, summary.payload_file_bytes = _remove_unreferenced_blobs(store, summary, kept)
            summary.compacted = survey(store).reason if compact else None
        return summary
    if not lake:
        summary.payload_files, summary.payload_file_bytes = _remove_unreferenced_blobs(store, summary)
        if retention.max_bytes is not None:
            _fit(store, summary, retention.max_bytes, compact)
    _record(store, summary, now)
    if not lake:
        # last, after the record is written: a rewrite also takes in what the record added
        summary.compacted = _rewrite(store, summary, summary.compacted) if compact else None
        if not compact:  # a rewrite, done or not, wrote the log into the file first
            checkpoint(store)
        after = _Sizes.of(store)
        summary.size_after, summary.calls_after = after.total, after.calls
        summary.file_bytes_after = os.path.getsize(store)
    return summary


def _rewrite(store: str, summary: PruneSummary, reason: str | None) -> str | None:
    """:func:`compact_file`, or None with ``summary.no_room`` saying why when its disk is too full."""
    try:
        return compact_file(store, reason)
    except NoRoom as e:
        summary.no_room = str(e)
        return None


class _Rehearsal(Exception):
    """Ends a dry run's transaction: what it deleted is rolled back."""


def _remove(
    store: str, summary: PruneSummary, payloads_cut: datetime | None, rows_cut: datetime | None, dry_run: bool
) -> set[str] | None:
    """Delete what the cutoffs leave out, counted in ``summary``; a dry run returns the payload
    files rows would still point at after the deletes, which it then rolls back."""
    kept: set[str] = set()

    def work(con: duckdb.DuckDBPyConnection) -> None:
        if payloads_cut is not None:
            _count(summary, "payloads", con, _PAYLOADS_OF_CALLS_BEFORE, [payloads_cut])
            _count(summary, "message_views", con, "DELETE FROM message_views WHERE llm_start_ns < ?",
                   [_ns(payloads_cut)])  # fmt: skip
            _count(summary, "tool_call_names", con, "DELETE FROM tool_call_names WHERE asked_ns < ?",
                   [_ns(payloads_cut)])  # fmt: skip
        if rows_cut is not None:
            _count(summary, "payloads", con, _PAYLOADS_OF_CALLS_BEFORE, [rows_cut])
            for table, sql in _ROWS_BEFORE:
                _count(summary, table, con, sql, [rows_cut])
            rollup.forget_through(con, rows_cut)  # the day holding the cutoff is rolled again from what is left
            rollup.refresh(con)
        if dry_run:
            kept.update(r[0] for r in con.execute(_BLOBS).fetchall())
            raise _Rehearsal

    try:
        _write(store, work)
    except _Rehearsal:
        return kept
    return None


_PAYLOADS_OF_CALLS_BEFORE = """
    DELETE FROM payloads WHERE (trace_id, span_id) IN (
        SELECT (trace_id, span_id) FROM tool_calls WHERE start_time < ?)"""

_ROWS_BEFORE = (
    ("tool_calls", "DELETE FROM tool_calls WHERE start_time < ?"),
    ("llm_calls", "DELETE FROM llm_calls WHERE start_time < ?"),
    ("ingest_issues", "DELETE FROM ingest_issues WHERE logged_at < ?"),
    ("alerts", "DELETE FROM alerts WHERE state = 'resolved' AND change_at < ?"),
)


def _count(summary: PruneSummary, table: str, con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> None:
    row = con.execute(sql, params).fetchone()
    summary.removed[table] = summary.removed.get(table, 0) + (int(row[0]) if row else 0)


def _ns(t: datetime) -> int:
    return int(t.replace(tzinfo=UTC).timestamp() * 1e9)


def _write(store: str, work: Any) -> Any:
    return Store(store).in_transaction(work)


def store_bytes(store: str) -> int:
    """The bytes a DuckDB store uses: its used blocks and write-ahead log, and its payload files
    (free blocks of the file, which later writes reuse, are not counted)."""
    return _Sizes.of(store).total


_BLOBS = "SELECT DISTINCT blob_id FROM payloads WHERE blob_id IS NOT NULL"


def _remove_unreferenced_blobs(
    store: str, summary: PruneSummary | None = None, referenced: set[str] | None = None
) -> tuple[int, int]:
    """Delete the payload files no row points at; those within :data:`BLOB_GRACE` are kept and
    counted in ``summary.payload_files_young``. Given the files rows point at (a dry run), count
    the others and delete none."""
    dry_run = referenced is not None
    if referenced is None:
        con = connect(store, read_only=True)
        try:
            referenced = {r[0] for r in con.execute(_BLOBS).fetchall()}
        finally:
            con.close()
    grace = time.time() - BLOB_GRACE.total_seconds()
    files = removed = young = 0
    for path, size, mtime in payload_files(store):
        if blob_id_of(os.path.basename(path)) in referenced:
            continue
        if mtime > grace:
            young += 1
            continue
        try:
            if not dry_run:
                os.remove(path)
        except FileNotFoundError:
            continue
        files += 1
        removed += size
    if summary is not None:
        summary.payload_files_young = young
    return files, removed


_TO_FIT = "to measure what the size cap leaves"


def _fit(store: str, summary: PruneSummary, max_bytes: int, compact: bool) -> None:
    """Remove the oldest payloads, then the oldest rows, a tenth at a time, until the store fits.

    A DuckDB file frees a block only when all of its rows are gone, so its used size lags
    behind deletes: the rounds go by an estimate (payload files exactly; the file's inline
    payloads exactly; the rest of the file in proportion to the tool calls left), so they
    never remove more than the cap asks for. With ``compact`` the file is rewritten first, so
    the estimate starts from blocks that hold data (a file written in many small flushes uses
    more blocks than its rows need, and an estimate from those would take payloads the cap can
    keep), rewritten again if rounds removed anything, and measured; rounds go on until the
    measured size fits.
    """
    if compact:
        summary.compacted = _rewrite(store, summary, _TO_FIT)
        compact = summary.compacted is not None  # no room for one: the cap is met by removing, as without
    base = _Sizes.of(store)

    def estimate() -> float:
        now = _Sizes.of(store)
        rest = max(base.db - base.inline, 0) * (now.calls / base.calls if base.calls else 0)
        return now.files + now.inline + rest

    removed = False
    for what in ("payloads", "rows"):
        while estimate() > max_bytes and _remove_tenth(store, summary, what):
            removed = True
    if not compact:
        return
    if removed:  # else the rewrite above is the file as it stands
        _rewrite(store, summary, _TO_FIT)
    # room for two blocks: the record of this run, and the file's metadata, written after
    limit = max_bytes - 2 * base.block
    for what in ("payloads", "rows"):
        while store_bytes(store) > limit and _remove_tenth(store, summary, what):
            _rewrite(store, summary, _TO_FIT)


@dataclass(frozen=True)
class _Sizes:
    """One look at a DuckDB store's size: used blocks, write-ahead log, inline and file payloads."""

    block: int
    db: int
    wal: int
    inline: int
    files: int
    calls: int

    @classmethod
    def of(cls, store: str) -> _Sizes:
        con = connect(store, read_only=True)
        try:
            block, used = con.execute(
                "SELECT block_size, used_blocks FROM pragma_database_size() WHERE database_name = current_database()"
            ).fetchone() or (0, 0)
            inline, calls = con.execute(
                "SELECT (SELECT coalesce(sum(octet_length(inline)), 0) FROM payloads), (SELECT count(*) FROM tool_calls)"
            ).fetchone() or (0, 0)
        finally:
            con.close()
        wal = store + ".wal"
        return cls(
            int(block), int(block) * int(used), os.path.getsize(wal) if os.path.exists(wal) else 0, int(inline),
            sum(size for _, size, _ in payload_files(store)), int(calls),
        )  # fmt: skip

    @property
    def total(self) -> int:
        """What :func:`store_bytes` counts: used blocks, write-ahead log and payload files."""
        return self.db + self.wal + self.files


def _remove_tenth(store: str, summary: PruneSummary, what: str) -> bool:
    """Remove the oldest tenth of the calls' payloads (``what='payloads'``) or rows; False when none are left."""
    cut = _oldest_tenth(store, what)
    if cut is None:
        return False
    summary.capped = True
    # what the cap removed is recorded as the cutoffs, so the replay can say so
    summary.payloads_before = max(summary.payloads_before or cut, cut)
    if what == "rows":
        summary.rows_before = max(summary.rows_before or cut, cut)
    statements = (("payloads", _PAYLOADS_OF_CALLS_BEFORE),) + (_ROWS_BEFORE if what == "rows" else ())

    def work(con: duckdb.DuckDBPyConnection) -> None:
        for table, sql in statements:
            _count(summary, table, con, sql, [cut])
        if what == "rows":
            rollup.forget_through(con, cut)
            rollup.refresh(con)

    _write(store, work)
    files, size = _remove_unreferenced_blobs(store, summary)
    summary.payload_files += files
    summary.payload_file_bytes += size
    return True


def _oldest_tenth(store: str, what: str) -> datetime | None:
    """The start time below which lie the oldest tenth of the calls with payloads (or of all calls)."""
    source = (
        "tool_calls t JOIN (SELECT DISTINCT trace_id, span_id FROM payloads) p USING (trace_id, span_id)"
        if what == "payloads" else "tool_calls t"
    )  # fmt: skip
    con = connect(store, read_only=True)
    try:
        row = con.execute(
            f"SELECT quantile_disc(t.start_time, 0.1), max(t.start_time), count(*) FROM {source}"
        ).fetchone()
    finally:
        con.close()
    if not row or not row[2]:
        return None
    cut: datetime = row[0]
    return cut + timedelta(microseconds=1)  # just after the tenth's last call: each round removes one or more


def _record(store: str, summary: PruneSummary, now: datetime) -> None:
    removed = json.dumps(summary.removed)

    def work(con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "INSERT INTO retention_runs VALUES (?, ?, ?, ?, ?, ?)",
            [now, summary.rows_before, summary.payloads_before, summary.capped, removed, summary.size_after],
        )

    _write(store, work)


def payloads_removed_before(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The latest payload cutoff retention applied to this store (None: never pruned, or a store
    from before retention)."""
    try:
        row = con.execute("SELECT max(payloads_before) FROM retention_runs").fetchone()
    except duckdb.CatalogException:
        return None
    value = row[0] if row else None
    return value if isinstance(value, datetime) else None
