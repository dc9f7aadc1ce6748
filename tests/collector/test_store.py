"""The store's ownership rules with real processes: readers wait out writers, nothing is lost."""

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import duckdb
import pytest

from collector.errors import StoreError
from collector.store.batch import Batch
from collector.store.connection import connect, transaction
from collector.store.database import WRITE_THREADS, Store, read_connection
from collector.store.waiting import WriteAbandoned

AGENT = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from collector import ToolResultProcessor
    provider = TracerProvider()
    provider.add_span_processor(ToolResultProcessor(db=sys.argv[1], flush_interval=0.05, max_batch_size=50))
    tracer = provider.get_tracer("agent")
    for i in range(int(sys.argv[2])):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{i % 3}",
                 "gen_ai.tool.call.result": "row " * (i % 200)}
        with tracer.start_as_current_span("execute_tool", attributes=attrs):
            pass
    provider.shutdown()
    """
)

HOLD = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def test_dashboard_reads_while_an_agent_writes_and_nothing_is_lost(db_path: str) -> None:
    Store(db_path).ensure_schema()
    agent = subprocess.Popen([sys.executable, "-c", AGENT, db_path, "3000"])
    reads = 0
    seen = []
    while agent.poll() is None:
        with read_connection(db_path) as con:
            n = con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]  # type: ignore[index]
            # a batch is one transaction: counters and rows always agree
            written = con.execute("SELECT coalesce(sum(tool_calls_written), 0) FROM collector_stats").fetchone()[0]  # type: ignore[index]
        assert n == written
        seen.append(n)
        reads += 1
    assert agent.returncode == 0
    assert reads > 3 and seen == sorted(seen)
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (3000,)
        assert con.execute("SELECT sum(dropped), sum(failed) FROM collector_stats").fetchone() == (0, 0)


def test_reader_waits_for_a_short_lock_and_names_a_long_one(tmp_path: Path) -> None:
    db = str(tmp_path / "locked.duckdb")
    Store(db).ensure_schema()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, db, "1.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    t0 = time.monotonic()
    with read_connection(db, wait_s=20) as con:  # waits until the holder lets go
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
    assert time.monotonic() - t0 < 15
    holder.wait()
    holder.stdout.close()

    holder = subprocess.Popen([sys.executable, "-c", HOLD, db, "5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    with pytest.raises(StoreError, match="locked by another process"), read_connection(db, wait_s=0.5):
        pass
    holder.kill()
    holder.wait()
    holder.stdout.close()


def test_missing_store_is_named(tmp_path: Path) -> None:
    with (
        pytest.raises(StoreError, match=r"no toolmeter store at .*toolmeter demo"),
        read_connection(tmp_path / "x.duckdb"),
    ):
        pass


class _WatchedStop(threading.Event):
    """A stop event that tells when a writer first waits on it (it is then retrying)."""

    def __init__(self) -> None:
        super().__init__()
        self.waited_on = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waited_on.set()
        return super().wait(timeout)


def test_shutdown_interrupts_a_write_waiting_for_the_lock(tmp_path: Path) -> None:
    db = str(tmp_path / "locked.duckdb")
    Store(db).ensure_schema()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, db, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        stop = _WatchedStop()
        store = Store(db, lock_wait_s=60, stop=stop)
        row = {"trace_id": "a" * 32, "span_id": "b" * 16, "tool_name": "t", "start_ns": 1, "end_ns": 2}
        raised: list[BaseException] = []
        done = threading.Event()

        def write() -> None:
            try:
                store.write(Batch(tool_rows=[row]))
            except BaseException as e:
                raised.append(e)
            finally:
                done.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert stop.waited_on.wait(20), "the write never waited for the lock"
        assert not done.is_set()  # still retrying: the holder keeps the file for a minute
        t0 = time.monotonic()
        stop.set()
        assert done.wait(2.0), "the write did not give up within 2 s of shutdown"
        assert time.monotonic() - t0 < 2.0
        writer.join(1.0)
        assert len(raised) == 1 and isinstance(raised[0], WriteAbandoned), raised
        assert isinstance(raised[0], StoreError) and "abandoned at shutdown" in str(raised[0])
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)


def test_transaction_commits_or_rolls_back(tmp_path: Path) -> None:
    db = str(tmp_path / "tx.duckdb")
    Store(db).ensure_schema()
    con = connect(db, read_only=False, wait_s=0)
    try:
        with transaction(con):
            con.execute("INSERT INTO ingest_issues (level, message) VALUES ('warning', 'kept')")
        with pytest.raises(ZeroDivisionError), transaction(con):
            con.execute("INSERT INTO ingest_issues (level, message) VALUES ('warning', 'rolled back')")
            _ = 1 / 0
        assert con.execute("SELECT message FROM ingest_issues").fetchall() == [("kept",)]
    finally:
        con.close()


READ_ONCE = textwrap.dedent(
    """
    import sys, duckdb
    try:
        con = duckdb.connect(sys.argv[1], read_only=True)
    except duckdb.Error:
        print("locked")
    else:
        print(con.execute("SELECT count(*) FROM tool_calls").fetchone()[0])
        con.close()
    """
)


def _read_from_another_process(db: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", READ_ONCE, db], capture_output=True, text=True, check=True
    ).stdout.strip()


def _tool_row(i: int) -> dict[str, object]:
    return {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "tool_name": "t", "start_ns": 10 + i, "end_ns": 11 + i}


def test_batch_writes_run_duckdb_on_one_thread_and_readers_keep_theirs(tmp_path: Path) -> None:
    # the measuring processes want the other cores (see WRITE_THREADS)
    db = str(tmp_path / "threads.duckdb")
    store = Store(db)
    store.ensure_schema()

    def threads(con: duckdb.DuckDBPyConnection) -> int:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])  # type: ignore[index]

    assert store.in_transaction(threads) == WRITE_THREADS == 1
    with store.holding():
        assert store.in_transaction(threads) == 1
    with read_connection(db) as con, duckdb.connect(":memory:") as fresh:
        assert threads(con) == threads(fresh)  # DuckDB's default: a thread a core


def test_a_held_store_commits_each_write_and_lets_readers_in_when_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "held.duckdb")
    store = Store(db)
    store.ensure_schema()
    with store.holding():
        store.write(Batch(tool_rows=[_tool_row(1)]))
        store.write(Batch(tool_rows=[_tool_row(2)]))
        assert _read_from_another_process(db) == "locked"  # held between the writes
        # another thread (retention, rollups) does not write through the held connection: it
        # waits for the file as another process would (here: not at all, so it is refused)
        raised: list[BaseException] = []

        def other_thread() -> None:
            try:
                store.write(Batch(tool_rows=[_tool_row(3)]))
            except BaseException as e:
                raised.append(e)

        store.lock_wait_s = 0
        t = threading.Thread(target=other_thread)
        t.start()
        t.join(30)
        assert len(raised) == 1 and "stayed locked" in str(raised[0]), raised
    assert _read_from_another_process(db) == "2"  # released at the end; each write committed
    # held longer than HOLD_MAX_S: the file is closed after the write in hand
    monkeypatch.setattr("collector.store.database.HOLD_MAX_S", 0.0)
    with store.holding():
        store.write(Batch(tool_rows=[_tool_row(4)]))
        assert _read_from_another_process(db) != "locked"
        store.write(Batch(tool_rows=[_tool_row(5)]))
    with read_connection(db) as con:
        assert con.execute(
            "SELECT count(*) FROM tool_calls WHERE span_id IN (?, ?)", [f"{4:016x}", f"{5:016x}"]
        ).fetchone() == (2,)


def test_a_failed_write_while_held_closes_the_file_and_the_next_write_reopens_it(tmp_path: Path) -> None:
    db = str(tmp_path / "held.duckdb")
    store = Store(db)
    store.ensure_schema()
    with store.holding():
        store.write(Batch(tool_rows=[_tool_row(1)]))
        bad = dict(_tool_row(2), start_ns="not a number")
        with pytest.raises(Exception):  # noqa: B017 (the Arrow table or DuckDB refuses it)
            store.write(Batch(tool_rows=[bad]))
        assert _read_from_another_process(db) == "1"  # the failed write closed the file
        store.write(Batch(tool_rows=[_tool_row(3)]))
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (2,)


def test_writes_reuse_one_duckdb_instance_and_unlock_the_file_after_each(tmp_path: Path) -> None:
    # starting a DuckDB instance costs more than attaching the file to one: a writer keeps its
    # instance and only attaches and detaches the file, which readers must still get in between
    db = str(tmp_path / "reuse.duckdb")
    store = Store(db)
    store.ensure_schema()

    def instance(con: duckdb.DuckDBPyConnection) -> int:
        return id(con)

    store.write(Batch(tool_rows=[_tool_row(1)]))
    first = store.in_transaction(instance)
    assert _read_from_another_process(db) == "1"  # unlocked after the write
    store.write(Batch(tool_rows=[_tool_row(2)]))
    assert store.in_transaction(instance) == first
    assert _read_from_another_process(db) == "2"
    # a failed write lets go of the instance (it may hold the write's leftovers); the next makes one
    with pytest.raises(Exception):  # noqa: B017 (the Arrow table or DuckDB refuses it)
        store.write(Batch(tool_rows=[dict(_tool_row(3), start_ns="not a number")]))
    store.write(Batch(tool_rows=[_tool_row(4)]))
    assert _read_from_another_process(db) == "3"
    # another thread has its own instance: two threads never attach the file to the same one
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(store.in_transaction(instance)))
    t.start()
    t.join(30)
    assert seen and seen[0] != store.in_transaction(instance)
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (3,)


WRITE_ONCE = textwrap.dedent(
    """
    import sys, duckdb
    try:
        con = duckdb.connect(sys.argv[1])
    except duckdb.Error:
        print("locked")
    else:
        con.execute("INSERT INTO ingest_issues (level, message) VALUES ('info', 'from outside')")
        con.close()
        print("written")
    """
)


def test_reads_reuse_one_duckdb_instance_and_unlock_the_file_after_each(tmp_path: Path) -> None:
    db, other = str(tmp_path / "read.duckdb"), str(tmp_path / "other.duckdb")
    for path in (db, other):
        Store(path).write(Batch(tool_rows=[_tool_row(1)]))

    def write_from_another_process() -> str:
        return subprocess.run(
            [sys.executable, "-c", WRITE_ONCE, db], capture_output=True, text=True, check=True
        ).stdout.strip()

    with read_connection(db) as con:
        first = id(con)
        assert write_from_another_process() == "locked"  # held while the read runs
        with read_connection(db) as inner:  # a read inside a read of the same file shares it
            assert id(inner) == first
        with read_connection(other) as elsewhere:  # of another file: a connection of its own
            assert id(elsewhere) != first
            assert elsewhere.execute("SELECT count(*) FROM tool_calls").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (1,)
    assert write_from_another_process() == "written"  # let go at the end of the read
    with read_connection(db) as con:
        assert id(con) == first  # the same instance, the file attached again: it sees the new row
        assert con.execute("SELECT message FROM ingest_issues").fetchall() == [("from outside",)]
    # a failed query lets go of the instance; the next read makes one and works
    with pytest.raises(duckdb.Error), read_connection(db) as con:
        con.execute("SELECT * FROM no_such_table")
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (1,)
    assert write_from_another_process() == "written"


def _tool_spans(*span_ids: int) -> bytes:
    """An OTLP/JSON request of tool spans in one trace (a 40 KB result each: its payload goes to a file)."""
    spans = [
        {"traceId": "ab" * 16, "spanId": f"{i:016x}", "name": "execute_tool search",
         "startTimeUnixNano": str(1_700_000_000_000_000_000 + i), "endTimeUnixNano": str(1_700_000_000_000_000_500 + i),
         "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                        {"key": "gen_ai.tool.name", "value": {"stringValue": "search"}},
                        {"key": "gen_ai.tool.call.result", "value": {"stringValue": f"hit {i} " * 5000}}]}
        for i in span_ids
    ]  # fmt: skip
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()


def keyed_file(path: str) -> None:
    """A store laid out as before the large tables lost their primary keys (see schema.sql)."""
    import duckdb

    from collector.store.schema import keyed_schema_sql

    con = duckdb.connect(path)
    try:
        con.execute(keyed_schema_sql())
    finally:
        con.close()


@pytest.mark.parametrize("made", ["now", "with keys"])
def test_a_batch_holding_stored_calls_is_written_again_skipping_them(
    tmp_path: Path, made: str, caplog: pytest.LogCaptureFixture
) -> None:
    from collector.config import CollectorConfig
    from collector.decode.request import JSON, decode_traces
    from collector.dialects.spans import classify
    from collector.model import Item
    from collector.pipeline import Pipeline

    if made == "with keys":
        keyed_file(str(tmp_path / "dups.duckdb"))
    pipeline = Pipeline(CollectorConfig(db=str(tmp_path / "dups.duckdb")))
    pipeline.store.ensure_schema()

    def write(*span_ids: int) -> int:
        spans = decode_traces(_tool_spans(*span_ids), JSON, "otlp").spans
        return pipeline.write(pipeline.build_batch([Item(classify(s.name, s.attributes), s) for s in spans])).tool_calls

    def stored() -> tuple[int, int]:
        with read_connection(pipeline.store.path) as con:
            return con.execute(  # type: ignore[return-value]
                "SELECT (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM payloads)"
            ).fetchone()

    # a file with keys inserts a batch as new, and writes it again skipping stored keys when one
    # is stored; a file without compares with the stored rows near the batch's in time, once
    rewrites = [0, 1, 2] if made == "with keys" else [0, 0, 0]
    assert write(1, 2, 3) == 3 and pipeline.store.rewrites == rewrites[0]  # new keys: one plain insert
    assert stored() == (3, 3)
    assert write(3, 4) == 1 and pipeline.store.rewrites == rewrites[1]  # span 3 again (an exporter's resend)
    assert stored() == (4, 4)
    assert write(5, 5, 6) == 2 and pipeline.store.rewrites == rewrites[2]  # the same span twice in one batch
    assert stored() == (6, 6)
    assert write(1, 2, 3, 4, 5, 6) == 0 and stored() == (6, 6)  # all stored: nothing changes
    with read_connection(pipeline.store.path) as con:
        keys = con.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
                           "AND table_name IN ('tool_calls', 'llm_calls', 'payloads')").fetchone()  # fmt: skip
    assert keys == ((3,) if made == "with keys" else (0,))
    said = [r.getMessage() for r in caplog.records if "made with primary keys" in r.getMessage()]
    assert len(said) == (1 if made == "with keys" else 0)  # once, with what to run
    assert all("toolmeter prune --db" in m for m in said)


def _chat(span: int, hours: float, *calls: str) -> dict:  # type: ignore[type-arg]
    """A model-call span whose input carries the responses to ``calls`` (a chat's history)."""
    history = [{"role": "tool", "parts": [{"type": "tool_call_response", "id": c, "response": f"result of {c}"}]}
               for c in calls]  # fmt: skip
    start = 1_700_000_000_000_000_000 + int(hours * 3600e9)
    return {"traceId": "cd" * 16, "spanId": f"{span:016x}", "name": "chat m", "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1000),
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(history)}}]}  # fmt: skip


