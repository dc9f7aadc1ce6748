"""The DuckDB store: who owns the file, and how batches get in whole.

DuckDB lets one process hold a database file for writing, and while it does, no other
process can open it, not even read-only. toolmeter therefore never keeps the file open for long:

* the writer opens the file, inserts one batch in one transaction, and closes it again,
  about once a second (:meth:`Store.write`); a writer with a backlog keeps it open over
  several batches (:meth:`Store.holding`), for at most :data:`HOLD_MAX_S` at a time.
  "Opens" is an attach to a DuckDB instance the writing thread keeps, "closes" a detach;
* readers (the dashboard, ``toolmeter top``) open it read-only per query and retry
  while a writer holds it (:func:`read_connection`).

A reader cannot see half a batch (the batch is one transaction, and nobody can open the
file while it runs), and the writer never loses one: when a reader holds the file, the
writer waits and retries with the batch still in memory. Several collector processes may
share one file the same way, taking turns.

Rows are inserted in bulk from Arrow tables; a span already stored (same trace and span
id) is skipped and counted as a duplicate, so ingesting a file twice is harmless.

The same functions serve a DuckLake store (``ducklake:...``, see :mod:`collector.store.lake`):
there is no file lock to wait for, so a process keeps the lake attached; tables carry no
keys, so "skip what is stored" is an anti-join instead of ``INSERT OR IGNORE``, and
counters and progress are appended rather than replaced (readers take the latest row).
Each lake commit records its batch id in ``committed_batches`` in the same transaction,
and a commit that fails (a race with another writer, the catalog restarting) is retried
with the same id: whatever the first try did, the batch ends up stored once.

This module holds :class:`Store` (transactions, lake commit retries); the rest is beside it:
:mod:`~collector.store.connection` (opening, lock waits, :func:`connect`, :func:`transaction`),
:mod:`~collector.store.columns` (the Arrow schemas of inserted rows),
:mod:`~collector.store.insertion` (a batch's SQL), :mod:`~collector.store.windowcost`
(``later_llm_calls``), :mod:`~collector.store.schema` (the DDL) and
:mod:`~collector.store.batch` (:class:`Batch`, :class:`WriteResult`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from collector.errors import RejectedRows, StoreError
from collector.store import insertion
from collector.store import lake as L
from collector.store.batch import Batch, WriteResult
from collector.store.connection import (
    ThreadInstances,
    _lake_connect,
    attach_for_writing,
    checkpoint_at_commit,
    connect,
    forget_lake_schema,
    read_connection,
    read_progress,
    rows_as_dicts,
    transaction,
)
from collector.store.reach import TRACE_HORIZON_NS
from collector.store.schema import create_or_upgrade, lake_schema_sql, schema_sql
from collector.store.starts import TraceStarts
from collector.store.waiting import LOCK_RETRY_SECONDS, WriteAbandoned, pause
from collector.store.windowcost import recount_all_later_llm_calls

# Names callers have always imported from here; they live in the modules above.
__all__ = [
    "LAKE_COMMIT_ATTEMPTS",
    "LOCK_RETRY_SECONDS",
    "TRACE_HORIZON_NS",
    "Batch",
    "Store",
    "WriteAbandoned",
    "WriteResult",
    "connect",
    "lake_schema_sql",
    "read_connection",
    "read_progress",
    "recount_all_later_llm_calls",
    "rows_as_dicts",
    "schema_sql",
    "transaction",
]

logger = logging.getLogger("toolmeter")

_T = TypeVar("_T")

_REFUSED = (duckdb.DataError, duckdb.IntegrityError)
"""DuckDB's errors about the values written (a NOT NULL or key constraint, a conversion, a number
out of range): the same rows fail the same way every time."""
_UNBUILDABLE = (pa.ArrowException, OverflowError, TypeError)
"""Errors building a batch's Arrow tables from its rows: a value no column type can hold."""

LAKE_COMMIT_ATTEMPTS = 8
"""Tries of one lake commit before :meth:`Store.write` gives the batch back to its caller."""
HOLD_MAX_S = 1.0
"""Longest a writer keeps the file open across writes (:meth:`Store.holding`) before it lets a reader in."""
WRITE_THREADS = 1
"""DuckDB threads of a file store's write connection. A batch's insert and commit gain little
from more, and the measuring processes want every other core: on two cores, one thread took a
14,000-span write from ~31 to ~23 µs of CPU a span, and from ~27 to ~24 µs on the clock."""

