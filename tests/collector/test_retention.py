"""Retention: a store fed 60 days of real SDK spans keeps what the retention says, no more, no less."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from collector.errors import ConfigError, InputError
from collector.query.ranking import Filters, ranking
from collector.store.compaction import compact_file
from collector.store.payloads import blob_id_of, payload_dir
from collector.store.retention import (
    Retention,
    _Sizes,
    payloads_removed_before,
    prune,
    store_bytes,
)

NOW = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
DAYS = 60


def _feed(db: str) -> None:
    """60 days of runs, four a day: a small lookup, a 20-40 KB search (its payloads go to
    files), then an LLM call that reads both (so window costs are real)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    from collector import ToolResultProcessor

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(ToolResultProcessor(db=db, flush_interval=0.05))
    tracer = provider.get_tracer("retention-test")
    for day in range(DAYS):
        for run in range(4):
            t0 = NOW - timedelta(days=DAYS - day - 0.5, hours=run)
            ns = int(t0.replace(tzinfo=UTC).timestamp() * 1e9)
            root = tracer.start_span("run", start_time=ns)
            with trace.use_span(root, end_on_exit=False):
                rows = "\n".join(
                    f"order {day}-{run}-{i}: {hashlib.sha1(f'{day}{run}{i}'.encode()).hexdigest()[:24]}"
                    for i in range(300 + 100 * run)
                )  # fmt: skip
                for k, (tool, result) in enumerate((("lookup", f"customer {day}-{run} is active"), ("search", rows))):
                    span = tracer.start_span(
                        "execute_tool", start_time=ns + k * 10**6,
                        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                    "gen_ai.tool.call.id": f"c{day}-{run}-{k}", "gen_ai.tool.call.result": result},
                    )  # fmt: skip
                    span.end(end_time=ns + k * 10**6 + 5 * 10**5)
                llm = tracer.start_span(
                    "chat", start_time=ns + 5 * 10**6,
                    attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                                "gen_ai.usage.input_tokens": 9000, "gen_ai.usage.output_tokens": 20},
                )  # fmt: skip
                llm.end(end_time=ns + 6 * 10**6)
            root.end(end_time=ns + 7 * 10**6)
    provider.shutdown()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("retention") / "sixty-days.duckdb")
    _feed(db)
    return db


def _copy(db: str, tmp_path: Path) -> str:
    import shutil

    target = str(tmp_path / "store.duckdb")
    shutil.copy(db, target)
    shutil.copytree(payload_dir(db), payload_dir(target))
    # written seconds ago, but standing for files of past days: older than the grace that
    # protects the blobs of a batch not committed yet
    an_hour_ago = (NOW - timedelta(hours=1)).replace(tzinfo=UTC).timestamp()
    for folder, _, names in os.walk(payload_dir(target)):
        for name in names:
            os.utime(os.path.join(folder, name), (an_hour_ago, an_hour_ago))
    return target


def _ranking(db: str, since: datetime) -> list[dict[str, object]]:
    with duckdb.connect(db, read_only=True) as con:
        return ranking(con, Filters(since=since))