@pytest.mark.parametrize("made", ["now", "with keys"])
def test_a_view_repeated_by_later_model_calls_is_stored_once(tmp_path: Path, made: str) -> None:
    from collector.config import CollectorConfig
    from collector.decode.request import JSON, decode_traces
    from collector.dialects.spans import classify
    from collector.model import Item
    from collector.pipeline import Pipeline

    db = str(tmp_path / "views.duckdb")
    if made == "with keys":
        keyed_file(db)
    pipeline = Pipeline(CollectorConfig(db=db))

    def write(*spans: dict) -> None:  # type: ignore[type-arg]
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()
        decoded = decode_traces(body, JSON, "otlp").spans
        pipeline.write(pipeline.build_batch([Item(classify(s.name, s.attributes), s) for s in decoded]))

    # every later model call of a run repeats the tool responses before it, in later batches, and
    # up to a day later (an agent waiting on a person): each view is stored once, by its first carrier
    write(_chat(1, 0, "c1"))
    write(_chat(2, 0.5, "c1", "c2"))
    write(_chat(3, 20, "c1", "c2", "c3"), _chat(4, 21, "c1", "c2", "c3"))
    with read_connection(db) as con:
        views = con.execute("SELECT tool_call_id, llm_span_id FROM message_views ORDER BY 1").fetchall()
        keys = con.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
                           "AND table_name IN ('message_views', 'tool_call_names')").fetchone()  # fmt: skip
    assert views == [("c1", f"{1:016x}"), ("c2", f"{2:016x}"), ("c3", f"{3:016x}")]
    assert keys == ((2,) if made == "with keys" else (0,))  # a file made now has no key index to rewrite


