"""DuckLake benchmark: ingest with 1, 2 and 3 writers, and ranking latency on a lake.

Starts a PostgreSQL for the catalog (or uses ``--catalog``), then:

1. Aggregate ingest: the same stream of tool spans (about 1 KB results, with LLM calls)
   sent over OTLP/HTTP to 1, 2 and 3 ``toolmeter serve`` processes writing one lake, each
   fed by its own client, against one receiver writing one DuckDB file (the baseline).
   Reported: spans/s until the last span is queryable, and the ratio to the baseline.
2. Query latency: the ranking (the dashboard's home-page query) on a lake of ``--calls``
   generated tool calls written in ``--commits`` commits (a fleet's many small files),
   before and after ``toolmeter lake maintain``, against a DuckDB file of the same size.

Usage: ``python benchmarks/bench_lake.py [--spans N] [--calls N] [--commits N] [--catalog DSN]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_dashboard import populate, timed  # noqa: E402
from collector.query.ranking import Filters, ranking  # noqa: E402
from collector.store import lake as L  # noqa: E402
from collector.store.connection import connect, read_connection  # noqa: E402
from collector.store.database import Store  # noqa: E402
from collector.store.maintenance import maintain  # noqa: E402
from tests.collector.test_ingest_cli import llm, otlp, tool  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_postgres() -> tuple[Any, Path]:
    from tests.lake.conftest import _start_server, find_postgres_bindir

    bindir = find_postgres_bindir()
    if bindir is None:
        sys.exit("PostgreSQL is not installed: apt-get install -y postgresql (or pass --catalog DSN)")
    return _start_server(bindir)


def _bodies(writer: int, traces: int) -> list[bytes]:
    out = []
    for n in range(0, traces, 10):
        spans: list[dict] = []  # type: ignore[type-arg]
        for t in range(n, min(n + 10, traces)):
            trace = f"{writer + 1:08x}{t:024x}"
            spans.append(llm(1, trace=trace))
            for k in range(3):
                rows = [{"id": i, "status": "paid", "amount": round(i * 3.7, 2), "region": "north"} for i in range(12)]
                spans.append(
                    tool(2 + 2 * k, json.dumps(rows), name=("search_orders", "get_weather")[k % 2], trace=trace)
                )
                spans.append(llm(3 + 2 * k, trace=trace))
        out.append(json.dumps(otlp(*spans)).encode())
    return out


def _serve(db: str, state: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = dict(os.environ, **env_extra, **{L.STATE_DIR_ENV: str(state)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", str(port), "--grpc-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"toolmeter serve on {L.redact(db)} did not start")


def _post_json(url: str, body: bytes) -> None:
    import urllib.request

    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def ingest_run(db: str, writers: int, traces: int, work: Path, env_extra: dict[str, str]) -> float:
    """Spans/s (tool + LLM) from the first request until every span is queryable."""
    bodies = [_bodies(w, traces // writers) for w in range(writers)]
    total = sum(b.count(b'"spanId"') for bs in bodies for b in bs)
    servers = [_serve(db, work / f"state-{w}-{time.monotonic_ns()}", env_extra) for w in range(writers)]
    try:
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=lambda bs=bs, port=port: [_post_json(f"http://127.0.0.1:{port}/v1/traces", b) for b in bs])
            for bs, (_proc, port) in zip(bodies, servers, strict=True)
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while True:
            try:
                with read_connection(db, wait_s=5) as con:
                    row = con.execute("SELECT (SELECT count(*) FROM tool_calls) + (SELECT count(*) FROM llm_calls)")
                    n = int(row.fetchone()[0])  # type: ignore[index]
            except Exception:
                n = 0
            if n >= total:
                return total / (time.perf_counter() - t0)
            time.sleep(0.1)
    finally:
        for proc, _port in servers:
            proc.terminate()
            proc.wait(timeout=300)


def query_latency(lake: str, work: Path, calls: int, commits: int, rounds: int) -> list[tuple[str, float]]:
    file_db = str(work / "same-size.duckdb")
    Store(file_db).ensure_schema()
    con = duckdb.connect(file_db)
    populate(con, calls)
    con.close()
    Store(lake).ensure_schema()
    lcon = connect(lake, read_only=False, wait_s=0)
    chunk = calls // commits
    t0 = time.perf_counter()
    for c in range(commits):
        populate(lcon, chunk, first=c * chunk, finish=c == commits - 1)
    print(f"   built a lake of {calls:,} tool calls in {commits} commits: {time.perf_counter() - t0:.1f} s")
    lcon.close()

    def rank(db: str) -> Callable[[], object]:
        def run() -> object:
            with read_connection(db) as con:
                return ranking(con, Filters())

        return run

    rows = [("DuckDB file (baseline)", timed(rank(file_db), rounds))]
    rank(lake)()  # attach once: a dashboard process keeps its lake attached
    rows.append((f"lake, {commits} commits, before maintenance", timed(rank(lake), rounds)))
    t0 = time.perf_counter()
    summary = maintain(lake, snapshots_older_than=timedelta(0))
    print(f"   toolmeter lake maintain: {time.perf_counter() - t0:.1f} s; " + "; ".join(summary.lines()[:2]))
    rows.append(("lake, after maintenance", timed(rank(lake), rounds)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=600, help="agent runs per ingest round (7 spans each)")
    parser.add_argument("--calls", type=int, default=1_000_000, help="tool calls in the query-latency stores")
    parser.add_argument("--commits", type=int, default=200, help="commits that write the query-latency lake")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--catalog", default=None, help="a PostgreSQL conninfo to use instead of starting one")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="toolmeter-bench-lake-"))
    server: Any = None
    pg_root = work
    try:
        if args.catalog:
            dsn = args.catalog
        else:
            server, pg_root = _start_postgres()
            dsn = server.dsn
        state = work / "state"
        os.environ[L.STATE_DIR_ENV] = str(state)

        def new_lake(name: str) -> tuple[str, dict[str, str]]:
            if server is not None:
                server.create_database(name)
                conninfo = server.dsn_for(name)
            else:
                conninfo = dsn
            data = work / f"{name}-data"
            os.environ[L.DATA_PATH_ENV] = str(data)
            return f"ducklake:postgres:{conninfo}", {L.DATA_PATH_ENV: str(data)}

        print(f"1. aggregate ingest, {args.traces:,} agent runs of 7 spans (1 KB results) per round")
        base = ingest_run(str(work / "one.duckdb"), 1, args.traces, work, {})
        rows = [("one DuckDB file, 1 receiver (baseline)", base)]
        for writers in (1, 2, 3):
            lake, env = new_lake(f"ingest{writers}")
            rows.append((f"one lake, {writers} receiver(s)", ingest_run(lake, writers, args.traces, work, env)))
        print(f"   {'writers':<42} {'spans/s':>9} {'vs file':>8}")
        for name, rate in rows:
            print(f"   {name:<42} {rate:>9,.0f} {rate / base:>7.2f}x")

        print(f"\n2. ranking latency at {args.calls:,} tool calls (median of {args.rounds})")
        lake, _env = new_lake("query")
        lat = query_latency(lake, work, args.calls, args.commits, args.rounds)
        base_s = lat[0][1]
        print(f"   {'store':<42} {'seconds':>9} {'vs file':>8}")
        for name, sec in lat:
            print(f"   {name:<42} {sec:>9.3f} {sec / base_s:>7.2f}x")
    finally:
        L.close_all()
        if server is not None:
            server.stop()
            shutil.rmtree(pg_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
