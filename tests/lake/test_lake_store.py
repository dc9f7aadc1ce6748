"""The DuckLake store: the same rows, rankings and payloads as a DuckDB file for the same spans."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from collector.cli import main
from collector.config import CollectorConfig
from collector.ingest import ingest_files
from collector.query.ranking import collector_totals, ranking
from collector.store import lake as L
from collector.store.database import read_connection
from collector.store.maintenance import maintain, migrate
from collector.store.payloads import load_payload

from .conftest import Lake, PostgresServer

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture
def lake_store(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    monkeypatch.setenv(L.DATA_PATH_ENV, str(lake.data_path))
    yield lake.uri
    L.close_all()


@pytest.fixture(scope="module")
def file_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    files = sorted(str(p) for p in SAMPLES.glob("traces-*.json.gz"))[:2]
    db = str(tmp_path_factory.mktemp("file") / "file.duckdb")
    ingest_files(files, CollectorConfig(db=db))
    return db, files


def _largest_payload(db: str) -> tuple[str, str, bytes]:
    with read_connection(db) as con:
        row = con.execute(
            "SELECT trace_id, span_id FROM payloads WHERE kind = 'raw' ORDER BY total_bytes DESC LIMIT 1"
        ).fetchone()
        assert row is not None
        payload = load_payload(con, db, row[0], row[1], "raw")
    assert payload is not None
    return row[0], row[1], payload.head + payload.tail


def test_ingest_into_a_lake_gives_what_a_file_gives(lake_store: str, file_store: tuple[str, list[str]]) -> None:
    file_db, files = file_store
    b = ingest_files(files, CollectorConfig(db=lake_store))
    with read_connection(file_db) as con:
        expected = ranking(con)
        calls = con.execute("SELECT count(*) FROM tool_calls").fetchone()
    assert b.tool_calls == calls[0] if calls else 0
    with read_connection(lake_store) as con:
        assert ranking(con) == expected
    trace, span, data = _largest_payload(file_db)
    assert len(data) > 16 * 1024, "the samples hold payloads stored as files beside a DuckDB store"
    with read_connection(lake_store) as con:
        payload = load_payload(con, lake_store, trace, span, "raw")
    assert payload is not None and payload.head + payload.tail == data
    # loading the same files again stores nothing twice
    again = ingest_files(files, CollectorConfig(db=lake_store))
    assert again.tool_calls == 0 and again.duplicates == b.tool_calls + b.llm_calls
    with read_connection(lake_store) as con:
        assert ranking(con) == expected
        # counters are appended per flush in a lake; the latest row of each collector counts
        assert collector_totals(con)["duplicates"] == b.tool_calls + b.llm_calls


def test_migrate_then_maintain_keeps_every_result(
    lake_store: str, file_store: tuple[str, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    file_db, _ = file_store
    assert main(["migrate", "--from", file_db, "--to", lake_store]) == 0
    out = capsys.readouterr().out
    assert "tool_calls:" in out and "password=***" in out and "password=toolmeter" not in out
    with read_connection(file_db) as con:
        expected = ranking(con)
    with read_connection(lake_store) as con:
        assert ranking(con) == expected
    trace, span, data = _largest_payload(file_db)
    with read_connection(lake_store) as con:
        payload = load_payload(con, lake_store, trace, span, "raw")
    assert payload is not None and payload.head + payload.tail == data
    # running it again copies nothing
    assert sum(migrate(file_db, lake_store).values()) == 0

    summary = maintain(lake_store, snapshots_older_than=timedelta(0))
    assert summary.files_after <= summary.files_before
    assert summary.snapshots_after < summary.snapshots_before
    with read_connection(lake_store) as con:
        assert ranking(con) == expected
    assert main(["lake", "maintain", "--db", lake_store]) == 0
    assert "data files:" in capsys.readouterr().out


def test_a_file_store_refuses_lake_maintenance(tmp_path: Path) -> None:
    from collector.errors import InputError

    with pytest.raises(InputError, match="DuckLake"):
        maintain(str(tmp_path / "x.duckdb"))


@pytest.fixture(scope="module")
def samples_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("samples") / "samples.duckdb")
    ingest_files(sorted(str(p) for p in SAMPLES.glob("traces-*.json.gz")), CollectorConfig(db=db))
    return db


def test_cli_and_dashboard_work_on_a_lake(
    lake_store: str, samples_file: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamlit.testing.v1 import AppTest

    migrate(samples_file, lake_store)
    assert main(["alerts", "--db", lake_store, "--evaluate", "--json"]) == 0
    alert, runs = json.loads(capsys.readouterr().out)
    assert alert["tool_name"] == "search_orders" and alert["kind"] == "schema_change"
    assert runs["kind"] == "run_growth" and runs["service_name"] == "support-agent"
    assert main(["alerts", "--db", lake_store, "--evaluate", "--json"]) == 0  # re-evaluating adds nothing
    assert len(json.loads(capsys.readouterr().out)) == 2
    from collector.alerts.evaluation import evaluate
    from collector.alerts.memo import Memo
    from collector.alerts.rules import Rules

    memo = Memo()  # as a watcher keeps it: a lake's windows are kept as a file's are
    assert evaluate(lake_store, Rules(), memo=memo) == [] and memo.read > 0
    assert evaluate(lake_store, Rules(), memo=memo) == [] and memo.read == 0
    assert main(["top", "--db", lake_store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["tool"] == "search_orders"
    # the CI gate compares a lake with a file: the same spans pass
    assert main(["check", "--baseline", samples_file, "--candidate", lake_store]) == 0

    app = str(Path(__file__).resolve().parents[2] / "dashboard" / "streamlit_app.py")
    monkeypatch.setenv("TOOLMETER_DB", lake_store)
    at = AppTest.from_file(app, default_timeout=120)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.dataframe[0].value["tool"].iloc[0] == "search_orders"
    assert "password=***" in " ".join(c.value for c in at.sidebar.caption)
    at.switch_page("app_pages/alerts.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "search_orders · schema change · 2026-11-16" in " ".join(m.value for m in at.markdown)


def test_a_lake_made_by_an_earlier_version_gains_the_new_columns(
    lake_store: str, file_store: tuple[str, list[str]]
) -> None:
    _, files = file_store
    # as a lake written before the column existed
    _as_an_earlier_version_left_it(lake_store, files, "ALTER TABLE tool_calls DROP COLUMN origin")
    ingest_files(files[1:2], CollectorConfig(db=lake_store))
    with read_connection(lake_store) as con:
        row = con.execute("SELECT count(*) FILTER (WHERE origin = 'span'), count(*) FROM tool_calls").fetchone()
    assert row is not None and 0 < row[0] < row[1]  # the earlier rows have no origin, the new ones do


def test_retention_on_a_lake_matches_retention_on_a_file(
    lake_store: str, file_store: tuple[str, list[str]], tmp_path: Path
) -> None:
    import shutil
    from datetime import datetime

    from collector.store.payloads import payload_dir
    from collector.store.retention import Retention, payloads_removed_before, prune

    db, files = file_store
    copy = str(tmp_path / "copy.duckdb")
    shutil.copy(db, copy)
    shutil.copytree(payload_dir(db), payload_dir(copy))
    ingest_files(files, CollectorConfig(db=lake_store))
    retention = Retention(rows=timedelta(hours=30), payloads=timedelta(hours=12))
    now = datetime(2026, 11, 11)  # the two sample days are 2026-11-09 and 2026-11-10
    with read_connection(lake_store) as con:
        stored = con.execute("SELECT count(*) FROM tool_calls").fetchone()
    rehearsed = prune(lake_store, retention, now=now, dry_run=True)  # rolled back: nothing goes
    with read_connection(lake_store) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == stored
    on_file, on_lake = prune(copy, retention, now=now), prune(lake_store, retention, now=now)
    assert rehearsed.removed == on_lake.removed and rehearsed.lines()[0].startswith("would remove")
    assert on_lake.removed == on_file.removed and on_lake.removed["tool_calls"] > 0
    assert on_lake.size_after is None and "store" not in " ".join(on_lake.lines())  # a lake's size is not ours
    for store in (copy, lake_store):
        with read_connection(store) as con:
            assert con.execute("SELECT min(start_time) FROM tool_calls").fetchone()[0] >= now - timedelta(hours=30)  # type: ignore[index]
            assert payloads_removed_before(con) == now - timedelta(hours=12)
    with read_connection(copy) as a, read_connection(lake_store) as b:
        assert ranking(a) == ranking(b)  # the same rows stay on both
        assert ranking(a, exact=False) == ranking(b, exact=False)


def test_a_lake_rolls_its_closed_days_as_a_file_does(lake_store: str, tmp_path: Path) -> None:
    from tests.collector.test_rollup import assert_close

    files = sorted(str(p) for p in SAMPLES.glob("traces-*.json.gz"))[:4]
    db = str(tmp_path / "four-days.duckdb")
    for store in (db, lake_store):
        ingest_files(files, CollectorConfig(db=store))
    with read_connection(db) as a, read_connection(lake_store) as b:
        days = [con.execute("SELECT count(*) FROM rollup_days").fetchone()[0] for con in (a, b)]  # type: ignore[index]
        assert days == [2, 2]  # 11-09 and 11-10: closed a day before the newest call (11-12)
        assert ranking(a, exact=False) == ranking(b, exact=False)
        assert_close(ranking(b, exact=True), ranking(b, exact=False))


_THREADS_AT_ONCE = r"""
import sys, threading
from collector.store.connection import connect

