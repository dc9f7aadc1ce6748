"""Reading the store from the dashboard: open per query, read-only, waiting out a writer.

The collector opens the DuckDB file only for the length of a flush (see
``collector.store.database``), so the dashboard never holds it: each query opens the file
read-only, runs, and closes. Missing or locked files become a
:class:`collector.errors.StoreError` with what to do, shown on the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import duckdb

from collector.config import store_path
from collector.store.database import read_connection

T = TypeVar("T")


def db_path(argv: list[str] | None = None) -> str:
    """The store path: ``--db PATH`` after streamlit's ``--``, else ``$TOOLMETER_DB``, else the same
    default as the collector's (:data:`collector.config.DEFAULT_DB`)."""
    args = argv or []
    if "--db" in args:
        i = args.index("--db")
        if i + 1 < len(args):
            return args[i + 1]
    return store_path()


def run_query(path: str, query: Callable[[duckdb.DuckDBPyConnection], T], wait_s: float = 10.0) -> T:
    """Run ``query`` on a fresh read-only connection."""
    with read_connection(path, wait_s=wait_s) as con:
        return query(con)