def test_sixty_days_keep_thirty_payloads_seven_and_the_kept_rankings_do_not_move(fed: str, tmp_path: Path) -> None:
    db = _copy(fed, tmp_path)
    kept_window = NOW - timedelta(days=30)
    before = _ranking(db, kept_window)
    with duckdb.connect(db, read_only=True) as con:
        first, calls = con.execute("SELECT min(start_time), count(*) FROM tool_calls").fetchone()  # type: ignore[misc]
    assert first < NOW - timedelta(days=59) and calls == DAYS * 4 * 2

    summary = prune(db, Retention(rows=timedelta(days=30), payloads=timedelta(days=7)), now=NOW)

    with duckdb.connect(db, read_only=True) as con:
        oldest_row = con.execute("SELECT min(start_time) FROM tool_calls").fetchone()[0]  # type: ignore[index]
        oldest_llm = con.execute("SELECT min(start_time) FROM llm_calls").fetchone()[0]  # type: ignore[index]
        oldest_payload = con.execute(
            "SELECT min(t.start_time) FROM payloads p JOIN tool_calls t USING (trace_id, span_id)"
        ).fetchone()[0]  # type: ignore[index]
        kept_calls = con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]  # type: ignore[index]
        with_payload = con.execute("SELECT count(DISTINCT (trace_id, span_id)) FROM payloads").fetchone()[0]  # type: ignore[index]
        blobs = {r[0] for r in con.execute("SELECT blob_id FROM payloads WHERE blob_id IS NOT NULL").fetchall()}
        assert payloads_removed_before(con) == NOW - timedelta(days=7)
    assert oldest_row >= kept_window and oldest_llm >= kept_window
    assert oldest_payload >= NOW - timedelta(days=7)
    assert kept_calls == 30 * 4 * 2 and with_payload == 7 * 4 * 2  # whole days: each run is at noon minus hours
    files = {blob_id_of(Path(p).name) for _, _, names in os.walk(payload_dir(db)) for p in names}
    assert files == blobs  # the payload files of removed calls are gone, the kept ones all there
    assert _ranking(db, kept_window) == before  # rankings over the kept window are unchanged
    from tests.collector.test_rollup import assert_close

    with duckdb.connect(db, read_only=True) as con:
        rolled = [d for (d,) in con.execute("SELECT day FROM rollup_days ORDER BY day").fetchall()]
        # no rollup of a pruned day; the day the cut runs through is rolled again only if no call of
        # it was removed (the runs are at noon minus hours: a cut just after midnight removes none),
        # which the comparison with the exact ranking below holds to account
        assert rolled and rolled[0] >= kept_window.date()
        assert_close(ranking(con, Filters(since=kept_window), exact=True),
                     ranking(con, Filters(since=kept_window), exact=False))  # fmt: skip
    assert summary.removed["tool_calls"] == 30 * 4 * 2 and summary.removed["llm_calls"] == 30 * 4
    assert summary.payload_files == 53 * 2  # the two larger searches a day (over 16 KiB: in files), 53 days
    lines = "\n".join(summary.lines())
    assert "tool_calls 240" in lines and "llm_calls 120" in lines and "payload files 106" in lines


def test_a_size_cap_removes_the_oldest_payloads_then_rows_and_the_file_fits(fed: str, tmp_path: Path) -> None:
    db = _copy(fed, tmp_path)
    full = store_bytes(db)
    (tmp_path / "measure").mkdir()
    rewritten = _copy(fed, tmp_path / "measure")  # what the rows need, whatever the flushes that wrote them
    compact_file(rewritten, "for the test")
    sizes = _Sizes.of(rewritten)
    cap = store_bytes(rewritten) - (sizes.files + sizes.inline) // 2  # about half of the payloads must go
    summary = prune(db, Retention(rows=None, payloads=None, max_bytes=cap), now=NOW, compact=True)
    assert summary.capped and summary.size_before == full
    assert store_bytes(db) <= cap and summary.size_after is not None and summary.size_after <= cap
    assert (
        os.path.getsize(db)
        + sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(payload_dir(db)) for n in names)
        <= cap
    )  # the file itself, rewritten without its free blocks, is within the cap too
    with duckdb.connect(db, read_only=True) as con:
        newest = con.execute("SELECT max(start_time) FROM tool_calls").fetchone()[0]  # type: ignore[index]
        newest_payload = con.execute(
            "SELECT max(t.start_time) FROM payloads p JOIN tool_calls t USING (trace_id, span_id)"
        ).fetchone()[0]  # type: ignore[index]
        cut = payloads_removed_before(con)
    assert newest > NOW - timedelta(days=1) and newest_payload == newest  # the newest are what stays
    assert summary.removed["payloads"] > 0 and summary.removed.get("tool_calls", 0) == 0  # payloads went first
    assert cut is not None and cut > NOW - timedelta(days=DAYS)  # what the cap removed is on record


