"""Rewriting a DuckDB store file without its free blocks.

Deleting rows does not shrink a DuckDB file: a block is given back for later writes only once
every row in it is gone, and the file keeps its size. :func:`compact_file` copies every table
into a new file made from the current schema and puts it in the old one's place.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import NamedTuple

import duckdb

from collector.errors import StoreError
from collector.store.connection import STORAGE_VERSION, connect
from collector.store.extensions import sql_literal
from collector.store.schema import schema_sql

COMPACT_WHEN_FREE = 0.25
"""Rewrite a DuckDB file when at least this share of it is free blocks."""
SMALL_GROUP_ROWS = 65_536
"""A row group of fewer rows than this is small. A writer adds its rows in groups of 8,192
(:data:`collector.store.connection.ROW_GROUP_ROWS`: a write's checkpoint then rewrites little);
a rewrite puts them in DuckDB's groups of 122,880. A query's first read of a table reads the
metadata of each of its groups, and every scan checks each: the home page of a store of 10
million calls in small groups took 0.101-0.115 s, and 0.076-0.082 once rewritten, a trace's
replay 0.242-0.258 and 0.113-0.121 (``benchmarks/bench_dashboard.py``, BENCHMARKS.md)."""
COMPACT_WHEN_SMALL = 0.25
"""Rewrite a DuckDB file when at least this share of its tool calls are in small row groups (and
there are :data:`MIN_SMALL_GROUPS` of them): at most a rewrite each time the store grows by a
third, so its cost a call stays the same whatever the store's size."""
MIN_SMALL_GROUPS = 64
"""Fewer small row groups than this (half a million calls) are not worth a rewrite."""
ROOM_BYTES = 256 * 2**20
"""Free space a rewrite leaves on the file's disk beyond the new file (at most the old one's used
blocks): a receiver's spool and DuckDB's log are on that disk, and a full one refuses requests."""


def checkpoint(store: str) -> None:
    """Write the store's log into the file (as a closing connection would)."""
    con = connect(store, read_only=False)
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()


class NoRoom(StoreError):
    """The file's disk has too little free space for the rewritten file beside it."""


class Survey(NamedTuple):
    """One look at a DuckDB store file, after its log was written into it."""

    used: int
    """Bytes in its used blocks: at most what a rewritten file takes."""
    reason: str | None
    """Why it is worth rewriting (None: it is not)."""


def survey(store: str, *, wait_s: float = 0, groups: bool = True) -> Survey:
    """Checkpoint the DuckDB file and say whether it is worth rewriting: a quarter of it or more
    is free blocks, a quarter or more of its tool calls lie in small row groups (see
    :data:`SMALL_GROUP_ROWS`; looked for only with ``groups``, as it reads the table's storage:
    ~1 s at 10 million calls), or its large tables still have the primary keys of a file made
    before they were dropped. Opens it for writing (a held file is waited for up to ``wait_s``
    seconds)."""
    con = connect(store, read_only=False, wait_s=wait_s)
    try:
        con.execute("CHECKPOINT")
        row = con.execute("SELECT block_size, total_blocks, free_blocks FROM pragma_database_size() "
                          "WHERE database_name = current_database()").fetchone()  # fmt: skip
        keyed = con.execute(_LARGE_TABLE_KEYS).fetchone()
        small = con.execute(_GROUPS, [SMALL_GROUP_ROWS, SMALL_GROUP_ROWS]).fetchone() if groups else None
    finally:
        con.close()
    reasons = []
    if row and row[1] and row[2] / row[1] >= COMPACT_WHEN_FREE:
        reasons.append(f"{row[2] / row[1]:.0%} of it was free blocks")
    if small and small[0] >= MIN_SMALL_GROUPS and small[2] >= COMPACT_WHEN_SMALL * small[1]:
        reasons.append(f"{small[2] / small[1]:.0%} of its tool calls were in {small[0]:,} small row groups")
    if keyed and keyed[0]:
        reasons.append("its large tables had the primary keys of an older version")
    used = (row[1] - row[2]) * row[0] if row else os.path.getsize(store)
    return Survey(used, "; ".join(reasons) or None)


def compact_file(
    store: str, reason: str | None = None, *, wait_s: float = 0, surveyed: Survey | None = None
) -> str | None:
    """Rewrite the DuckDB file when it is worth it (:func:`survey`; ``surveyed``, one just made) or
    ``reason`` is given: returns why, or None when it was not rewritten.

    The new file is made from the current schema and the rows copied into it, in DuckDB's full
    row groups, so a rewrite also drops old keys (see ``schema.sql``). No writer may write
    meanwhile (a held file is waited for up to ``wait_s`` seconds): readers read the old file
    until the new one takes its name.

    Raises:
        NoRoom: the disk could not hold the new file beside the old one (nothing was written).
        StoreError: the rewrite failed; the store is unchanged and the partial new file removed.
    """
    used, why = surveyed or survey(store, wait_s=wait_s, groups=reason is None)
    reason = reason or why
    if reason is None:
        return None
    fresh = store + ".compact.tmp"
    try:
        os.remove(fresh)  # left by a rewrite that was killed: before the room is measured, which it takes
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StoreError(f"cannot rewrite {store}: {fresh} is in the way ({e}); move it elsewhere") from e
    folder = os.path.dirname(os.path.abspath(store))
    free = shutil.disk_usage(folder).free
    if free < used + ROOM_BYTES:
        raise NoRoom(
            f"not rewritten ({reason}): the new file needs up to {used / 1e6:,.0f} MB beside {store}, and its disk "
            f"has {free / 1e6:,.0f} MB free (of which {ROOM_BYTES / 2**20:,.0f} MiB stay free, for the spool and "
            "DuckDB's log); free some space there: the next `toolmeter prune` or retention run of `serve` tries again"
        )
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")  # DuckDB draws one on stderr for a statement over 2 s
        # the old file stays attached until the new one has its name: read-only, which lets
        # readers in and keeps every writer out, so none writes to the old file in between
        con.execute(f"ATTACH {sql_literal(store)} AS old (READ_ONLY)")  # ATTACH takes no parameters
        con.execute(f"ATTACH {sql_literal(fresh)} AS fresh (STORAGE_VERSION {sql_literal(STORAGE_VERSION)})")
        con.execute("USE fresh")
        con.execute(schema_sql())
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'old' AND schema_name = 'main'").fetchall()]  # fmt: skip
        made = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'fresh'").fetchall()}  # fmt: skip
        for table in tables:
            if table in made:
                con.execute(f'INSERT INTO fresh.main."{table}" BY NAME SELECT * FROM old.main."{table}"')
            else:  # a table this version no longer makes: kept as it is
                con.execute(f'CREATE TABLE fresh.main."{table}" AS SELECT * FROM old.main."{table}"')
        con.execute("USE memory")
        con.execute("DETACH fresh")
        os.replace(fresh, store)  # atomic: a reader sees the old file or the new one
    except duckdb.Error as e:
        con.close()
        for partial in (fresh, fresh + ".wal"):  # a failed write (a full disk) leaves no half file taking space
            with contextlib.suppress(FileNotFoundError):
                os.remove(partial)
        raise StoreError(f"rewriting {store} failed (the store is unchanged): {e}") from e
    finally:
        con.close()
    return reason


_GROUPS = """
    SELECT count(*) FILTER (WHERE n < ?), coalesce(sum(n), 0), coalesce(sum(n) FILTER (WHERE n < ?), 0)
    FROM (SELECT row_group_id, max(start + count) - min(start) AS n FROM pragma_storage_info('tool_calls')
          WHERE column_id = 0 GROUP BY row_group_id)"""
"""Of ``tool_calls``: its small row groups, its rows, and the rows in small row groups."""

_LARGE_TABLE_KEYS = """
    SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'
      AND database_name = current_database()
      AND table_name IN ('tool_calls', 'llm_calls', 'payloads', 'message_views', 'tool_call_names')"""
