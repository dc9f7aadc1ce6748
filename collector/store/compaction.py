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
"""Rewrite a DuckDB file (unless asked to always) when at least this share of it is free blocks."""


def checkpoint(store: str) -> None:
    """Write the store's log into the file (as a closing connection would)."""
    con = connect(store, read_only=False)
    try:
        con.execute("CHECKPOINT")
    finally:
        con.close()


def compact_file(store: str, always: bool = False) -> bool:
    """Rewrite the DuckDB file without its free blocks (when they are a quarter of it or more,
    when its large tables still have the primary keys of a file made before they were dropped,
    or ``always``). The new file is made from the current schema and the rows copied into it, so
    a rewrite also drops those keys (see ``schema.sql``). Needs the file to itself: not from
    inside a process that writes to it."""
    con = connect(store, read_only=False, wait_s=0)
    try:
        con.execute("CHECKPOINT")
        row = con.execute(
            "SELECT total_blocks, free_blocks FROM pragma_database_size() WHERE database_name = current_database()"
        ).fetchone()
        keyed = con.execute(_LARGE_TABLE_KEYS).fetchone()
    finally:
        con.close()
    sparse = bool(row and row[0] and row[1] / row[0] >= COMPACT_WHEN_FREE)
    if not always and not sparse and not (keyed and keyed[0]):
        return False
    fresh = store + ".compact.tmp"
    if os.path.exists(fresh):
        os.remove(fresh)
    con = duckdb.connect()
    try:
        # the old file stays attached (and locked) until the new one has its name, so no
        # writer in another process can write to the old file in between
        con.execute(f"ATTACH {sql_literal(store)} AS old")  # ATTACH takes no parameters
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
    return True


_LARGE_TABLE_KEYS = """
    SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'
      AND database_name = current_database()
      AND table_name IN ('tool_calls', 'llm_calls', 'payloads', 'message_views', 'tool_call_names')"""
