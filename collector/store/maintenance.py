"""Looking after a DuckLake store: maintenance, and moving a DuckDB file into a lake.

Writers commit about once a second each, so a lake gathers many small Parquet files (and
small commits are inlined in the catalog), one snapshot per commit, and files that only
old snapshots still point at. :func:`maintain` flushes inlined rows to Parquet, trims the
bookkeeping tables that writers append to, merges adjacent files, expires snapshots older
than a cutoff and deletes the files nothing points at any more. Query results are the
same before and after; queries get faster (fewer files to open).

:func:`migrate` copies every table of an embedded store into a lake, payload files
included (a lake keeps payloads inline). It can be run again: rows already in the lake are
skipped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import duckdb
import pyarrow as pa

from collector.errors import InputError, StoreError
from collector.store import lake as L
from collector.store.connection import connect, transaction
from collector.store.database import Store
from collector.store.insertion import insert_new
from collector.store.payloads import PayloadStore, payload_dir

COMMITTED_BATCHES_KEPT = timedelta(days=7)
"""How long batch ids stay in ``committed_batches``: a writer retries a commit for minutes,
never days, so older ids can no longer meet a retry."""


@dataclass
class MaintenanceSummary:
    files_before: int = 0
    files_after: int = 0
    snapshots_before: int = 0
    snapshots_after: int = 0
    inlined_rows_flushed: int = 0
    bookkeeping_rows_trimmed: int = 0
    files_merged: int = 0
    files_deleted: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        return [
            f"data files: {self.files_before:,} -> {self.files_after:,} ({self.files_merged:,} merged, "
            f"{self.files_deleted:,} deleted from storage)",
            f"snapshots: {self.snapshots_before:,} -> {self.snapshots_after:,}",
            f"inlined rows flushed to Parquet: {self.inlined_rows_flushed:,}",
            f"bookkeeping rows trimmed (counters, progress, old batch ids): {self.bookkeeping_rows_trimmed:,}",
            "rows: " + ", ".join(f"{t} {n:,}" for t, n in self.rows.items()),
        ]


_DATA_TABLES = ("tool_calls", "llm_calls", "payloads", "message_views", "tool_call_names", "ingest_issues", "alerts")


def _lake_only(store: str) -> L.LakeSpec:
    if not L.is_lake(store):
        raise InputError(f"{store} is a DuckDB file; maintenance is for DuckLake stores ('ducklake:...')")
    return L.LakeSpec.parse(store)


def _count_files(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute(f"SELECT coalesce(sum(file_count), 0) FROM ducklake_table_info('{L.ALIAS}')").fetchone()
    return int(row[0]) if row else 0


def _count_snapshots(con: duckdb.DuckDBPyConnection) -> int:
    return _count(con, f"ducklake_snapshots('{L.ALIAS}')")


def _count(con: duckdb.DuckDBPyConnection, table_function: str) -> int:
    # fetchall, not fetchone: an autocommit statement whose result is left unread is not
    # committed, and expiring snapshots or deleting files would silently not happen
    rows = con.execute(f"SELECT count(*) FROM {table_function}").fetchall()
    return int(rows[0][0]) if rows else 0


def _sum_first_column(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    rows = con.execute(sql).fetchall()
    total = 0
    for r in rows:
        if r and isinstance(r[0], int):
            total += r[0]
    return total


def maintain(store: str, snapshots_older_than: timedelta = timedelta(hours=1)) -> MaintenanceSummary:
    """Compact and clean the lake ``store``; returns what was done.

    Snapshots younger than ``snapshots_older_than`` are kept (readers that started a query
    on one can finish it), and with them the files they point at.
    """
    _lake_only(store)
    Store(store).ensure_schema()
    summary = MaintenanceSummary()
    con = connect(store, read_only=False, wait_s=0)
    cutoff = f"now() - INTERVAL {int(snapshots_older_than.total_seconds())} SECOND"
    try:
        summary.rows = _row_counts(con)
        summary.snapshots_before = _count_snapshots(con)
        summary.inlined_rows_flushed = _sum_first_column(
            con, f"SELECT rows_flushed FROM ducklake_flush_inlined_data('{L.ALIAS}')"
        )
        summary.files_before = _count_files(con)  # inlined rows are files now: count from here
        summary.bookkeeping_rows_trimmed = _trim_bookkeeping(con)
        # counted in SQL: these functions return TIMESTAMPTZ columns, which Python would need pytz for
        summary.files_merged = _sum_first_column(
            con, f"SELECT files_processed FROM ducklake_merge_adjacent_files('{L.ALIAS}')"
        )
        _count(con, f"ducklake_expire_snapshots('{L.ALIAS}', older_than => {cutoff})")
        summary.files_deleted = _count(con, f"ducklake_cleanup_old_files('{L.ALIAS}', older_than => {cutoff})")
        # a writer killed mid-commit leaves Parquet files no snapshot names; younger ones may be
        # a live writer's commit in progress, so the same cutoff applies
        summary.files_deleted += _count(con, f"ducklake_delete_orphaned_files('{L.ALIAS}', older_than => {cutoff})")
        summary.files_after = _count_files(con)
        summary.snapshots_after = _count_snapshots(con)
        after = _row_counts(con)
        if after != summary.rows:  # maintenance must never change what queries see
            raise StoreError(f"row counts changed during maintenance: {summary.rows} -> {after}")
    except duckdb.Error as e:
        raise StoreError(f"lake maintenance on {L.redact(store)} failed: {L.redact(str(e))}") from e
    finally:
        con.close()
    return summary


def _row_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    out = {}
    for table in _DATA_TABLES:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        out[table] = int(row[0]) if row else 0
    return out


def _trim_bookkeeping(con: duckdb.DuckDBPyConnection) -> int:
    """Keep each collector's latest counters and each receiver's furthest progress."""

    def trim() -> int:
        trimmed = 0
        for sql in (
            """DELETE FROM collector_stats WHERE (collector_id, updated_at) NOT IN (
                   SELECT (collector_id, max(updated_at)) FROM collector_stats GROUP BY collector_id)""",
            """DELETE FROM receiver_progress WHERE (receiver_id, segment, "offset") NOT IN (
                   SELECT (receiver_id, arg_max(segment, segment * 1e15 + "offset"),
                           arg_max("offset", segment * 1e15 + "offset"))
                   FROM receiver_progress GROUP BY receiver_id)""",
            f"""DELETE FROM committed_batches
                WHERE committed_at < now()::TIMESTAMP - INTERVAL {int(COMMITTED_BATCHES_KEPT.total_seconds())} SECOND""",
        ):
            row = con.execute(sql).fetchone()
            trimmed += int(row[0]) if row else 0
        return trimmed

    return _in_transaction(con, trim)


# --- migrate ------------------------------------------------------------------------------------

_KEYS: dict[str, tuple[str, ...]] = {
    "tool_calls": ("trace_id", "span_id"),
    "llm_calls": ("trace_id", "span_id"),
    "payloads": ("trace_id", "span_id", "kind"),
    "message_views": ("trace_id", "tool_call_id"),
    "tool_call_names": ("trace_id", "tool_call_id"),
    "alerts": ("alert_id",),
    "collector_stats": ("collector_id", "updated_at"),
    "ingest_issues": ("logged_at", "collector_id", "span_id", "message"),
}
"""What identifies a row when copying (the file's primary keys, or all that tells rows apart)."""

_BLOB_CHUNK_BYTES = 64 * 1024 * 1024


def migrate(source: str, target: str, progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Copy the DuckDB file ``source`` into the lake ``target``; returns rows copied per table.

    Receiver progress is not copied: a spool belongs to the host and store it was written for.
    """
    say = progress or (lambda _m: None)
    if L.is_lake(source):
        raise InputError("--from must be a DuckDB file (a toolmeter store); lakes are the --to side")
    if not os.path.exists(source):
        raise InputError(f"no toolmeter store at {source}")
    _lake_only(target)
    store = Store(target)
    store.ensure_schema()
    con = connect(target, read_only=False, wait_s=0)
    copied: dict[str, int] = {}
    try:
        con.execute(f"ATTACH '{source.replace(chr(39), chr(39) * 2)}' AS migrate_src (READ_ONLY)")
        try:
            present = {
                r[0]
                for r in con.execute(
                    "SELECT table_name FROM duckdb_tables() WHERE database_name = 'migrate_src'"
                ).fetchall()
            }
            for table, keys in _KEYS.items():
                if table not in present:
                    continue
                if table in ("payloads", "message_views"):
                    copied[table] = _copy_with_blobs(con, source, table, keys)
                else:
                    copied[table] = _in_transaction(con, _copier(con, table, keys))
                say(f"{table}: {copied[table]:,} row(s) copied")
        finally:
            with contextlib.suppress(duckdb.Error):
                con.execute("DETACH migrate_src")
    except duckdb.Error as e:
        raise StoreError(f"cannot migrate {source} into {L.redact(target)}: {L.redact(str(e))}") from e
    finally:
        con.close()
    return copied


def _copier(
    con: duckdb.DuckDBPyConnection, table: str, keys: tuple[str, ...], source: str | None = None
) -> Callable[[], int]:
    src = source or f"(SELECT * FROM migrate_src.{table})"
    return lambda: insert_new(con, table, src, keys, keyed=False, by_start=source is None and table.endswith("_calls"))


def _in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[], int]) -> int:
    with transaction(con):
        return work()


def _copy_with_blobs(con: duckdb.DuckDBPyConnection, source: str, table: str, keys: tuple[str, ...]) -> int:
    """Copy rows whose bytes may sit in payload files: the bytes go inline."""
    blobs = PayloadStore(payload_dir(source))
    cur = con.execute(f"SELECT * FROM migrate_src.{table}")
    columns = [d[0] for d in cur.description or []]
    total = 0
    while True:
        chunk: list[dict[str, Any]] = []
        size = 0
        while size < _BLOB_CHUNK_BYTES:
            rows = cur.fetchmany(256)
            if not rows:
                break
            for r in rows:
                row = dict(zip(columns, r, strict=True))
                if row.get("blob_id") and row.get("inline") is None:
                    try:
                        row["inline"] = blobs.get(row["blob_id"])
                    except StoreError:
                        pass  # a file already gone: the row keeps its blob id, the replay says so
                    else:
                        row["blob_id"] = None  # inline as they are: a lake's Parquet files are compressed
                        row["inline_codec"] = None
                size += len(row.get("inline") or b"")
                chunk.append(row)
        if not chunk:
            return total
        reader = con.cursor()  # `cur` is still being read
        try:
            reader.execute(f"USE {L.ALIAS}")  # a new cursor starts in the in-memory catalog
            reader.register("migrate_chunk", pa.Table.from_pylist(chunk))
            total += _in_transaction(reader, _copier(reader, table, keys, "migrate_chunk"))
            reader.unregister("migrate_chunk")
        finally:
            reader.close()