_TRANSIENT = re.compile(
    r"conflict|connection|server closed|terminat|could not connect|timeout|broken pipe|reset by peer|"
    r"no connection|ssl|shutting down|not accepting|retry",
    re.IGNORECASE,
)


def _transient(e: duckdb.Error) -> bool:
    """A failed lake commit worth retrying: lost a race, or the catalog was briefly away."""
    if isinstance(e, (duckdb.TransactionException, duckdb.IOException, duckdb.ConnectionException)):
        return True
    return bool(_TRANSIENT.search(str(e)))


class Store:
    """Writes batches into one DuckDB file (opened only for the length of a batch, or of
    :meth:`holding`) or a DuckLake.

    A write waits for the file's lock (up to ``lock_wait_s``) or retries a failed lake commit
    (up to :data:`LAKE_COMMIT_ATTEMPTS` times, backing off). Both waits end early when
    the ``stop`` event (constructor argument, or the :attr:`stop` attribute set later, as the
    receiver does with its worker's stopping event) is set:
    the write then raises :class:`WriteAbandoned` (a :class:`StoreError`) and stores nothing,
    so a shutting-down receiver need not sit out a lock or a catalog outage; it keeps the
    batch in its spool and writes it at the next start. A first try is always made, so a
    final flush after ``stop`` is set still goes in when nothing is in the way.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        lock_wait_s: float = LOCK_RETRY_SECONDS,
        stop: threading.Event | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.lock_wait_s = lock_wait_s
        self.stop: threading.Event | None = stop
        """Set it to abandon the retries of a write in progress (see the class docstring)."""
        self._schema_ready = False
        self._holder: int | None = None
        """The thread (ident) inside :meth:`holding`; only its writes use the held connection."""
        self._held: duckdb.DuckDBPyConnection | None = None
        self._hosts = ThreadInstances(threads=WRITE_THREADS)
        """Each writing thread's DuckDB instance (see WRITE_THREADS for its threads)."""
        self._held_since = 0.0
        self.lake: L.LakeSpec | None = L.LakeSpec.parse(self.path) if L.is_lake(self.path) else None
        self.commit_retries = 0
        """Lake commits that failed and were tried again (shown in the collector's counters)."""
        self.rewrites = 0
        """File writes tried again skipping stored keys (a batch that held one; see :meth:`write`)."""
        self._keyed: frozenset[str] | None = frozenset() if self.lake is not None else None
        """The batch tables with a primary key in this file (read at its first write; see schema.sql)."""
        self._within = threading.local()
        """``con``: this thread's transaction under way, which writes made inside it join (see :meth:`write`)."""
        self._starts = TraceStarts(self.path) if self.lake is None else None  # where its traces begin
        if self.lake is not None:
            return
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise StoreError(f"cannot create the store {self.path}: folder {parent} does not exist")

    @property
    def display(self) -> str:
        """The store's name for messages (a lake's password masked)."""
        return L.redact(self.path)

    def ensure_schema(self) -> None:
        """Create the tables if they are missing."""
        if self.lake is not None:
            _lake_connect(self.path, create=True, stop=self.stop).close()
            self._schema_ready = True
            return
        con = connect(self.path, read_only=False, wait_s=self.lock_wait_s, stop=self.stop)
        try:
            create_or_upgrade(con)
        finally:
            con.close()
        self._schema_ready = True

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Keep the file open for this thread's writes inside the ``with``: one open and one
        closing checkpoint for several writes, instead of one each (together about half of a
        small write's cost). Each write is still its own transaction, committed when it
        returns. Readers wait meanwhile, so the file is closed again after a write once it has
        been held :data:`HOLD_MAX_S`, and at the end of the ``with``. Other threads' writes
        (retention, rollups) open the file themselves and wait for it, as they would for
        another process. A lake is attached once per process anyway: nothing changes there.
        """
        if self.lake is not None or self._holder is not None:
            yield
            return
        self._holder = threading.get_ident()
        try:
            yield
        finally:
            self._holder = None
            self._release()

    def _release(self, clean: bool = True) -> None:
        con, self._held = self._held, None
        if con is not None:
            self._hosts.let_go(clean)

    def _open(self) -> tuple[duckdb.DuckDBPyConnection, bool]:
        """A connection for one write, and whether it is the held one (left open after it)."""
        if self._holder != threading.get_ident():
            return self._connect(), False
        if self._held is None:
            self._held = self._connect()
            self._held_since = time.monotonic()
        return self._held, True

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """This thread's in-memory DuckDB instance with the file attached (see ThreadInstances)."""
        host = self._hosts.get()
        try:
            return attach_for_writing(host, self.path, wait_s=self.lock_wait_s, stop=self.stop)
        except BaseException:
            self._hosts.let_go(clean=False)
            raise

    def _transaction(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        """Run ``work(con)`` in one transaction: once on a file, retried on a lake; inside the
        transaction this thread has under way when there is one (see :meth:`write`)."""
        current = getattr(self._within, "con", None)
        if current is not None:
            return work(current)
        if self.lake is not None:
            return self._lake_transaction(work)
        con, held = self._open()
        ok = False
        try:
            if not self._schema_ready:
                create_or_upgrade(con)
                self._schema_ready = True
            with self._inside(con), transaction(con):
                result = work(con)
            ok = True
            return result
        except duckdb.Error as e:
            raise StoreError(f"cannot write to the toolmeter store {self.path}: {e}") from e
        finally:
            if not held:
                self._hosts.let_go(ok)
            elif not ok or time.monotonic() - self._held_since >= HOLD_MAX_S:
                # a failed write may leave the connection unusable: the next one opens afresh
                self._release(ok)

    @contextlib.contextmanager
    def _inside(self, con: duckdb.DuckDBPyConnection) -> Iterator[None]:
        self._within.con = con
        try:
            with self._starts.around(con) if self._starts is not None else contextlib.nullcontext():
                yield
        finally:
            self._within.con = None

    def _lake_transaction(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        assert self.lake is not None
        delay = 0.05
        for attempt in range(1, LAKE_COMMIT_ATTEMPTS + 1):
            con: duckdb.DuckDBPyConnection | None = None
            try:
                con = _lake_connect(self.path, create=True, stop=self.stop)
                with self._inside(con), transaction(con):
                    return work(con)
            except WriteAbandoned:
                raise
            except (duckdb.Error, StoreError) as e:
                message = L.redact(str(e))
                cause = e if isinstance(e, duckdb.Error) else e.__cause__
                transient = isinstance(cause, duckdb.Error) and _transient(cause)
                if transient:
                    # the catalog may have gone away: attach afresh next time
                    L.forget(self.lake)
                    forget_lake_schema(self.path)
                if not transient or attempt == LAKE_COMMIT_ATTEMPTS:
                    raise StoreError(
                        f"cannot commit to the lake {self.display} (attempt {attempt} of {LAKE_COMMIT_ATTEMPTS}): "
                        f"{message}"
                    ) from e
                self.commit_retries += 1
                logger.warning(
                    "toolmeter: lake commit failed (attempt %d of %d), retrying: %s",
                    attempt, LAKE_COMMIT_ATTEMPTS, message,
                )  # fmt: skip
                pause(delay + random.random() * delay, self.stop, f"the lake {self.display} to take a commit")
                delay = min(delay * 2, 2.0)
            finally:
                if con is not None:
                    with contextlib.suppress(duckdb.Error):
                        con.close()
        raise AssertionError("unreachable")

    def replace_tool_rows(
        self,
        rows: list[dict[str, Any]],
        payload_rows: list[dict[str, Any]],
        drop: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> None:
        """Rewrite tool-call rows (after a late join) in one transaction; ``drop`` (trace, span) rows go
        (calls derived from the messages that a tool span now stands for)."""
        if not rows:
            return
        lake = self.lake is not None
        self._transaction(
            lambda con: insertion.replace_tool_rows(con, rows, payload_rows, list(drop), lake, self.keyed(con))
        )

    def keyed(self, con: duckdb.DuckDBPyConnection) -> frozenset[str]:
        """The batch tables of this store that have a primary key: those of a file made before the
        tables that grow with the calls lost theirs keep them (and skip stored rows by key) until
        it is rewritten."""
        if self._keyed is None:
            rows = con.execute(
                "SELECT DISTINCT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
                "AND database_name = current_database() AND schema_name = 'main'"
            ).fetchall()
            self._keyed = frozenset(r[0] for r in rows) & insertion.KEYED_TABLES
            if self._keyed:
                logger.warning(
                    "toolmeter: %s was made with primary keys on its large tables (%s): each write costs more the "
                    "more calls it holds. `toolmeter prune --db %s` (with no collector writing to it) rewrites "
                    "it without them, keeping every row", self.path, ", ".join(sorted(self._keyed)), self.path,
                )  # fmt: skip
        return self._keyed

    def in_transaction(self, work: Callable[[duckdb.DuckDBPyConnection], _T]) -> _T:
        """Run ``work`` in one write transaction, with the same lock waits, lake commit retries
        and stop as a batch (retention, rollups)."""
        return self._transaction(work)

    def refresh_rollups(self) -> int:
        """Roll the closed days that have no rollup yet (:mod:`collector.store.rollup`); returns how many."""
        from collector.store import rollup

        return self._transaction(rollup.refresh)

    def write(self, batch: Batch, then: Callable[[WriteResult], None] | None = None) -> WriteResult:
        """Insert ``batch`` in one transaction; ``then(result)`` runs in it after the insert (the
        joins the batch made possible: its writes, through this store, join the transaction, so
        the batch and its joins are committed together, with one checkpoint).

        Raises:
            RejectedRows: the store refused a value of the batch (a constraint, a conversion, a
                number out of range); nothing of the batch is stored, and writing it again fails.
            StoreError: the store could not be opened or written; nothing of the batch is stored.
            WriteAbandoned: :attr:`stop` was set while the write waited to retry.
        """
        try:
            return self._write(batch, then)
        except WriteAbandoned:
            raise
        except StoreError as e:
            cause = e.__cause__
            while isinstance(cause, StoreError):  # a lake commit's error wraps the attempt's
                cause = cause.__cause__
            if isinstance(cause, _REFUSED):
                raise RejectedRows(str(e)) from cause
            raise
        except _UNBUILDABLE as e:  # a value the batch's Arrow tables cannot hold
            raise RejectedRows(f"cannot build the rows of a batch for {self.display}: {type(e).__name__}: {e}") from e

    def _write(self, batch: Batch, then: Callable[[WriteResult], None] | None) -> WriteResult:
        if self.lake is None:
            # a batch rarely holds a key that is stored already, so it first goes in as new (a plain
            # INSERT: see insertion.insert_batch); one that does (a span sent twice, a spool
            # replayed) fails on it, is rolled back, and goes in again skipping what is stored
            def insert(con: duckdb.DuckDBPyConnection, fresh: bool) -> WriteResult:
                result = insertion.insert_batch(
                    con, batch, lake=False, fresh=fresh, keyed=self.keyed(con), trace_starts=self._starts
                )
                checkpoint_at_commit(con)
                if then is not None:
                    then(result)
                return result

            if getattr(self._within, "con", None) is not None:
                # written from inside another write (its joins): a stored key must not end that
                # whole transaction, so stored keys are skipped from the start
                return self._transaction(lambda con: insert(con, False))
            try:
                return self._transaction(lambda con: insert(con, True))
            except StoreError as e:
                if not isinstance(e.__cause__, duckdb.ConstraintException):
                    raise
                self.rewrites += 1
            return self._transaction(lambda con: insert(con, False))

        def work(con: duckdb.DuckDBPyConnection) -> WriteResult:
            done = con.execute(
                "SELECT tool_calls, llm_calls FROM committed_batches WHERE batch_id = ? LIMIT 1", [batch.commit_id]
            ).fetchone()
            if done is not None:
                # an earlier try committed before its answer was lost: count it, write nothing
                return WriteResult(int(done[0] or 0), int(done[1] or 0), 0)
            result = insertion.insert_batch(con, batch, lake=True)
            if then is not None:
                then(result)
            con.execute(
                "INSERT INTO committed_batches VALUES (?, ?, now()::TIMESTAMP, ?, ?)",
                [batch.commit_id, (batch.stats or {}).get("collector_id"), result.tool_calls, result.llm_calls],
            )
            return result

        return self._lake_transaction(work)