barrier = threading.Barrier(3)
failures = []


def use(create: bool) -> None:
    barrier.wait()  # all three reach the new lake together, as a receiver's threads do
    for _ in range(3):
        con = connect(sys.argv[1], read_only=not create)
        try:
            con.execute("SELECT count(*) FROM tool_calls").fetchall()
        finally:
            con.close()


threads = [threading.Thread(target=use, args=(create,)) for create in (True, True, False)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_threads_reaching_a_new_lake_at_once_do_not_crash_the_process(
    lake: Lake, postgres: PostgresServer, tmp_path: Path
) -> None:
    # the writer, retention and the alert watcher of a receiver started while the catalog was
    # away all reach the lake when it comes back; creating its tables beside another thread's
    # statement crashed the process (SIGSEGV) in about one start in eight
    import os
    import subprocess
    import sys

    for trial in range(12):
        dbname = f"{lake.dbname}_t{trial}"
        postgres.create_database(dbname)
        fresh = Lake(server=postgres, dbname=dbname, data_path=tmp_path / f"data{trial}", state_dir=lake.state_dir)
        env = dict(os.environ, **{L.STATE_DIR_ENV: str(lake.state_dir), L.DATA_PATH_ENV: str(fresh.data_path)})
        try:
            child = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _THREADS_AT_ONCE, fresh.uri],
                                   env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        finally:
            postgres.drop_database(dbname)
        assert child.returncode == 0, f"trial {trial}: exit {child.returncode}\n{L.redact(child.stderr[-4000:])}"