def test_payloads_stored_before_they_carried_a_start_are_dated_and_not_stored_twice(tmp_path: Path) -> None:
    from collector.config import CollectorConfig
    from collector.decode.request import JSON, decode_traces
    from collector.dialects.spans import classify
    from collector.model import Item
    from collector.pipeline import Pipeline

    db = str(tmp_path / "old.duckdb")

    def write(*span_ids: int) -> int:
        pipeline = Pipeline(CollectorConfig(db=db))  # a new process: it readies the store at its first write
        spans = decode_traces(_tool_spans(*span_ids), JSON, "otlp").spans
        return pipeline.write(pipeline.build_batch([Item(classify(s.name, s.attributes), s) for s in spans])).tool_calls

    assert write(1, 2) == 2
    with duckdb.connect(db) as con:
        con.execute("UPDATE payloads SET start_ns = NULL")  # as a store written before the column existed
    # a repeat is looked for among the payloads near the batch's calls only: the old rows are dated first
    assert write(2, 3) == 1
    with read_connection(db) as con:
        rows = con.execute("SELECT span_id, start_ns FROM payloads ORDER BY span_id").fetchall()
    assert [(s, t - 1_700_000_000_000_000_000) for s, t in rows] == [(f"{i:016x}", i) for i in (1, 2, 3)]


