"""Opening the store: a DuckDB file (waiting out another process's lock) or an attached DuckLake.

DuckDB lets one process hold a database file for writing, and while it does, no other
process can open it, not even read-only. So every opener here retries while the file is
locked, for up to ``wait_s`` seconds (:func:`connect`; :mod:`collector.store.waiting`), and
callers keep a file open only for as long as they need it. A lake has no such lock: the
process keeps it attached and each use gets a cursor (:mod:`collector.store.lake`).

Use :func:`read_connection` for reading and :func:`connect` plus :func:`transaction` for
writing anything other than a batch (batches go through :class:`collector.store.database.Store`).
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator
from typing import Any

import duckdb

from collector.errors import StoreError
from collector.store import lake as L
from collector.store.extensions import sql_literal
from collector.store.schema import date_old_payloads, lake_schema_sql
from collector.store.waiting import LOCK_RETRY_SECONDS, WriteAbandoned, let_waiting_in, pause, retry_locked, waiting_for


def rows_as_dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rest of a query's rows, each as {column: value}."""
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Run the ``with`` body in one transaction: COMMIT at its end, ROLLBACK if it raises.

    A failing ROLLBACK (the connection already broken) is ignored so that the error that
    stopped the body is the one raised.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


ROW_GROUP_ROWS = 8_192
"""Rows per row group of a file store, when it is opened for writing (DuckDB's default is
122,880). Every close checkpoints, and a checkpoint rewrites the last, partly filled row group:
with the default, a flush cost more the more rows the store held (5,000 small spans took 0.07 s
at 5,000 rows and 0.16 s at 60,000), growing until a row group filled. A smaller group bounds
what each flush rewrites, and a write of more rows than a group goes to the file as it is
inserted (DuckDB's optimistic write) instead of through the WAL and then the checkpoint: a
14,000-span write of small results took ~24 us a span at 8,192 rows, ~28 at 4,096 and ~37 at
16,384 (one file, six writes each, alternated). DuckDB does not keep the size in the file: it
is given at each attach."""
STORAGE_VERSION = "v1.4.0"
"""The DuckDB storage format a file store is written in (given at each attach for writing; a
file made by an older toolmeter, in DuckDB's default v1.0.0 format, is converted at its first
write). From v1.4.0 a checkpoint re-uses the on-disk metadata of the row groups it did not
change; in the older format every checkpoint, so every write's closing one, rewrote the metadata
of every row group of every table, and a write cost more the larger the store: with 8,192-row
groups, the checkpoint after a 40-row insert into a 57-column table took ~30 ms at 14,000 rows,
~90 ms at 1.4 million and ~225 ms at 4.2 million, and 12-22 ms in v1.4.0 at all three (a one-off
script, BENCHMARKS.md). DuckDB 1.4 or later reads such a file; an older one does not."""
STORE_ALIAS = "toolmeter_store"


