"""The store's DDL: ``schema.sql`` for a DuckDB file, and the same tables rewritten for a DuckLake."""

from __future__ import annotations

import importlib.resources
import re

import duckdb


def schema_sql() -> str:
    """The DDL of the store (``collector/store/schema.sql``)."""
    return importlib.resources.files("collector.store").joinpath("schema.sql").read_text(encoding="utf-8")


_OLD_KEYS = {"tool_calls": "trace_id, span_id", "llm_calls": "trace_id, span_id", "payloads": "trace_id, span_id, kind",
             "message_views": "trace_id, tool_call_id", "tool_call_names": "trace_id, tool_call_id"}  # fmt: skip
"""The primary keys the tables that grow with the calls had before (see schema.sql)."""


def keyed_schema_sql() -> str:
    """The DDL of a file as made before its growing tables lost their primary keys (such files
    still work, through their keys, until ``toolmeter prune`` rewrites them): to make one."""
    sql = schema_sql()
    for table, key in _OLD_KEYS.items():  # a table constraint may come first in the list
        sql = sql.replace(
            f"CREATE TABLE IF NOT EXISTS {table} (", f"CREATE TABLE IF NOT EXISTS {table} (PRIMARY KEY ({key}),"
        )
    return sql


_LAKE_ONLY_DROPS = (
    re.compile(r"^\s*PRIMARY KEY \([^)]*\)\s*\n", re.MULTILINE),  # table-level keys
    re.compile(r" PRIMARY KEY"),
    re.compile(r" NOT NULL"),
    re.compile(r" DEFAULT \S+?(?=[,\s])"),
)


def lake_schema_sql() -> str:
    """The DDL for a DuckLake store: the same tables without keys, NOT NULL or defaults.

    The ``ADD COLUMN IF NOT EXISTS`` statements stay: they bring a lake made by an earlier
    version up to date when a writer attaches it (a no-op on a lake that has the columns).

    DuckLake enforces no primary keys; the writers skip stored rows themselves.
    """
    sql = schema_sql()
    for pattern in _LAKE_ONLY_DROPS:
        sql = pattern.sub("", sql)
    lines = sql.replace(" JSON,", " VARCHAR,").split("\n")
    # a column list whose key clause went away now ends in a comma (before any comment)
    for i, line in enumerate(lines):
        if line.strip() != ");":
            continue
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("--"):
            j -= 1
        code, sep, comment = lines[j].partition("--")
        if code.rstrip().endswith(","):
            lines[j] = code.rstrip()[:-1] + (" " + sep + comment if sep else "")
    return "\n".join(lines)


_UNDATED_PAYLOADS = """
    SELECT 1 FROM payloads p JOIN tool_calls t ON t.trace_id = p.trace_id AND t.span_id = p.span_id
    WHERE p.start_ns IS NULL LIMIT 1"""
_DATE_PAYLOADS = """
    UPDATE payloads SET start_ns = t.start_ns FROM tool_calls t
    WHERE payloads.start_ns IS NULL AND t.trace_id = payloads.trace_id AND t.span_id = payloads.span_id"""


def create_or_upgrade(con: duckdb.DuckDBPyConnection) -> None:
    """Create a file store's missing tables and columns, then fill what a new column needs in the
    rows stored before it (:func:`date_old_payloads`); cheap once done."""
    con.execute(schema_sql())
    date_old_payloads(con)


def date_old_payloads(con: duckdb.DuckDBPyConnection) -> int:
    """Give the payload rows stored before they carried their call's start that start, from the
    call's row; returns how many were dated (none, after the first time).

    A write looks for repeats of its payloads only among those near its own calls' starts
    (DuckDB and DuckLake skip the row groups and files outside): an undated row would never
    be found there. A row whose call is gone stays undated; nothing will repeat it."""
    if con.execute(_UNDATED_PAYLOADS).fetchone() is None:
        return 0
    row = con.execute(_DATE_PAYLOADS).fetchone()
    return int(row[0]) if row else 0
