"""DuckLake stores: many collectors on many hosts writing one lake, the same SQL as a file.

A store is named by one string everywhere (``--db``, ``TOOLMETER_DB``, ``db=``):

* a path (``toolmeter.duckdb``): the embedded DuckDB file (:mod:`collector.store.database`);
* ``ducklake:<catalog>``: a DuckLake, e.g. ``ducklake:postgres:dbname=toolmeter host=db1
  user=toolmeter password=...`` (a PostgreSQL catalog: any number of hosts) or
  ``ducklake:/shared/toolmeter.ducklake`` (a DuckDB-file catalog: one host). Table data is
  Parquet under the lake's data path, given once, when the lake is created
  (``--data-path`` or ``TOOLMETER_DATA_PATH``: a shared directory or ``s3://...``); later
  attaches read it from the catalog.

Unlike a DuckDB file, a lake has no single-writer lock, so a process keeps one DuckDB
instance with the lake attached for its whole life and hands out a cursor per use
(:func:`lake_cursor`). Attaching costs about half a second (extensions are loaded from the
``lake`` extra's wheels, :mod:`collector.store.extensions`, and the catalog is read), which would
be too much per query or per flush. When the catalog connection breaks (PostgreSQL
restarted), :func:`forget` drops the instance and the next use attaches again.

The extensions are installed under the state directory (``TOOLMETER_STATE_DIR``, default
``.toolmeter`` in the working directory), never the user's home.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import duckdb

from collector.config import DATA_PATH_ENV, DEFAULT_STATE_DIR, STATE_DIR_ENV, env_text
from collector.errors import StoreError
from collector.store.extensions import LAKE_EXTENSIONS, OBJECT_STORAGE_EXTENSIONS, load_extensions, sql_literal

PREFIX: Final = "ducklake:"
ALIAS: Final = "toolmeter_lake"
"""Name the lake is attached under; ``USE`` makes it the default, so queries are unqualified."""

MAX_RETRY_COUNT: Final = 20
"""``ducklake_max_retry_count`` (DuckLake's default is 10): how often DuckLake itself retries a
commit that lost a race with another writer. With :data:`RETRY_BACKOFF` the waits add up
to about 19 s before the writer's own retry (:mod:`collector.store.database`) takes over."""
RETRY_BACKOFF: Final = 1.2
"""``ducklake_retry_backoff`` (default 1.5, which would make 20 retries wait hours)."""

_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


class _RedactingFilter(logging.Filter):
    """Masks passwords in every record of the ``toolmeter`` logger, its traceback included: a
    DuckDB error chained under a redacted one still carries the catalog's connection string."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.args:
            record.msg, record.args = record.getMessage(), None
        record.msg = redact(str(record.msg))
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


logging.getLogger("toolmeter").addFilter(_RedactingFilter())


def is_lake(store: str) -> bool:
    """True for a ``ducklake:`` store string."""
    return store.startswith(PREFIX)


def redact(store: str) -> str:
    """The store string with any password masked, for messages and logs."""
    return _PASSWORD.sub(r"\1***", store)


@dataclass(frozen=True)
class LakeSpec:
    """Where a lake's catalog is, where its data goes, and where this host keeps state."""

    catalog: str
    """Everything after ``ducklake:``: ``postgres:<conninfo>`` or a catalog file path."""
    data_path: str | None
    state_dir: Path

    @classmethod
    def parse(
        cls, store: str, data_path: str | None = None, state_dir: str | os.PathLike[str] | None = None
    ) -> LakeSpec:
        if not is_lake(store):
            raise StoreError(f"{redact(store)!r} is not a DuckLake store; those start with {PREFIX!r}")
        catalog = store[len(PREFIX) :].strip()
        if not catalog:
            raise StoreError(
                "the DuckLake store names no catalog: use 'ducklake:postgres:dbname=NAME host=HOST user=USER "
                "password=...' or 'ducklake:/path/to/catalog.ducklake'"
            )
        data = env_text(DATA_PATH_ENV, data_path)
        state = Path(
            env_text(STATE_DIR_ENV, os.fspath(state_dir) if state_dir is not None else None) or DEFAULT_STATE_DIR
        )
        return cls(catalog=catalog, data_path=data, state_dir=state.absolute())

    @property
    def is_postgres(self) -> bool:
        return self.catalog.startswith("postgres:")

    @property
    def on_object_storage(self) -> bool:
        return bool(self.data_path) and "://" in str(self.data_path)

    @property
    def local_data_dir(self) -> str | None:
        """The data path when it is a directory of this host (or a shared mount)."""
        if not self.data_path or self.on_object_storage:
            return None
        return str(self.data_path)

    def attach_sql(self, read_only: bool = False) -> str:
        options = []
        if self.data_path:
            path = self.data_path
            if not self.on_object_storage:
                path = os.path.abspath(path)
                os.makedirs(path, exist_ok=True)
                path = path.rstrip("/") + "/"
            options.append(f"DATA_PATH {sql_literal(path)}")
        if read_only:
            options.append("READ_ONLY")
        opts = f" ({', '.join(options)})" if options else ""
        return f"ATTACH {sql_literal(PREFIX + self.catalog)} AS {ALIAS}{opts}"


_instances: dict[tuple[str, str | None], duckdb.DuckDBPyConnection] = {}
_lock = threading.RLock()
"""Held to attach, to hand out a cursor, and (:func:`exclusive`) for DDL: a statement on one
cursor while another commits ``CREATE TABLE`` in the same instance crashes the process
inside DuckLake, so schema changes run alone."""


def exclusive() -> threading.RLock:
    """The lock under which no other thread attaches the lake or starts using a new cursor on it;
    hold it to change the lake's schema."""
    return _lock


def _open(spec: LakeSpec) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    try:
        names = list(LAKE_EXTENSIONS) if spec.is_postgres else ["ducklake"]
        if spec.on_object_storage:
            names += OBJECT_STORAGE_EXTENSIONS
        load_extensions(con, names, state_dir=spec.state_dir)
        con.execute(spec.attach_sql())
        con.execute(f"SET GLOBAL ducklake_max_retry_count = {MAX_RETRY_COUNT}")
        con.execute(f"SET GLOBAL ducklake_retry_backoff = {RETRY_BACKOFF}")
    except duckdb.Error as e:
        con.close()
        raise StoreError(f"cannot attach the DuckLake {redact(PREFIX + spec.catalog)}: {redact(str(e))}") from e
    except BaseException:
        con.close()
        raise
    return con


def lake_cursor(spec: LakeSpec) -> duckdb.DuckDBPyConnection:
    """A new cursor on this process's instance of the lake (attached on first use).

    Cursors of one instance may be used from different threads, one thread each.
    """
    key = (spec.catalog, str(spec.state_dir))
    with _lock:
        con = _instances.get(key)
        if con is None:
            con = _open(spec)
            _instances[key] = con
        cursor = con.cursor()
        try:
            # the default catalog is per connection, and a cursor is a new connection
            cursor.execute(f"USE {ALIAS}")
        except duckdb.Error as e:
            cursor.close()
            raise StoreError(f"cannot use the DuckLake {redact(PREFIX + spec.catalog)}: {redact(str(e))}") from e
    return cursor


def forget(spec: LakeSpec) -> None:
    """Drop this process's instance (after the catalog connection broke); the next use attaches again.

    The instance is not closed here: other threads (the writer, retention, alert evaluation)
    may be running a query on a cursor of it, and closing a connection closes its cursors
    under them, which can crash the process. It is freed when the last cursor is."""
    key = (spec.catalog, str(spec.state_dir))
    with _lock:
        _instances.pop(key, None)


def close_all() -> None:
    """Close every attached lake (tests, and before fork)."""
    with _lock:
        cons = list(_instances.values())
        _instances.clear()
    for con in cons:
        with contextlib.suppress(duckdb.Error):
            con.close()