def _open_for_writing(path: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    try:
        _attach(con, path)
    except BaseException:
        con.close()
        raise
    return con


def checkpoint_at_commit(con: duckdb.DuckDBPyConnection) -> None:
    """Have the transaction under way checkpoint as it commits, not write to the log (with DuckDB's
    own ``checkpoint_threshold``, 16 MiB, a small commit goes to the log).

    A write's rows otherwise go to the log at its commit and then, at the checkpoint when the
    writer lets go of the file, into the file again; DuckDB leaves the log out of a commit that
    checkpoints. A receiver's hold of three writes of 6,700 spans took 289-302 ms instead of
    327-344 (BENCHMARKS.md). A setting of the instance, so it stays as set for the thread's next
    transactions: each write sets it."""
    con.execute("SET checkpoint_threshold = '0b'")


def _attach(host: duckdb.DuckDBPyConnection, path: str) -> None:
    host.execute(f"ATTACH {sql_literal(path)} AS {STORE_ALIAS} "
                 f"(ROW_GROUP_SIZE {ROW_GROUP_ROWS}, STORAGE_VERSION {sql_literal(STORAGE_VERSION)})")  # fmt: skip
    try:
        host.execute(f"USE {STORE_ALIAS}")
        # where a plain open of the file would spill (an in-memory database spills to ./.tmp)
        host.execute(f"SET temp_directory = {sql_literal(path + '.tmp')}")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            detach(host)
        raise


def attach_for_writing(
    host: duckdb.DuckDBPyConnection, path: str, *, wait_s: float, stop: threading.Event | None = None
) -> duckdb.DuckDBPyConnection:
    """Attach the file ``path`` for writing to ``host``, an in-memory DuckDB instance its caller
    keeps between writes, waiting out a lock as :func:`connect` does; returns ``host``.

    Starting a DuckDB instance costs ~10-14 ms of CPU here, twice what attaching a file to a
    running one does: a writer that opens the file for every flush (so readers get in between)
    keeps the instance and only attaches and detaches (:func:`detach`) the file."""

    def attached() -> duckdb.DuckDBPyConnection:
        _attach(host, path)
        return host

    return retry_locked(path, attached, wait_s, stop)


def detach(host: duckdb.DuckDBPyConnection) -> None:
    """Let go of the file :func:`attach_for_writing` attached to ``host``: it is checkpointed and
    unlocked, as a closed connection's would be, and ``host`` can attach it again."""
    host.execute("USE memory")
    host.execute(f"DETACH {STORE_ALIAS}")


def connect(
    path: str,
    *,
    read_only: bool,
    wait_s: float = LOCK_RETRY_SECONDS,
    stop: threading.Event | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open the store ``path``: a DuckDB file, or a cursor on a ``ducklake:`` store. Close it after use.

    A file locked by another process is retried for up to ``wait_s`` seconds (0: one try).
    A lake is attached once per process; opened for writing, its tables are created if
    missing, opened read-only it must have them.

    Raises:
        StoreError: the file cannot be opened or stayed locked, or the lake cannot be used.
        WriteAbandoned: ``stop`` was set while waiting for the lock.
    """
    if L.is_lake(path):
        return _lake_connect(path, create=not read_only, stop=stop)
    if read_only:
        return retry_locked(path, lambda: duckdb.connect(path, read_only=True), wait_s, stop)
    return retry_locked(path, lambda: _open_for_writing(path), wait_s, stop)


class ThreadInstances(threading.local):
    """One in-memory DuckDB instance per thread, kept from one use to the next: the store file is
    attached to it for a write or a read and detached after (see :func:`attach_for_writing`).

    An instance inherited through fork belongs to the parent: never used (nor closed) in the child.
    """

    def __init__(self, threads: int | None = None) -> None:
        # threading.local runs __init__ again, with the same arguments, in each thread that uses it
        self.threads = threads
        self.con: duckdb.DuckDBPyConnection | None = None
        self.pid = 0
        self.path: str | None = None
        """The file attached while a read runs (see read_connection)."""

    def get(self) -> duckdb.DuckDBPyConnection:
        """This thread's instance, made at its first use in this process."""
        if self.con is None or self.pid != os.getpid():
            con = duckdb.connect(":memory:")
            if self.threads is not None:
                con.execute(f"SET threads = {self.threads}")  # the instance's own
            self.con, self.pid = con, os.getpid()
        return self.con

    def let_go(self, clean: bool) -> None:
        """Detach the store file from this thread's instance. After a failed write or query
        (``clean`` false) the instance goes too: it may hold a broken transaction or a table
        the failed work registered, and the next use makes a new one."""
        con = self.con
        if con is None:
            return
        if clean:
            try:
                detach(con)
                return
            except duckdb.Error:
                pass
        self.con = None
        with contextlib.suppress(duckdb.Error):
            con.close()


_reading = ThreadInstances()


@contextlib.contextmanager
def read_connection(
    path: str | os.PathLike[str], wait_s: float = LOCK_RETRY_SECONDS
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the store read-only for one query (or a few), waiting out a writer's flush.

    The file is attached to an in-memory DuckDB instance the thread keeps from one read to the
    next, and detached at the end of the ``with`` (so a writer gets in): starting an instance
    costs ~10-14 ms of CPU here, attaching a file to one a few. A read inside another of the
    same file shares it.

    Raises:
        StoreError: the file does not exist, or stayed locked for ``wait_s`` seconds.
    """
    path = os.fspath(path)
    if not L.is_lake(path) and not os.path.exists(path):
        raise StoreError(
            f"no toolmeter store at {path}. Record some tool calls first: `toolmeter demo` loads the sample "
            "traces, `toolmeter ingest FILE --db PATH` loads yours, or add ToolResultProcessor to your agent."
        )
    if _reading.path == path and _reading.con is not None:  # inside a read of the same file: shared
        yield _reading.con
        return
    if L.is_lake(path) or _reading.path is not None:
        # a lake is attached once per process anyway; inside a read of another file, a
        # connection of its own
        con = connect(path, read_only=True, wait_s=wait_s)
        try:
            yield con
        finally:
            con.close()
        return
    host = _reading.get()
    try:
        _attach_to_read(host, path, wait_s)
    except BaseException:
        _reading.let_go(clean=False)
        raise
    _reading.path = path
    clean = False
    try:
        yield host
        clean = True
    finally:
        _reading.path = None
        _reading.let_go(clean)


def _attach_to_read(host: duckdb.DuckDBPyConnection, path: str, wait_s: float) -> None:
    def attached() -> duckdb.DuckDBPyConnection:
        host.execute(f"ATTACH {sql_literal(path)} AS {STORE_ALIAS} (READ_ONLY)")
        host.execute(f"USE {STORE_ALIAS}")
        return host

    retry_locked(path, attached, wait_s, None)


def let_writer_in(con: duckdb.DuckDBPyConnection, path: str) -> bool:
    """Inside a long read of the file ``path`` (``con`` from :func:`read_connection`), let in a
    thread of this process that waits to write it: the file is detached, the writer let in
    (:func:`collector.store.waiting.let_waiting_in`), and attached again once it let go. What
    the read registered on ``con`` stays. Returns whether it did: not when no thread waits, nor
    on a lake."""
    if L.is_lake(path) or not waiting_for(path):
        return False
    detach(con)
    let_waiting_in(path)
    _attach_to_read(con, path, LOCK_RETRY_SECONDS)
    return True


def read_progress(path: str, receiver_id: str) -> tuple[int, int]:
    """The spool position a receiver has written up to (0, 0 when none)."""
    if not L.is_lake(path) and not os.path.exists(path):
        return 0, 0
    con = connect(path, read_only=not L.is_lake(path), wait_s=LOCK_RETRY_SECONDS)
    try:
        exists = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'receiver_progress'"
        ).fetchone()
        if not exists or not exists[0]:
            return 0, 0
        # a lake appends one row per batch; a file keeps one per receiver
        row = con.execute(
            'SELECT segment, "offset" FROM receiver_progress WHERE receiver_id = ? '
            'ORDER BY segment DESC, "offset" DESC LIMIT 1',
            [receiver_id],
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)
    finally:
        con.close()


# --- lakes ----------------------------------------------------------------------------------------

_lake_schema_ready: set[str] = set()
"""Lakes (by store string) whose tables this process has created or found; cleared for a
lake when its catalog connection breaks, so the next attach checks again."""


def _lake_connect(path: str, create: bool, stop: threading.Event | None = None) -> duckdb.DuckDBPyConnection:
    """A cursor on the attached lake; its tables created first when ``create``."""
    spec = L.LakeSpec.parse(path)
    con = L.lake_cursor(spec)
    if path in _lake_schema_ready:
        return con
    # One thread checks (and creates) the tables while no other starts a statement on the
    # instance: the writer, retention and the alert watcher all reach a lake that is new or has
    # just come back at once, and DDL beside another cursor's statement crashes in DuckLake.
    # Every thread past this point has found the tables ready, so none is mid-statement here.
    with L.exclusive():
        if path in _lake_schema_ready:
            return con
        _check_lake_schema(con, spec, path, create, stop)
    return con


def _check_lake_schema(
    con: duckdb.DuckDBPyConnection, spec: L.LakeSpec, path: str, create: bool, stop: threading.Event | None
) -> None:
    try:
        if create:
            _create_lake_tables(con, stop)
        else:
            row = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_catalog = ? AND table_name = 'tool_calls'",
                [L.ALIAS],
            ).fetchone()
            if not row or not row[0]:
                con.close()
                raise StoreError(
                    f"the lake {L.redact(path)} has no toolmeter tables yet. Start `toolmeter serve --db '<lake>'` "
                    "(or any collector) on it, or move a file into it with `toolmeter migrate`."
                )
    except duckdb.Error as e:
        con.close()
        L.forget(spec)
        raise StoreError(f"cannot use the lake {L.redact(path)}: {L.redact(str(e))}") from e
    except WriteAbandoned:
        con.close()
        raise
    _lake_schema_ready.add(path)


def forget_lake_schema(path: str) -> None:
    """Check (and create) the lake's tables again at its next attach (after its catalog went away)."""
    _lake_schema_ready.discard(path)


def _create_lake_tables(con: duckdb.DuckDBPyConnection, stop: threading.Event | None) -> None:
    # several writers may start at once: CREATE ... IF NOT EXISTS races in the catalog, and
    # the loser's commit fails; a retry then finds the tables there
    for attempt in range(10):
        try:
            with transaction(con):
                con.execute(lake_schema_sql())
            with transaction(con):
                date_old_payloads(con)
            return
        except duckdb.Error:
            if attempt == 9:
                raise
            pause(0.05 * (attempt + 1) + random.random() * 0.1, stop, "the lake's tables to be created")
