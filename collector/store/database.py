"""The DuckDB store: who owns the file, and how batches get in whole.

DuckDB lets one process hold a database file for writing, and while it does, no other
process can open it, not even read-only. toolmeter therefore never keeps the file open:

* the writer opens the file, inserts one batch in one transaction, and closes it again,
  about once a second (:meth:`Store.write`);
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
"""

from __future__ import annotations

import contextlib
import importlib.resources
import logging
import os
import random
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from collector.errors import StoreError
from collector.store import lake as L

logger = logging.getLogger("toolmeter")

LOCK_RETRY_SECONDS = 30.0
"""How long a writer or reader waits for another process to release the file."""

_TOOL_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("tool_name", pa.string()),
        ("service_name", pa.string()),
        ("agent_name", pa.string()),
        ("dialect", pa.string()),
        ("source", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ms", pa.float64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("encoding", pa.string()),
        ("raw_bytes", pa.int64()),
        ("raw_tokens", pa.int64()),
        ("raw_tokens_exact", pa.bool_()),
        ("view_bytes", pa.int64()),
        ("view_tokens", pa.int64()),
        ("view_tokens_exact", pa.bool_()),
        ("view_source", pa.string()),
        ("budget_tokens", pa.int64()),
        ("over_budget", pa.bool_()),
        ("view_over_budget", pa.bool_()),
        ("truncated", pa.bool_()),
        ("truncation_source", pa.string()),
        ("truncation_kind", pa.string()),
        ("retained_ranges", pa.list_(pa.list_(pa.int64()))),
        ("retained_source", pa.string()),
        ("retained_bytes", pa.int64()),
        ("omitted_bytes", pa.int64()),
        ("shape", pa.string()),
        ("shape_source", pa.string()),
        ("schema_fingerprint", pa.string()),
        ("schema_fields", pa.list_(pa.string())),
        ("arguments", pa.string()),
        ("warnings", pa.list_(pa.string())),
        ("redactions", pa.int32()),
        ("retained_coverage", pa.float64()),
        ("raw_wrapper", pa.string()),
        ("wrapper_bytes", pa.int64()),
        ("wrapper_tokens", pa.int64()),
        ("view_join", pa.string()),
        ("origin", pa.string()),
    ]
)
_LLM_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("service_name", pa.string()),
        ("dialect", pa.string()),
        ("source", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("model", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
    ]
)
_PAYLOAD_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("kind", pa.string()),
        ("total_bytes", pa.int64()),
        ("sha256", pa.string()),
        ("cut", pa.bool_()),
        ("head_bytes", pa.int64()),
        ("tail_bytes", pa.int64()),
        ("blob_id", pa.string()),
        ("inline", pa.binary()),
    ]
)
_MESSAGE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("llm_span_id", pa.string()),
        ("bytes", pa.int64()),
        ("tokens", pa.int64()),
        ("blob_id", pa.string()),
        ("inline", pa.binary()),
        ("tool_name", pa.string()),
        ("position", pa.int32()),
        ("llm_start_ns", pa.int64()),
        ("service_name", pa.string()),
        ("dialect", pa.string()),
    ]
)
_ISSUE_SCHEMA = pa.schema(
    [
        ("collector_id", pa.string()),
        ("level", pa.string()),
        ("source", pa.string()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("field", pa.string()),
        ("message", pa.string()),
    ]
)


@dataclass
class Batch:
    """Everything one flush writes, in one transaction."""

    tool_rows: list[dict[str, Any]] = field(default_factory=list)
    llm_rows: list[dict[str, Any]] = field(default_factory=list)
    payload_rows: list[dict[str, Any]] = field(default_factory=list)
    issue_rows: list[dict[str, Any]] = field(default_factory=list)
    message_rows: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    join_traces: list[str] = field(default_factory=list)
    """Traces whose tool calls may now be joined to a message view (see WriteResult)."""
    progress: tuple[str, int, int] | None = None
    """(receiver id, spool segment, offset) reached by this batch, committed with it."""
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Identifies the batch across retries of its commit (lake stores; see committed_batches)."""

    @property
    def commit_id(self) -> str:
        """The batch id, derived from the spool position when there is one (stable across restarts)."""
        if self.progress is not None:
            return f"{self.progress[0]}@{self.progress[1]}:{self.progress[2]}"
        return self.batch_id

    def extend(self, other: Batch) -> None:
        """Add another batch's rows to this one (to write them in one transaction)."""
        self.tool_rows += other.tool_rows
        self.llm_rows += other.llm_rows
        self.payload_rows += other.payload_rows
        self.issue_rows += other.issue_rows
        self.message_rows += other.message_rows

    def __len__(self) -> int:
        return len(self.tool_rows) + len(self.llm_rows) + len(self.issue_rows)


@dataclass(frozen=True)
class WriteResult:
    tool_calls: int
    llm_calls: int
    duplicates: int
    pending_joins: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of ``Batch.join_traces`` still showing the raw although an LLM call's input
    carried their response: read in the same connection as the write, with their stored raw
    payload's location (``raw_inline``, ``raw_blob_id``, ``raw_cut``)."""
    idless_calls: list[dict[str, Any]] = field(default_factory=list)
    """Tool calls of those traces with no call id and no view yet (to match by the conversation),
    with their stored raw payload's location."""
    unclaimed_views: list[dict[str, Any]] = field(default_factory=list)
    """Message views of those traces that no stored tool call has the id of."""


def rows_as_dicts(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rest of a query's rows, each as {column: value}."""
    cols = [d[0] for d in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def schema_sql() -> str:
    """The DDL of the store (``collector/store/schema.sql``)."""
    return importlib.resources.files("collector.store").joinpath("schema.sql").read_text(encoding="utf-8")


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


def _is_lock_error(e: Exception) -> bool:
    text = str(e)
    return "Could not set lock" in text or "Conflicting lock" in text


_lake_schema_ready: set[str] = set()


def _lake_connect(path: str, create: bool) -> duckdb.DuckDBPyConnection:
    """A cursor on the attached lake; its tables created first when ``create``."""
    spec = L.LakeSpec.parse(path)
    con = L.lake_cursor(spec)
    if path in _lake_schema_ready:
        return con
    try:
        if create:
            _create_lake_tables(con)
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
    _lake_schema_ready.add(path)
    return con


def _create_lake_tables(con: duckdb.DuckDBPyConnection) -> None:
    # several writers may start at once: CREATE ... IF NOT EXISTS races in the catalog, and
    # the loser's commit fails; a retry then finds the tables there
    for attempt in range(10):
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(lake_schema_sql())
            con.execute("COMMIT")
            return
        except duckdb.Error:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            if attempt == 9:
                raise
            time.sleep(0.05 * (attempt + 1) + random.random() * 0.1)


def _connect(path: str, read_only: bool, wait_s: float) -> duckdb.DuckDBPyConnection:
    if L.is_lake(path):
        return _lake_connect(path, create=not read_only)
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            return duckdb.connect(path, read_only=read_only)
        except duckdb.Error as e:
            if not _is_lock_error(e):
                raise StoreError(f"cannot open the toolmeter store {path}: {e}") from e
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"the toolmeter store {path} stayed locked by another process for {wait_s:.0f} s. "
                    "Only one process may hold a DuckDB file at a time: stop the process that keeps it open "
                    "(a DuckDB shell or notebook), or give this one another --db."
                ) from e
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


@contextlib.contextmanager
def read_connection(
    path: str | os.PathLike[str], wait_s: float = LOCK_RETRY_SECONDS
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the store read-only for one query (or a few), waiting out a writer's flush.

    Raises:
        StoreError: the file does not exist, or stayed locked for ``wait_s`` seconds.
    """
    path = os.fspath(path)
    if not L.is_lake(path) and not os.path.exists(path):
        raise StoreError(
            f"no toolmeter store at {path}. Record some tool calls first: `toolmeter demo` loads the sample "
            "traces, `toolmeter ingest FILE --db PATH` loads yours, or add ToolResultProcessor to your agent."
        )
    con = _connect(path, read_only=True, wait_s=wait_s)
    try:
        yield con
    finally:
        con.close()


TRACE_HORIZON_NS = 24 * 3600 * 10**9
"""How far before a batch's earliest span a tool call may lie and still have its window
cost updated by that batch's LLM calls. Bounds the work of each write (DuckDB skips older
row groups by their min/max start time); agent runs last minutes, not days."""


def _update_later_llm_calls(con: duckdb.DuckDBPyConnection, batches: list[str]) -> None:
    """Recount, for the traces this batch touched, how many LLM calls follow each tool call.

    Window cost needs it, and a query-time join over every call costs about a second per
    million calls, so it is kept as a column. Recounting whole traces (not adding to
    counts) keeps it right whatever order spans arrive in, and when a batch is retried.
    """
    touched = " UNION ".join(f"SELECT trace_id FROM {b}" for b in batches)
    starts = " UNION ALL ".join(f"SELECT start_ns FROM {b}" for b in batches)
    con.execute(
        f"""
        UPDATE tool_calls SET later_llm_calls = n.later FROM (
            WITH touched AS ({touched}),
            lo AS (SELECT min(start_ns) - {TRACE_HORIZON_NS} AS lo FROM ({starts})),
            c AS (SELECT trace_id, span_id, end_ns FROM tool_calls
                  WHERE start_ns >= (SELECT lo FROM lo) AND trace_id IN (SELECT trace_id FROM touched)),
            l AS (SELECT trace_id, start_ns,
                         row_number() OVER (PARTITION BY trace_id ORDER BY start_ns DESC) AS remaining
                  FROM llm_calls
                  WHERE start_ns >= (SELECT lo FROM lo) AND trace_id IN (SELECT trace_id FROM touched))
            SELECT c.trace_id, c.span_id, coalesce(l.remaining, 0) AS later
            FROM c ASOF LEFT JOIN l ON c.trace_id = l.trace_id AND l.start_ns >= c.end_ns
        ) AS n
        WHERE tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
          AND tool_calls.later_llm_calls IS DISTINCT FROM n.later
        """
    )


def recount_all_later_llm_calls(con: duckdb.DuckDBPyConnection) -> None:
    """Recount ``later_llm_calls`` for every tool call (after a bulk load done in SQL)."""
    con.execute(
        """
        UPDATE tool_calls SET later_llm_calls = n.later FROM (
            WITH l AS (SELECT trace_id, start_ns,
                              row_number() OVER (PARTITION BY trace_id ORDER BY start_ns DESC) AS remaining
                       FROM llm_calls)
            SELECT c.trace_id, c.span_id, coalesce(l.remaining, 0) AS later
            FROM tool_calls c ASOF LEFT JOIN l ON c.trace_id = l.trace_id AND l.start_ns >= c.end_ns
        ) AS n
        WHERE tool_calls.trace_id = n.trace_id AND tool_calls.span_id = n.span_id
        """
    )


def read_progress(path: str, receiver_id: str) -> tuple[int, int]:
    """The spool position a receiver has written up to (0, 0 when none)."""
    if not L.is_lake(path) and not os.path.exists(path):
        return 0, 0
    con = _connect(path, read_only=not L.is_lake(path), wait_s=LOCK_RETRY_SECONDS)
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


LAKE_COMMIT_ATTEMPTS = 8
"""Tries of one lake commit before :meth:`Store.write` gives the batch back to its caller."""

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


def _insert_new(
    con: duckdb.DuckDBPyConnection, table: str, source: str, keys: tuple[str, ...], lake: bool,
    select: str = "*", by_start: bool = False,
) -> int:  # fmt: skip
    """Insert the rows of ``source`` whose ``keys`` are not stored yet; returns how many.

    A file has primary keys (``INSERT OR IGNORE``); a lake has none, so it anti-joins,
    narrowed to the batch's time span when ``by_start`` (DuckLake skips other files by
    their min/max), and drops repeats inside the batch.
    """
    if not lake:
        row = con.execute(f"INSERT OR IGNORE INTO {table} BY NAME SELECT {select} FROM {source}").fetchone()
        return int(row[0]) if row else 0
    match = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    if by_start:
        match += (
            f" AND t.start_ns BETWEEN (SELECT min(start_ns) FROM {source}) AND (SELECT max(start_ns) FROM {source})"
        )
    row = con.execute(
        f"""INSERT INTO {table} BY NAME SELECT {select}
            FROM (SELECT DISTINCT ON ({", ".join(keys)}) * FROM {source}) AS s
            WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {match})"""
    ).fetchone()
    return int(row[0]) if row else 0


class Store:
    """Writes batches into one DuckDB file (opened only for the length of a batch) or a DuckLake."""

    def __init__(self, path: str | os.PathLike[str], lock_wait_s: float = LOCK_RETRY_SECONDS) -> None:
        self.path = os.fspath(path)
        self.lock_wait_s = lock_wait_s
        self._schema_ready = False
        self.lake: L.LakeSpec | None = L.LakeSpec.parse(self.path) if L.is_lake(self.path) else None
        self.commit_retries = 0
        """Lake commits that failed and were tried again (shown in the collector's counters)."""
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
            _lake_connect(self.path, create=True).close()
            self._schema_ready = True
            return
        con = _connect(self.path, read_only=False, wait_s=self.lock_wait_s)
        try:
            con.execute(schema_sql())
        finally:
            con.close()
        self._schema_ready = True

    def _transaction(self, work: Any) -> Any:
        """Run ``work(con)`` in one transaction: once on a file, retried on a lake."""
        if self.lake is None:
            con = _connect(self.path, read_only=False, wait_s=self.lock_wait_s)
            try:
                if not self._schema_ready:
                    con.execute(schema_sql())
                    self._schema_ready = True
                con.execute("BEGIN TRANSACTION")
                try:
                    result = work(con)
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                return result
            except duckdb.Error as e:
                raise StoreError(f"cannot write to the toolmeter store {self.path}: {e}") from e
            finally:
                con.close()
        return self._lake_transaction(work)

    def _lake_transaction(self, work: Any) -> Any:
        assert self.lake is not None
        delay = 0.05
        for attempt in range(1, LAKE_COMMIT_ATTEMPTS + 1):
            con: duckdb.DuckDBPyConnection | None = None
            try:
                con = _lake_connect(self.path, create=True)
                con.execute("BEGIN TRANSACTION")
                try:
                    result = work(con)
                    con.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    raise
                return result
            except (duckdb.Error, StoreError) as e:
                message = L.redact(str(e))
                cause = e if isinstance(e, duckdb.Error) else e.__cause__
                transient = isinstance(cause, duckdb.Error) and _transient(cause)
                if transient:
                    # the catalog may have gone away: attach afresh next time
                    L.forget(self.lake)
                    _lake_schema_ready.discard(self.path)
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
                time.sleep(delay + random.random() * delay)
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

        def work(con: duckdb.DuckDBPyConnection) -> None:
            if drop:
                keys = [f"{t}:{sp}" for t, sp in drop]
                for table in ("tool_calls", "payloads"):
                    con.execute(
                        f"DELETE FROM {table} WHERE trace_id || ':' || span_id IN (SELECT unnest(?::VARCHAR[]))", [keys]
                    )
            con.register("tool_batch", pa.Table.from_pylist(rows, schema=_TOOL_SCHEMA))
            columns = [f.name for f in _TOOL_SCHEMA if f.name not in ("trace_id", "span_id")]
            assignments = ", ".join(f'"{c}" = b."{c}"' for c in columns)
            con.execute(
                f"UPDATE tool_calls SET {assignments} FROM tool_batch b "
                "WHERE tool_calls.trace_id = b.trace_id AND tool_calls.span_id = b.span_id"
            )
            con.unregister("tool_batch")
            if payload_rows:
                con.register("payload_batch", pa.Table.from_pylist(payload_rows, schema=_PAYLOAD_SCHEMA))
                _insert_new(con, "payloads", "payload_batch", ("trace_id", "span_id", "kind"), lake)
                con.unregister("payload_batch")

        self._transaction(work)

    def write(self, batch: Batch) -> WriteResult:
        """Insert ``batch`` in one transaction.

        Raises:
            StoreError: the store could not be opened or written; nothing of the batch is stored.
        """
        if self.lake is None:
            return self._transaction(lambda con: self._insert(con, batch, lake=False))  # type: ignore[no-any-return]

        def work(con: duckdb.DuckDBPyConnection) -> WriteResult:
            done = con.execute(
                "SELECT tool_calls, llm_calls FROM committed_batches WHERE batch_id = ? LIMIT 1", [batch.commit_id]
            ).fetchone()
            if done is not None:
                # an earlier try committed before its answer was lost: count it, write nothing
                return WriteResult(int(done[0] or 0), int(done[1] or 0), 0)
            result = self._insert(con, batch, lake=True)
            con.execute(
                "INSERT INTO committed_batches VALUES (?, ?, now()::TIMESTAMP, ?, ?)",
                [batch.commit_id, (batch.stats or {}).get("collector_id"), result.tool_calls, result.llm_calls],
            )
            return result

        return self._lake_transaction(work)  # type: ignore[no-any-return]

    def _insert(self, con: duckdb.DuckDBPyConnection, batch: Batch, lake: bool) -> WriteResult:
        tools = llms = 0
        registered: list[str] = []
        if batch.tool_rows:
            con.register("tool_batch", pa.Table.from_pylist(batch.tool_rows, schema=_TOOL_SCHEMA))
            registered.append("tool_batch")
            # a call derived from the messages gives way to the tool span of the same call id
            derived = """FROM tool_calls d WHERE d.origin = 'messages'
                         AND d.trace_id IN (SELECT trace_id FROM tool_batch WHERE tool_call_id IS NOT NULL) AND EXISTS (SELECT 1 FROM tool_batch b
                         WHERE b.trace_id = d.trace_id AND b.tool_call_id = d.tool_call_id AND b.origin <> 'messages')"""
            gone = con.execute(f"SELECT d.trace_id, d.span_id {derived}").fetchall()
            if gone:
                keys = [f"{t}:{sp}" for t, sp in gone]
                for table in ("tool_calls", "payloads"):
                    con.execute(
                        f"DELETE FROM {table} WHERE trace_id || ':' || span_id IN (SELECT unnest(?::VARCHAR[]))", [keys]
                    )
            tools = _insert_new(con, "tool_calls", "tool_batch", ("trace_id", "span_id"), lake,
                                "*, make_timestamp(start_ns // 1000) AS start_time", by_start=True)  # fmt: skip
        if batch.llm_rows:
            con.register("llm_batch", pa.Table.from_pylist(batch.llm_rows, schema=_LLM_SCHEMA))
            registered.append("llm_batch")
            llms = _insert_new(con, "llm_calls", "llm_batch", ("trace_id", "span_id"), lake,
                               "*, make_timestamp(start_ns // 1000) AS start_time", by_start=True)  # fmt: skip
            # a model-call span around another one (ADK's call_llm around generate_content) is
            # one call: the inner one, which made the request, is kept
            row = con.execute(
                """DELETE FROM llm_calls WHERE trace_id IN (SELECT trace_id FROM llm_batch)
                   AND trace_id || ':' || span_id IN (
                       SELECT trace_id || ':' || parent_span_id FROM llm_calls
                       WHERE trace_id IN (SELECT trace_id FROM llm_batch) AND parent_span_id IS NOT NULL)"""
            ).fetchone()
            wrappers = int(row[0]) if row else 0
            llms -= min(wrappers, llms)
        if registered:
            _update_later_llm_calls(con, registered)
        for name in registered:
            con.unregister(name)
        if batch.payload_rows:
            con.register("payload_batch", pa.Table.from_pylist(batch.payload_rows, schema=_PAYLOAD_SCHEMA))
            _insert_new(con, "payloads", "payload_batch", ("trace_id", "span_id", "kind"), lake)
            con.unregister("payload_batch")
        if batch.message_rows:
            con.register("message_batch", pa.Table.from_pylist(batch.message_rows, schema=_MESSAGE_SCHEMA))
            _insert_new(con, "message_views", "message_batch", ("trace_id", "tool_call_id"), lake)
            con.unregister("message_batch")
        if batch.issue_rows:
            con.register("issue_batch", pa.Table.from_pylist(batch.issue_rows, schema=_ISSUE_SCHEMA))
            con.execute("INSERT INTO ingest_issues BY NAME SELECT now()::TIMESTAMP AS logged_at, * FROM issue_batch")
            con.unregister("issue_batch")
        # counters and progress: one row per collector (file), or appended per batch (lake:
        # replacing a row would make every writer's commit touch the same rows)
        replace = "" if lake else "OR REPLACE "
        if batch.progress is not None:
            con.execute(
                f'INSERT {replace}INTO receiver_progress (receiver_id, segment, "offset", updated_at) '
                "VALUES (?, ?, ?, now()::TIMESTAMP)",
                list(batch.progress),
            )
        duplicates = len(batch.tool_rows) - tools + len(batch.llm_rows) - llms
        if batch.stats is not None:
            # cumulative counters as of before this batch, plus what this batch did
            stats = dict(batch.stats)
            stats["tool_calls_written"] = stats.get("tool_calls_written", 0) + tools
            stats["llm_calls_written"] = stats.get("llm_calls_written", 0) + llms
            stats["duplicates"] = stats.get("duplicates", 0) + duplicates
            cols = ", ".join(stats)
            marks = ", ".join("?" for _ in stats)
            con.execute(
                f"INSERT {replace}INTO collector_stats ({cols}, updated_at) VALUES ({marks}, now()::TIMESTAMP)",
                list(stats.values()),
            )
        pending: list[dict[str, Any]] = []
        if batch.join_traces:
            pending = rows_as_dicts(
                con.execute(
                    """SELECT t.*, m.bytes AS message_bytes, m.tokens AS message_tokens, m.blob_id AS message_blob_id,
                              m.inline AS message_inline,
                              p.inline AS raw_inline, p.blob_id AS raw_blob_id, p.cut AS raw_cut,
                              p.head_bytes AS raw_head_bytes, p.tail_bytes AS raw_tail_bytes
                       FROM tool_calls t JOIN message_views m USING (trace_id, tool_call_id)
                       LEFT JOIN payloads p ON p.trace_id = t.trace_id AND p.span_id = t.span_id AND p.kind = 'raw'
                       WHERE t.view_source = 'raw' AND t.trace_id IN (SELECT unnest(?::VARCHAR[]))""",
                    [batch.join_traces],
                )
            )
        idless: list[dict[str, Any]] = []
        unclaimed: list[dict[str, Any]] = []
        if batch.join_traces:
            idless = rows_as_dicts(
                con.execute(
                    """SELECT t.*, p.inline AS raw_inline, p.blob_id AS raw_blob_id, p.cut AS raw_cut,
                              p.head_bytes AS raw_head_bytes, p.tail_bytes AS raw_tail_bytes
                       FROM tool_calls t
                       LEFT JOIN payloads p ON p.trace_id = t.trace_id AND p.span_id = t.span_id AND p.kind = 'raw'
                       WHERE t.tool_call_id IS NULL AND t.view_source = 'raw'
                         AND t.trace_id IN (SELECT unnest(?::VARCHAR[]))""",
                    [batch.join_traces],
                )
            )
            unclaimed = rows_as_dicts(
                con.execute(
                    """SELECT m.*, (SELECT any_value(d.span_id) FROM tool_calls d WHERE d.trace_id = m.trace_id
                                      AND d.tool_call_id = m.tool_call_id AND d.origin = 'messages') AS derived_span_id
                       FROM message_views m
                       WHERE m.trace_id IN (SELECT unnest(?::VARCHAR[]))
                         AND NOT EXISTS (SELECT 1 FROM tool_calls t WHERE t.trace_id = m.trace_id
                                         AND t.tool_call_id = m.tool_call_id AND t.origin IS DISTINCT FROM 'messages')""",
                    [batch.join_traces],
                )
            )
        return WriteResult(tools, llms, duplicates, pending, idless, unclaimed)
