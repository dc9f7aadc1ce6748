"""Data out: a table of the store, or the ranking, as Parquet, CSV or JSON lines.

``tool_calls`` and ``llm_calls`` are written as stored (every column; nested ones, such as
``retained`` and ``warnings``, stay nested in Parquet and JSON and are printed as DuckDB
prints them in CSV); ``ranking`` is what ``toolmeter top --json`` prints. ``since`` keeps
the rows that started at or after it. DuckDB writes the file (``COPY``), from a file store or
a lake alike.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Final

import duckdb
import pyarrow as pa

from collector.errors import InputError
from collector.query.ranking import Filters, ranking

TABLES: Final = ("tool_calls", "llm_calls", "ranking")
FORMATS: Final = {"parquet": "(FORMAT parquet)", "csv": "(FORMAT csv, HEADER true)", "json": "(FORMAT json)"}
"""Format -> DuckDB's COPY options; ``json`` is one object per line."""


def export(con: duckdb.DuckDBPyConnection, table: str, fmt: str, out: str | Path, since: datetime | None = None) -> int:
    """Write ``table`` to ``out`` in ``fmt``; returns the rows written."""
    if table not in TABLES:
        raise InputError(f"--table {table!r}: choose one of {', '.join(TABLES)}")
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    target = Path(out)
    if not target.parent.is_dir():
        raise InputError(f"--out {out}: the folder {target.parent} does not exist")
    literal = "'" + str(target).replace("'", "''") + "'"
    if table == "ranking":
        rows = ranking(con, Filters(since=since))
        con.register(
            "ranking_out", pa.Table.from_pylist(rows) if rows else pa.table({"tool": pa.array([], pa.string())})
        )
        try:
            con.execute(f"COPY (SELECT * FROM ranking_out) TO {literal} {FORMATS[fmt]}")
        finally:
            con.unregister("ranking_out")
        return len(rows)
    where, params = ("start_time >= ?", [since]) if since is not None else ("TRUE", [])
    query = f"SELECT * FROM {table} WHERE {where} ORDER BY start_ns, trace_id, span_id"
    count = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", params).fetchone()
    con.execute(f"COPY ({query}) TO {literal} {FORMATS[fmt]}", params)
    return int(count[0]) if count else 0