def test_a_cap_the_store_cannot_fit_is_said_with_why(fed: str, tmp_path: Path) -> None:
    db = _copy(fed, tmp_path)
    summary = prune(db, Retention(rows=None, payloads=None, max_bytes=1000), now=NOW, compact=True)
    assert summary.calls_after == 0 and summary.size_after is not None and summary.size_after > 1000
    said = summary.lines()[-1]
    assert said.startswith("still over the size cap of 1.0 KB: no call is left to remove")
    (tmp_path / "fits").mkdir()
    fits = prune(_copy(fed, tmp_path / "fits"), Retention(rows=None, payloads=None, max_bytes=10**12), now=NOW)
    assert not any("still over" in line for line in fits.lines())  # a store within its cap says nothing of it


def test_a_cap_only_a_rewrite_would_reach_says_so(fed: str, tmp_path: Path) -> None:
    db = _copy(fed, tmp_path)
    cap = store_bytes(db) - 1  # a tenth of the payloads goes: the blocks they leave stay in the file
    summary = prune(db, Retention(rows=None, payloads=None, max_bytes=cap), now=NOW, compact=False)
    assert summary.calls_after and summary.size_after is not None and summary.size_after > cap
    assert (
        summary.lines()[-1].startswith("still over the size cap of ")
        and "the file was not rewritten" in (summary.lines()[-1])
    )


def test_prune_on_the_command_line_prints_what_went(
    fed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from collector.cli import main

    db = _copy(fed, tmp_path)
    assert main(["prune", "--db", db, "--retain", "45d", "--retain-payloads", "forever"]) == 0
    out = capsys.readouterr().out
    assert f"pruned {db}:" in out and "rows before" in out and "tool_calls 120" in out
    assert main(["prune", "--db", db, "--retain", "soon"]) == 2  # a bad age stops with its name, nothing removed
    err = capsys.readouterr().err
    assert "--retain='soon' is not an age" in err
    typo = str(tmp_path / "typo.duckdb")
    assert main(["prune", "--db", typo]) == 2  # a path with no store is said, not made into an empty one
    assert f"--db: no toolmeter store at {typo}" in capsys.readouterr().err and not os.path.exists(typo)
    (tmp_path / "fresh").mkdir()
    fresh = _copy(fed, tmp_path / "fresh")
    for folder, _, names in os.walk(payload_dir(fresh)):  # files just written: a batch may be committing
        for name in names:
            os.utime(os.path.join(folder, name))
    assert main(["prune", "--db", fresh, "--retain-payloads", "7d", "--dry-run"]) == 0
    assert "payload file(s) no row would point at would be kept: written in the last 10 minutes" in (
        capsys.readouterr().out
    )
    assert main(["prune", "--db", fresh, "--retain-payloads", "7d"]) == 0
    assert "payload file(s) no row points at were kept: written in the last 10 minutes" in capsys.readouterr().out


def test_retention_settings_are_checked_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from collector import config

    monkeypatch.delenv("TOOLMETER_RETAIN")
    monkeypatch.delenv("TOOLMETER_RETAIN_PAYLOADS")
    assert config.retention() == (timedelta(days=30), timedelta(days=7), None)
    monkeypatch.setenv("TOOLMETER_RETAIN", "90d")
    monkeypatch.setenv("TOOLMETER_RETAIN_PAYLOADS", "forever")
    monkeypatch.setenv("TOOLMETER_MAX_STORE_BYTES", "2GiB")
    assert config.retention() == (timedelta(days=90), None, 2 * 2**30)
    monkeypatch.setenv("TOOLMETER_RETAIN", "a month")
    with pytest.raises(ConfigError, match="TOOLMETER_RETAIN='a month' is not an age; write 30d"):
        config.retention()
    with pytest.raises(InputError, match="longer than zero"):
        Retention(rows=timedelta(0))
    with pytest.raises(InputError, match="size cap applies to a DuckDB file"):
        prune("ducklake:postgres:dbname=x", Retention(max_bytes=10**9))


def test_prune_rewrites_a_file_made_with_keys_without_them_and_keeps_every_row(tmp_path: Path) -> None:
    from collector.config import CollectorConfig
    from collector.ingest import ingest_files
    from collector.store.database import read_connection
    from collector.store.retention import Retention, prune
    from tests.collector.test_store import keyed_file

    db = str(tmp_path / "old.duckdb")
    keyed_file(db)
    samples = sorted(str(p) for p in (Path(__file__).resolve().parents[2] / "sample_traces").glob("traces-*.json.gz"))
    ingest_files(samples[:1], CollectorConfig(db=db))

    def contents() -> tuple[object, ...]:
        with read_connection(db) as con:
            keys = con.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
                               "AND table_name IN ('tool_calls', 'llm_calls', 'payloads', 'message_views', "
                               "'tool_call_names')").fetchone()  # fmt: skip
            counts = con.execute("SELECT (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM llm_calls), "
                                 "(SELECT count(*) FROM payloads), (SELECT count(*) FROM message_views)").fetchone()  # fmt: skip
            return keys, counts, ranking(con)

    keys, counts, rank = contents()
    assert keys == (5,) and counts[0] > 0  # type: ignore[index]
    summary = prune(db, Retention(rows=None, payloads=None), compact=True)  # nothing to remove: only the rewrite
    assert summary.compacted
    assert contents() == ((0,), counts, rank)
    again = ingest_files(samples[:1], CollectorConfig(db=db))  # the same spans again: skipped without keys too
    assert again.tool_calls == 0 and contents()[1] == counts


