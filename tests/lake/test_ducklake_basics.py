"""What DuckLake 1.5.5 on a PostgreSQL catalog does, pinned down for the store built on it.

Two ``duckdb.connect()`` calls in one process are two separate database instances, each
with its own attachment of the lake: to DuckLake they are as independent as two processes,
which lets these tests interleave two writers step by step.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from collector.store.extensions import LAKE_EXTENSIONS, load_extensions

from .conftest import Lake

SNAPSHOT_CONFLICT = 'duplicate key value violates unique constraint "ducklake_snapshot_pkey"'


def _parquet(lake: Lake) -> set[str]:
    return {str(p) for p in lake.data_path.rglob("*.parquet")}


def _catalog_files(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {row[0] for row in con.execute(f"SELECT data_file FROM ducklake_list_files('lake', '{table}')").fetchall()}


def test_attach_create_reattach_and_options(lake: Lake) -> None:
    con = lake.connect()
    options = dict(con.execute("SELECT option_name, value FROM ducklake_options('lake')").fetchall())
    assert options["version"] == "1.0"
    assert options["data_path"] == f"{lake.data_path}/"
    assert con.execute("SELECT catalog_type FROM ducklake_settings('lake')").fetchall() == [("postgres",)]
    con.execute("CREATE TABLE lake.t (id BIGINT NOT NULL, name VARCHAR)")
    con.close()

    # the data path is stored in the catalog: a later ATTACH may leave it out, not change it
    con = duckdb.connect()
    load_extensions(con, LAKE_EXTENSIONS, state_dir=lake.state_dir)
    con.execute(f"ATTACH '{lake.uri}' AS lake")
    assert con.execute("SELECT count(*) FROM lake.t").fetchone() == (0,)
    con.execute("DETACH lake")
    with pytest.raises(duckdb.Error, match="does not match existing data path in the catalog"):
        con.execute(f"ATTACH '{lake.uri}' AS lake (DATA_PATH '{lake.data_path}/elsewhere/')")
    with pytest.raises(duckdb.NotImplementedException, match="Unsupported option foo for DuckLake"):
        con.execute(f"ATTACH '{lake.uri}' AS lake (FOO 1)")


def test_constraints(lake: Lake) -> None:
    con = lake.connect()
    for ddl in ["CREATE TABLE lake.pk (id BIGINT PRIMARY KEY)", "CREATE TABLE lake.u (id BIGINT UNIQUE)"]:
        with pytest.raises(duckdb.NotImplementedException, match="PRIMARY KEY/UNIQUE constraints are not supported"):
            con.execute(ddl)
    with pytest.raises(duckdb.NotImplementedException, match="CHECK constraints are not supported"):
        con.execute("CREATE TABLE lake.c (id BIGINT CHECK (id > 0))")
    con.execute("CREATE TABLE lake.nn (id BIGINT NOT NULL, d INTEGER DEFAULT 5)")
    with pytest.raises(duckdb.ConstraintException, match="NOT NULL constraint failed"):
        con.execute("INSERT INTO lake.nn VALUES (NULL, 1)")


def test_settings_in_this_release(extension_state: Path) -> None:
    con = duckdb.connect()
    load_extensions(con, ["ducklake"], state_dir=extension_state)
    settings = dict(con.execute("SELECT name, value FROM duckdb_settings() WHERE name LIKE 'ducklake%'").fetchall())
    assert settings["ducklake_max_retry_count"] == "10"
    assert settings["ducklake_retry_wait_ms"] == "100"
    assert settings["ducklake_retry_backoff"] == "1.5"
    assert settings["ducklake_default_data_inlining_row_limit"] == "10"


def test_arrow_batches_small_ones_inlined_in_the_catalog(lake: Lake) -> None:
    con = lake.connect()
    con.execute("CREATE TABLE lake.t (id BIGINT, tool VARCHAR, tokens BIGINT)")

    small = pa.table({"id": [1, 2, 3], "tool": ["a", "b", "c"], "tokens": [10, 20, 30]})
    con.register("batch", small)
    con.execute("INSERT INTO lake.t SELECT * FROM batch")
    con.unregister("batch")
    assert _parquet(lake) == set()  # <= 10 rows: written to the catalog, not to a file

    big = pa.table({"id": list(range(100)), "tool": ["x"] * 100, "tokens": list(range(100))})
    con.register("batch", big)
    con.execute("INSERT INTO lake.t SELECT * FROM batch")
    con.unregister("batch")
    assert len(_parquet(lake)) == 1
    assert con.execute("SELECT count(*), sum(tokens) FROM lake.t").fetchone() == (103, 4950 + 60)

    flushed = con.execute("SELECT * FROM ducklake_flush_inlined_data('lake')").fetchall()
    assert flushed == [("main", "t", 3)]
    assert len(_parquet(lake)) == 2
    assert con.execute("SELECT * FROM ducklake_flush_inlined_data('lake')").fetchall() == []

    changes = con.execute("SELECT changes FROM ducklake_snapshots('lake') ORDER BY snapshot_id").fetchall()
    kinds = [next(iter(c[0])) for c in changes]
    assert kinds == ["schemas_created", "tables_created", "inlined_insert", "tables_inserted_into", "flushed_inlined"]


def test_inserts_from_two_writers_both_commit_and_retries_hide_the_race(lake: Lake) -> None:
    first = lake.connect()
    first.execute("CREATE TABLE lake.t (w VARCHAR, i BIGINT)")
    second = lake.connect()

    first.execute("BEGIN")
    second.execute("BEGIN")
    first.execute("INSERT INTO lake.t SELECT 'first', range FROM range(100)")
    second.execute("INSERT INTO lake.t SELECT 'second', range FROM range(100)")
    first.execute("COMMIT")
    second.execute("COMMIT")  # same snapshot id: conflict in PostgreSQL, retried inside DuckLake
    assert first.execute("SELECT w, count(*) FROM lake.t GROUP BY w ORDER BY w").fetchall() == [
        ("first", 100),
        ("second", 100),
    ]

    second.execute("SET ducklake_max_retry_count = 0")
    first.execute("BEGIN")
    second.execute("BEGIN")
    first.execute("INSERT INTO lake.t VALUES ('first', -1)")
    second.execute("INSERT INTO lake.t VALUES ('second', -1)")
    first.execute("COMMIT")
    with pytest.raises(duckdb.TransactionException) as caught:
        second.execute("COMMIT")
    message = str(caught.value)
    assert "Failed to commit DuckLake transaction." in message
    assert "Exceeded the maximum retry count of 0 set by the ducklake_max_retry_count setting." in message
    assert SNAPSHOT_CONFLICT in message
    with pytest.raises(duckdb.TransactionException, match="no transaction is active"):
        second.execute("ROLLBACK")  # a failed COMMIT has already ended the transaction
    assert first.execute("SELECT count(*) FROM lake.t WHERE i = -1").fetchone() == (1,)


def _claim_batch(con: duckdb.DuckDBPyConnection, batch_id: str, *, lock: bool) -> None:
    con.execute("BEGIN")
    (seen,) = con.execute("SELECT count(*) FROM lake.batches WHERE batch_id = ?", [batch_id]).fetchone() or (0,)
    assert seen == 0
    con.execute("INSERT INTO lake.batches VALUES (?)", [batch_id])
    con.execute("INSERT INTO lake.events SELECT ?, range FROM range(50)", [batch_id])
    if lock:
        con.execute("UPDATE lake.commit_lock SET n = n + 1")


def test_a_batch_id_check_alone_does_not_stop_a_concurrent_duplicate(lake: Lake) -> None:
    first = lake.connect()
    for ddl in [
        "CREATE TABLE lake.batches (batch_id VARCHAR)",
        "CREATE TABLE lake.events (batch_id VARCHAR, i BIGINT)",
        "CREATE TABLE lake.commit_lock (n BIGINT)",
        "INSERT INTO lake.commit_lock VALUES (0)",
    ]:
        first.execute(ddl)
    second = lake.connect()

    # insert vs insert is no conflict for DuckLake: both commit, the batch is stored twice
    _claim_batch(first, "b1", lock=False)
    _claim_batch(second, "b1", lock=False)
    first.execute("COMMIT")
    second.execute("COMMIT")
    assert first.execute("SELECT count(*) FROM lake.batches WHERE batch_id = 'b1'").fetchone() == (2,)

    # updating one shared row makes every writer delete from the same table: one wins
    _claim_batch(first, "b2", lock=True)
    _claim_batch(second, "b2", lock=True)
    first.execute("COMMIT")
    with pytest.raises(duckdb.TransactionException) as caught:
        second.execute("COMMIT")
    assert str(caught.value).startswith(
        "TransactionContext Error: Failed to commit: Failed to commit DuckLake transaction.\n"
        "Transaction conflict - attempting to insert into table with index"
    )
    assert "but another transaction has deleted inlined data from it" in str(caught.value)
    assert first.execute("SELECT count(*) FROM lake.batches WHERE batch_id = 'b2'").fetchone() == (1,)
    assert first.execute("SELECT count(*) FROM lake.events WHERE batch_id = 'b2'").fetchone() == (50,)
    # the loser, retrying the whole transaction, now sees the batch and skips it
    second.execute("BEGIN")
    assert second.execute("SELECT count(*) FROM lake.batches WHERE batch_id = 'b2'").fetchone() == (1,)
    second.execute("ROLLBACK")


def test_readers_see_a_commit_at_once_and_read_only_attach(lake: Lake) -> None:
    writer = lake.connect()
    writer.execute("CREATE TABLE lake.t (seq BIGINT)")
    reader = lake.connect(READ_ONLY=True)
    for seq, rows in [(1, 5), (2, 500), (3, 1)]:
        writer.execute("INSERT INTO lake.t SELECT ? FROM range(?)", [seq, rows])
        assert reader.execute("SELECT max(seq) FROM lake.t").fetchone() == (seq,)
    with pytest.raises(duckdb.InvalidInputException, match="attached in read-only mode"):
        reader.execute("INSERT INTO lake.t VALUES (9)")

    reader.execute("BEGIN")  # a transaction reads one snapshot throughout
    before = reader.execute("SELECT count(*) FROM lake.t").fetchone()
    writer.execute("INSERT INTO lake.t VALUES (4)")
    assert reader.execute("SELECT count(*) FROM lake.t").fetchone() == before
    reader.execute("COMMIT")
    assert reader.execute("SELECT max(seq) FROM lake.t").fetchone() == (4,)


def test_maintenance_functions(lake: Lake) -> None:
    con = lake.connect()
    con.execute("CREATE TABLE lake.t (id BIGINT, s VARCHAR)")
    for _ in range(5):
        con.execute("INSERT INTO lake.t SELECT range, 'x' FROM range(100)")
    assert len(_catalog_files(con, "t")) == 5

    merged = con.execute("SELECT * FROM ducklake_merge_adjacent_files('lake')")
    assert [d[0] for d in merged.description or []] == ["schema_name", "table_name", "files_processed", "files_created"]
    assert merged.fetchall() == [("main", "t", 5, 1)]
    assert len(_catalog_files(con, "t")) == 1
    assert len(_parquet(lake)) == 6  # the merged-away files stay until cleanup

    con.execute("DELETE FROM lake.t WHERE id < 60")
    rewritten = con.execute("SELECT * FROM ducklake_rewrite_data_files('lake', 't', delete_threshold => 0.1)")
    assert rewritten.fetchall() == [("main", "t", 1, 1)]

    expired = con.execute(
        "SELECT count(*) FROM ducklake_expire_snapshots('lake', dry_run => true, older_than => now() + INTERVAL 1 MINUTE)"
    ).fetchone()
    assert expired is not None and expired[0] > 0
    con.execute("CALL ducklake_expire_snapshots('lake', older_than => now() + INTERVAL 1 MINUTE)")
    assert con.execute("SELECT count(*) FROM ducklake_snapshots('lake')").fetchone() == (1,)

    removed = con.execute("SELECT path FROM ducklake_cleanup_old_files('lake', cleanup_all => true)").fetchall()
    assert len(removed) >= 6
    assert _parquet(lake) == {f for f in _catalog_files(con, "t")} | {
        row[0] for row in con.execute("SELECT delete_file FROM ducklake_list_files('lake', 't')").fetchall() if row[0]
    }
    assert con.execute("SELECT count(*), min(id) FROM lake.t").fetchone() == (200, 60)

    con.execute("INSERT INTO lake.t VALUES (1, 'inlined')")
    con.execute("CHECKPOINT lake")
    assert con.execute("SELECT * FROM ducklake_flush_inlined_data('lake')").fetchall() == []


def test_postgres_restart_between_and_inside_transactions(lake: Lake) -> None:
    con = lake.connect()
    con.execute("CREATE TABLE lake.t (x INTEGER)")
    con.execute("INSERT INTO lake.t VALUES (1)")

    lake.server.restart()
    con.execute("INSERT INTO lake.t VALUES (2)")  # the connection pool reconnects by itself

    con.execute("BEGIN")
    con.execute("INSERT INTO lake.t VALUES (3)")
    lake.server.restart()
    with pytest.raises(duckdb.TransactionException, match="Failed to commit"):
        con.execute("COMMIT")
    assert con.execute("SELECT list(x ORDER BY x) FROM lake.t").fetchone() == ([1, 2],)

    lake.server.stop()
    try:
        with pytest.raises(duckdb.IOException, match="Connection refused") as caught:
            con.execute("SELECT count(*) FROM lake.t")
        assert str(caught.value).startswith("IO Error: Failed to query most recent snapshot for DuckLake")
        assert f"password={lake.server.password}" in str(caught.value)  # errors carry the DSN: redact them
    finally:
        lake.server.start()
    assert con.execute("SELECT count(*) FROM lake.t").fetchone() == (2,)


_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import duckdb
    from collector.store.extensions import LAKE_EXTENSIONS, load_extensions

    con = duckdb.connect()
    load_extensions(con, LAKE_EXTENSIONS, state_dir=Path(sys.argv[1]))
    con.execute(sys.argv[2])
    con.execute("BEGIN")
    con.execute("INSERT INTO lake.t SELECT range, 'x' || range FROM range(20000)")
    print("inserted", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_kill_9_before_commit_leaves_an_orphan_file_and_a_consistent_catalog(lake: Lake) -> None:
    con = lake.connect()
    con.execute("CREATE TABLE lake.t (i BIGINT, s VARCHAR)")
    con.execute("INSERT INTO lake.t SELECT range, 'committed' FROM range(1000)")
    committed = _parquet(lake)

    with subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(lake.state_dir), lake.attach_sql()],
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "inserted"
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()

    orphans = _parquet(lake) - committed
    assert len(orphans) == 1  # written at INSERT time, before COMMIT
    assert con.execute("SELECT count(*) FROM lake.t").fetchone() == (1000,)
    listed = con.execute(
        "SELECT path FROM ducklake_delete_orphaned_files('lake', dry_run => true, cleanup_all => true)"
    ).fetchall()
    assert {row[0] for row in listed} == orphans
    # younger than older_than: kept (it could belong to a transaction still running)
    kept = con.execute(
        "SELECT count(*) FROM ducklake_delete_orphaned_files('lake', older_than => now() - INTERVAL 1 HOUR)"
    ).fetchone()
    assert kept == (0,)
    con.execute("CALL ducklake_delete_orphaned_files('lake', cleanup_all => true)")
    assert _parquet(lake) == committed
    con.execute("INSERT INTO lake.t SELECT range, 'after' FROM range(100)")
    assert con.execute("SELECT count(*) FROM lake.t").fetchone() == (1100,)