def test_export_from_a_lake_round_trips(lake_store: str, samples_file: str, tmp_path: Path) -> None:
    migrate(samples_file, lake_store)
    out = tmp_path / "tool_calls.parquet"
    assert main(["export", "--db", lake_store, "--table", "tool_calls", "--out", str(out)]) == 0
    with duckdb.connect(samples_file, read_only=True) as con:
        stored = con.execute("SELECT trace_id, span_id, view_tokens FROM tool_calls ORDER BY ALL").fetchall()
        read = con.execute(f"SELECT trace_id, span_id, view_tokens FROM read_parquet('{out}') ORDER BY ALL").fetchall()
    assert read == stored and len(read) > 1000


@pytest.mark.parametrize("order", ["names first", "views first"])
def test_a_lake_names_views_from_names_that_came_in_another_batch(lake_store: str, order: str) -> None:
    from collector.store.batch import Batch
    from collector.store.database import Store

    view = {"trace_id": "t1", "tool_call_id": "c1", "llm_span_id": "s1", "bytes": 2, "inline": b"ok",
            "tool_name": None, "position": 0, "llm_start_ns": 1_800_000_000_000_000_000}  # fmt: skip
    derived = {"trace_id": "t1", "span_id": "d1", "tool_call_id": "c1", "tool_name": "(unnamed)",
               "origin": "messages", "start_ns": view["llm_start_ns"] - 1, "end_ns": view["llm_start_ns"] - 1}  # fmt: skip
    named = {"trace_id": "t1", "tool_call_id": "c1", "tool_name": "lookup_order", "asked_ns": view["llm_start_ns"]}
    views = Batch(message_rows=[view], tool_rows=[derived], join_traces=["t1"])
    names = Batch(name_rows=[named])
    store = Store(lake_store)
    store.ensure_schema()
    for batch in (names, views) if order == "names first" else (views, names):
        store.write(batch)
    with read_connection(lake_store) as con:
        assert con.execute("SELECT tool_name FROM message_views").fetchall() == [("lookup_order",)]
        assert con.execute("SELECT tool_name FROM tool_calls").fetchall() == [("lookup_order",)]


def test_payloads_stored_before_they_carried_a_start_are_dated_and_not_stored_twice(
    lake_store: str, file_store: tuple[str, list[str]]
) -> None:
    _, files = file_store
    # as a lake written before the column existed
    stored = _as_an_earlier_version_left_it(lake_store, files, "UPDATE payloads SET start_ns = NULL",
                                            "SELECT count(*) FROM payloads")  # fmt: skip
    again = ingest_files(files[:1], CollectorConfig(db=lake_store))  # a replay: every span is a repeat
    assert again.tool_calls == 0
    with read_connection(lake_store) as con:
        after = con.execute("SELECT count(*), count(*) FILTER (WHERE start_ns IS NULL) FROM payloads").fetchone()
    assert stored is not None and after == (stored[0], 0)


def _as_an_earlier_version_left_it(lake_store: str, files: list[str], change: str, then: str | None = None) -> Any:
    """Ingest the first file into the lake, then ``change`` it directly (as an earlier version
    would have left it) and forget that its schema was checked; the row ``then`` selects, if any."""
    from collector.store import connection as S

    ingest_files(files[:1], CollectorConfig(db=lake_store))
    con = S._lake_connect(lake_store, create=False)
    con.execute(change)
    row = con.execute(then).fetchone() if then else None
    con.close()
    S._lake_schema_ready.clear()
    L.close_all()
    return row