def _storage_version(db: str) -> str:
    with duckdb.connect(":memory:") as con:
        con.execute(f"ATTACH '{db}' AS s (READ_ONLY)")
        tags = con.execute("SELECT tags FROM duckdb_databases() WHERE database_name = 's'").fetchone()
    assert tags is not None
    return str(tags[0]["storage_version"])


def test_a_store_is_written_in_the_format_whose_checkpoints_reuse_unchanged_metadata(tmp_path: Path) -> None:
    """A store made by an older toolmeter (DuckDB's default v1.0.0 format, in which every checkpoint
    rewrote every row group's metadata) is converted at its first write, its rows kept; a new store
    and a compacted one are made in it."""
    from collector.config import CollectorConfig
    from collector.decode.request import JSON, decode_traces
    from collector.dialects.spans import classify
    from collector.model import Item
    from collector.pipeline import Pipeline
    from collector.store.compaction import compact_file
    from collector.store.connection import STORAGE_VERSION
    from collector.store.schema import schema_sql

    def write(db: str, *span_ids: int) -> None:
        pipeline = Pipeline(CollectorConfig(db=db))
        spans = decode_traces(_tool_spans(*span_ids), JSON, "otlp").spans
        pipeline.write(pipeline.build_batch([Item(classify(s.name, s.attributes), s) for s in spans]))

    old = str(tmp_path / "old.duckdb")
    write(old, 1, 2)
    with duckdb.connect(":memory:") as con:  # the same rows in a file of DuckDB's default format
        con.execute(f"ATTACH '{old}' AS src (READ_ONLY)")
        con.execute(f"ATTACH '{tmp_path / 'v1.duckdb'}' AS v1")
        con.execute("USE v1")
        con.execute(schema_sql())
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'src'").fetchall():
            con.execute(f'INSERT INTO v1."{table}" BY NAME SELECT * FROM src."{table}"')
    v1 = str(tmp_path / "v1.duckdb")
    assert _storage_version(v1) == "v1.0.0+"
    write(v1, 3)
    assert _storage_version(v1) == f"{STORAGE_VERSION}+"
    with read_connection(v1) as con:
        assert con.execute("SELECT span_id FROM tool_calls ORDER BY span_id").fetchall() == [
            (f"{i:016x}",) for i in (1, 2, 3)
        ]
    fresh = str(tmp_path / "fresh.duckdb")
    write(fresh, 1)
    assert _storage_version(fresh) == f"{STORAGE_VERSION}+"
    assert compact_file(fresh, "for the test") and _storage_version(fresh) == f"{STORAGE_VERSION}+"


def test_a_write_is_in_the_file_itself_when_it_commits(tmp_path: Path) -> None:
    """A receiver holds the file over several writes; each one is checkpointed as it commits, so
    a writer killed before letting go leaves no log to replay, and readers that come next find
    every row in the file."""
    from collector.config import CollectorConfig
    from collector.decode.request import JSON, decode_traces
    from collector.dialects.spans import classify
    from collector.model import Item
    from collector.pipeline import Pipeline

    db = str(tmp_path / "held.duckdb")
    pipeline = Pipeline(CollectorConfig(db=db))
    log = Path(db + ".wal")
    with pipeline.store.holding():
        for first in (1, 3):
            spans = decode_traces(_tool_spans(first, first + 1), JSON, "otlp").spans
            pipeline.write(pipeline.build_batch([Item(classify(s.name, s.attributes), s) for s in spans]))
            assert not log.exists() or log.stat().st_size == 0
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (4,)
