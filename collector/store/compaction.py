"""Rewriting a DuckDB store file without its free blocks.

Deleting rows does not shrink a DuckDB file: a block is given back for later writes only once
every row in it is gone, and the file keeps its size. :func:`compact_file` copies every table
into a new file made from the current schema and puts it in the old one's place.
"""

from __future__ import annotations

import os

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


def checkpoint(store: str, *, wait_s: float = 0) -> None:
    """Write the store's log into the file (as a closing connection would)."""
    con = connect(store, read_only=False, wait_s=wait_s)
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()


def rewrite_reason(store: str, *, wait_s: float = 0) -> str | None:
    """Why the DuckDB file is worth rewriting, or None: a quarter of it or more is free blocks, a
    quarter or more of its tool calls lie in small row groups (see :data:`SMALL_GROUP_ROWS`), or
    its large tables still have the primary keys of a file made before they were dropped. Opens
    it for writing (its log is written into it first; a held file is waited for up to ``wait_s``
    seconds)."""
    con = connect(store, read_only=False, wait_s=wait_s)
    try:
        con.execute("CHECKPOINT")
        row = con.execute(
            "SELECT total_blocks, free_blocks FROM pragma_database_size() WHERE database_name = current_database()"
        ).fetchone()
        keyed = con.execute(_LARGE_TABLE_KEYS).fetchone()
        groups = con.execute(_GROUPS, [SMALL_GROUP_ROWS, SMALL_GROUP_ROWS]).fetchone()
    finally:
        con.close()
    reasons = []
    if row and row[0] and row[1] / row[0] >= COMPACT_WHEN_FREE:
        reasons.append(f"{row[1] / row[0]:.0%} of it was free blocks")
    if groups and groups[0] >= MIN_SMALL_GROUPS and groups[2] >= COMPACT_WHEN_SMALL * groups[1]:
        reasons.append(f"{groups[2] / groups[1]:.0%} of its tool calls were in {groups[0]:,} small row groups")
    if keyed and keyed[0]:
        reasons.append("its large tables had the primary keys of an older version")
    return "; ".join(reasons) or None


def compact_file(store: str, reason: str | None = None, *, wait_s: float = 0) -> str | None:
    """Rewrite the DuckDB file when it is worth it (:func:`rewrite_reason`) or ``reason`` is given:
    returns why, or None when it was not rewritten.

    The new file is made from the current schema and the rows copied into it, in DuckDB's full
    row groups, so a rewrite also drops old keys (see ``schema.sql``). No writer may write
    meanwhile (a held file is waited for up to ``wait_s`` seconds): readers read the old file
    until the new one takes its name."""
    if reason is None:
        reason = rewrite_reason(store, wait_s=wait_s)
        if reason is None:
            return None
    else:
        checkpoint(store, wait_s=wait_s)  # what the log holds is in the file the rows are copied from
    fresh = store + ".compact.tmp"
    if os.path.exists(fresh):
        os.remove(fresh)
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