def test_a_store_mostly_in_small_row_groups_is_rewritten_into_full_ones(fed: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import collector.store.compaction as compaction

    db = _copy(fed, tmp_path)
    compact_file(db, "no free blocks to begin with")
    con = duckdb.connect()
    # the calls again, 40 times over with span ids of their own, in small row groups
    con.execute(f"ATTACH '{db}' AS s (ROW_GROUP_SIZE 2048)")
    con.execute("CREATE TEMP TABLE once AS SELECT * FROM s.tool_calls")
    con.execute(
        "INSERT INTO s.tool_calls SELECT once.* REPLACE (span_id || '-' || k AS span_id) FROM once, range(40) r(k)"
    )
    con.close()

    def groups() -> int:
        with duckdb.connect(db, read_only=True) as c:
            row = c.execute("SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('tool_calls')").fetchone()
            return int(row[0]) if row else 0

    def rank() -> object:
        with duckdb.connect(db, read_only=True) as c:
            return ranking(c, Filters(), exact=True)

    before = rank()
    assert groups() >= 5
    monkeypatch.setattr(compaction, "MIN_SMALL_GROUPS", 1000)
    assert compact_file(db) is None, "too few small row groups to be worth a rewrite"
    monkeypatch.setattr(compaction, "MIN_SMALL_GROUPS", 2)  # a writer's checkpoint merges them into groups of 8,192
    summary = prune(db, Retention(rows=None, payloads=None), compact=True)
    assert summary.compacted and "small row groups" in summary.compacted
    assert "100% of its tool calls were in" in "\n".join(summary.lines())
    assert groups() == 1 and rank() == before
    assert compact_file(db) is None, "once rewritten, its groups are full"


def test_a_rewrite_the_disk_cannot_hold_is_not_started_and_said(fed: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import collector.store.compaction as compaction

    db = _copy(fed, tmp_path)
    with duckdb.connect() as con:  # the calls again, in small row groups: worth a rewrite
        con.execute(f"ATTACH '{db}' AS s (ROW_GROUP_SIZE 2048)")
        con.execute("CREATE TEMP TABLE once AS SELECT * FROM s.tool_calls")
        con.execute(
            "INSERT INTO s.tool_calls SELECT once.* REPLACE (span_id || k AS span_id) FROM once, range(40) r(k)"
        )
    monkeypatch.setattr(compaction, "MIN_SMALL_GROUPS", 2)
    inode = os.stat(db).st_ino  # a rewrite puts a new file in its place
    # all the disk's free space and more is what a rewrite must leave free
    monkeypatch.setattr(compaction, "ROOM_BYTES", 2**62)
    Path(db + ".compact.tmp").write_bytes(b"\0" * 2**20)  # a killed rewrite's file: gone before the room is measured
    summary = prune(db, Retention(rows=None, payloads=None), compact=True)
    assert summary.compacted is None and summary.no_room
    said = "\n".join(summary.lines())
    # the file may also have free blocks (what an earlier writer left, by the order tests ran in)
    assert re.search(r"not rewritten \((\d+% of it was free blocks; )?100% of its tool calls were in \d+ small row "
                     r"groups\): the new file needs up to ", said), said  # fmt: skip
    assert "MB free (of which " in said and "free some space there" in said
    assert os.stat(db).st_ino == inode and not os.path.exists(db + ".compact.tmp")
    with pytest.raises(compaction.NoRoom):
        compact_file(db, "asked for")


def test_a_rewrite_that_fails_leaves_the_store_as_it_was_and_no_half_file(fed: str, tmp_path: Path) -> None:
    import subprocess
    import sys
    import textwrap

    db = _copy(fed, tmp_path)
    with duckdb.connect(db, read_only=True) as con:
        counts = con.execute("SELECT count(*), sum(raw_tokens) FROM tool_calls").fetchone()
    # a process that may write no file larger than a tenth of the store: the disk is full for it
    script = textwrap.dedent(f"""
        import os, resource, signal
        from collector.errors import StoreError
        from collector.store.compaction import compact_file
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({os.path.getsize(db) // 10}, resource.RLIM_INFINITY))
        try:
            compact_file({db!r}, "asked for")
        except StoreError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert "failed (the store is unchanged)" in out.stdout and "File too large" in out.stdout, out.stderr
    assert not [p for p in os.listdir(tmp_path) if ".compact.tmp" in p], "the half-written file was removed"
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*), sum(raw_tokens) FROM tool_calls").fetchone() == counts


def test_a_dry_run_says_what_a_run_would_remove_and_changes_nothing(
    fed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from collector.cli import main

    db = _copy(fed, tmp_path)

    def state() -> tuple[object, ...]:
        with duckdb.connect(db, read_only=True) as con:
            counts = con.execute(
                "SELECT (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM llm_calls), "
                "(SELECT count(*) FROM payloads), (SELECT count(*) FROM message_views), "
                "(SELECT count(*) FROM retention_runs), (SELECT count(*) FROM rollup_days)"
            ).fetchone()
        files = sorted(p for _, _, names in os.walk(payload_dir(db)) for p in names)
        return counts, files, os.stat(db).st_ino

    before = state()
    retention = Retention(rows=timedelta(days=30), payloads=timedelta(days=7), max_bytes=10**12)
    dry = prune(db, retention, now=NOW, compact=True, dry_run=True)
    assert state() == before
    said = dry.lines()
    assert said[0].startswith("would remove rows before ") and "store " in said[3] and said[3].endswith(" now")
    assert said[4] == "within the size cap of 1,000,000.0 MB"
    real = prune(db, retention, now=NOW, compact=True)
    assert dry.removed == real.removed and dry.removed["tool_calls"] == 30 * 4 * 2
    assert (dry.payload_files, dry.payload_file_bytes) == (real.payload_files, real.payload_file_bytes)
    assert dry.payload_files > 0 and said[1] == real.lines()[1] and said[2] == real.lines()[2]

    (tmp_path / "again").mkdir()
    again = _copy(fed, tmp_path / "again")
    assert main(["prune", "--db", again, "--retain", "45d", "--max-size", "1KB", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"dry run on {again}, nothing removed:" in out and "would remove rows before" in out
    assert "tool_calls 120" in out and "over the size cap of 1.0 KB: after the above, a run removes" in out
    with duckdb.connect(again, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (DAYS * 4 * 2,)
