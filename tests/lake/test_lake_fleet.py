"""Several receivers, each as if on its own host, writing one DuckLake at once; and faults.

Every test here runs real ``toolmeter serve`` processes against a real PostgreSQL catalog
and checks what matters to a fleet: every span a receiver acknowledged is in the lake
exactly once, the lake ranks tools as a DuckDB file does for the same spans, and the
failures (catalog restarts, a writer killed mid-commit, commits that run out of retries)
lose nothing and show up in the receivers' logs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from collector.config import CollectorConfig
from collector.ingest import ingest_files
from collector.query.ranking import ranking
from collector.store import lake as L
from collector.store.database import read_connection
from collector.store.maintenance import maintain
from tests.collector.test_ingest_cli import llm, otlp, tool

from .conftest import Lake, PostgresServer

pytestmark = pytest.mark.slow

TOOLS = ("search_orders", "fetch_logs", "get_weather")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Host:
    """One receiver process with its own state folder (spool, extensions), as on its own machine."""

    lake: Lake
    name: str
    root: Path
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    refusals: list[str] = field(default_factory=list)
    """What the receiver answered to each refused or failed attempt, for a failing test's message."""
    options: tuple[str, ...] = ()
    """More options of its ``serve``."""

    @property
    def log(self) -> Path:
        return self.root / "serve.log"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{L.STATE_DIR_ENV: str(self.root / "state"), L.DATA_PATH_ENV: str(self.lake.data_path)})
        # the extensions are already installed for this run: share them (a host would install its own)
        ext = self.lake.state_dir / "duckdb_extensions"
        (self.root / "state").mkdir(exist_ok=True)
        if ext.exists() and not (self.root / "state" / "duckdb_extensions").exists():
            (self.root / "state" / "duckdb_extensions").symlink_to(ext)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collector", "serve", "--db", self.lake.uri, "--port", str(self.port),
                 "--grpc-port", "0", *self.options],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited:\n{self.log.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"{self.name} did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # drains what is queued first
            self.proc.wait(timeout=300)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def send(self, body: bytes, attempts: int = 5) -> bool:
        """POST like an OTLP exporter: retry a refused or timed-out request with backoff."""
        for attempt in range(attempts):
            req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/traces", data=body,
                                         headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
            started = time.monotonic()
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    if resp.status == 200:
                        return True
                    self.refusals.append(f"HTTP {resp.status}")
            except urllib.error.HTTPError as e:
                self.refusals.append(f"HTTP {e.code} {e.read()[:200]!r}")
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                self.refusals.append(f"{type(e).__name__} {e} after {time.monotonic() - started:.1f} s")
            time.sleep(0.5 * 2**attempt)
        return False

    def refused(self, what: str) -> str:
        """A failing assertion's message: what was refused, the answers, the end of the log."""
        alive = "running" if self.proc is not None and self.proc.poll() is None else "exited"
        return f"{what}; {self.name} {alive}, answered {self.refusals[-5:]}; log:\n{self.log.read_text()[-2000:]}"


def _trace(host: int, n: int, words: int = 40) -> list[dict]:  # type: ignore[type-arg]
    """One agent run: an LLM call, three tool calls, an LLM call after each."""
    trace = f"{host:08x}{n:024x}"
    spans: list[dict] = [llm(1, trace=trace)]  # type: ignore[type-arg]
    for k in range(3):
        result = json.dumps([{"id": i, "host": host, "n": n, "note": "word " * words} for i in range(1 + (n + k) % 7)])
        spans.append(tool(2 + 2 * k, result, name=TOOLS[(n + k) % 3], trace=trace))
        spans.append(llm(3 + 2 * k, trace=trace))
    return spans


@pytest.fixture
def hosts(lake: Lake, tmp_path: Path) -> Iterator[list[Host]]:
    made: list[Host] = []
    yield made
    for h in made:
        if h.proc is not None and h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()
    L.close_all()


def _stored(uri: str) -> list[str]:
    with read_connection(uri) as con:
        return [r[0] + r[1] for r in con.execute("SELECT trace_id, span_id FROM tool_calls").fetchall()]


def _wait_for(uri: str, expected: set[str], timeout_s: float = 240) -> list[str]:
    deadline = time.monotonic() + timeout_s
    stored: list[str] = []
    while time.monotonic() < deadline:
        try:
            stored = _stored(uri)
        except Exception:  # the catalog may be restarting
            stored = []
        if expected <= set(stored):
            return stored
        time.sleep(0.5)
    return stored


def _tool_ids(spans: list[dict]) -> list[str]:  # type: ignore[type-arg]
    return [s["traceId"] + s["spanId"] for s in spans if any(a["key"] == "gen_ai.tool.name" for a in s["attributes"])]


def test_three_receivers_write_one_lake_at_once(
    lake: Lake, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    hosts += [Host(lake, f"host{i}", tmp_path / f"host{i}") for i in range(3)]
    for h in hosts:
        h.start()
    acked: dict[int, list[str]] = {i: [] for i in range(3)}
    bodies: list[dict] = []  # type: ignore[type-arg]
    lock = threading.Lock()

    def agent(i: int) -> None:
        for n in range(40):
            doc = otlp(*_trace(i, n))
            if hosts[i].send(json.dumps(doc).encode()):
                with lock:
                    acked[i] += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
                    bodies.append(doc)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    # the dashboard's query, while they write: never fails, never goes backwards
    seen = 0
    reads = 0
    while any(t.is_alive() for t in threads) or reads < 3:
        with read_connection(lake.uri) as con:
            calls = sum(r["calls"] for r in ranking(con))
        assert calls >= seen
        seen, reads = calls, reads + 1
        time.sleep(0.2)
    for t in threads:
        t.join()
    for h in hosts:
        h.stop()
    expected = {s for ids in acked.values() for s in ids}
    assert len(expected) == 3 * 40 * 3
    stored = _wait_for(lake.uri, expected)
    assert len(stored) == len(set(stored)) == len(expected), "each acknowledged span exactly once"
    assert set(stored) == expected

    # the same spans in a DuckDB file rank the same
    files = []
    for k, doc in enumerate(bodies):
        path = tmp_path / f"b{k}.json"
        path.write_text(json.dumps(doc))
        files.append(str(path))
    file_db = str(tmp_path / "same.duckdb")
    ingest_files(files, CollectorConfig(db=file_db))
    with read_connection(file_db) as con:
        expected_ranking = ranking(con)
    with read_connection(lake.uri) as con:
        assert ranking(con) == expected_ranking
    summary = maintain(lake.uri)
    assert summary.files_after <= summary.files_before
    with read_connection(lake.uri) as con:
        assert ranking(con) == expected_ranking
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (len(expected),)


def _supervise(h: Host) -> bool:
    """Restart a receiver that died, as systemd's Restart=always would; True when it had.

    DuckDB 1.5.5 with the DuckLake extension can abort the process ("database has been
    invalidated because of a previous fatal error") when the PostgreSQL catalog restarts
    under a commit. What was acknowledged is in the receiver's spool, and the restarted
    receiver writes it: this test checks that promise holds either way.
    """
    assert h.proc is not None
    if h.proc.poll() is None:
        return False
    h.start()
    return True


def test_catalog_restart_and_outage_mid_stream_lose_nothing(
    lake: Lake, postgres: PostgresServer, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    hosts += [Host(lake, f"host{i}", tmp_path / f"host{i}") for i in range(2)]
    for h in hosts:
        h.start()
    acked: list[str] = []
    try:
        for n in range(45):
            if n == 10:
                postgres.restart()  # a quick restart: commits in flight fail and are retried
            if n == 20:
                postgres.stop()  # an outage longer than a commit's retries
            for i, h in enumerate(hosts):
                doc = otlp(*_trace(i, n))
                # receivers spool locally and keep acknowledging while the catalog is away
                body = json.dumps(doc).encode()
                if not h.send(body) and _supervise(h):
                    assert h.send(body), h.refused(f"{h.name} refused batch {n} after a restart")
                acked += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
            if n == 20:
                time.sleep(30)
                postgres.start()
    finally:  # a failure mid-outage must not leave the catalog down for the tests after this one
        if not postgres.is_running():
            postgres.start()
    for h in hosts:
        _supervise(h)
    stored = _wait_for(lake.uri, set(acked))
    for h in hosts:
        h.stop()
    assert len(stored) == len(set(stored)) == len(set(acked))
    logs = "".join(h.log.read_text() for h in hosts)
    assert "cannot commit to the lake" in logs, "an outage longer than the retries is reported"
    assert "password=toolmeter" not in logs and "password=***" in logs


def test_a_writer_killed_mid_commit_loses_and_doubles_nothing(
    lake: Lake, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    host = Host(lake, "host0", tmp_path / "host0")
    hosts.append(host)
    host.start()
    acked: list[str] = []
    for n in range(60):
        doc = otlp(*_trace(0, n, words=3000))  # large results: commits take a while
        if host.send(json.dumps(doc).encode()):
            acked += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
        if n in (25, 45):
            host.kill()  # with acknowledged work queued and, likely, a commit under way
            host.start()  # the same host: replays its spool from the lake's record of progress
    stored = _wait_for(lake.uri, set(acked))
    host.stop()
    assert len(acked) == 180
    assert len(stored) == len(set(stored)) == len(set(acked))


def test_a_receiver_started_while_the_catalog_is_away_accepts_and_writes_once_it_is_back(
    lake: Lake, postgres: PostgresServer, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a supervisor restarts a receiver during an outage: it must come up, spool and acknowledge
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    host = Host(lake, "host0", tmp_path / "host0")
    hosts.append(host)
    acked: list[str] = []
    postgres.stop()
    try:
        host.start()
        for n in range(3):
            doc = otlp(*_trace(0, n))
            assert host.send(json.dumps(doc).encode()), host.refused(f"batch {n} refused during the outage")
            acked += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
    finally:
        postgres.start()
    stored = _wait_for(lake.uri, set(acked))
    host.stop()
    assert len(stored) == len(set(stored)) == len(set(acked)) == 9
    assert "the lake cannot be reached" in host.log.read_text()


def test_sigterm_during_an_outage_exits_promptly_and_the_next_start_writes_the_spool(
    lake: Lake, postgres: PostgresServer, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a supervisor stops a receiver while the catalog is away: the store's retries end at once
    # (what was acknowledged stays in the spool), and the next start on the same disk writes it
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    host = Host(lake, "host0", tmp_path / "host0")
    hosts.append(host)
    host.start()
    first = otlp(*_trace(0, 0))
    assert host.send(json.dumps(first).encode())
    acked = _tool_ids(first["resourceSpans"][0]["scopeSpans"][0]["spans"])
    _wait_for(lake.uri, set(acked))
    postgres.stop()
    try:
        for n in (1, 2):
            doc = otlp(*_trace(0, n))
            assert host.send(json.dumps(doc).encode()), host.refused(f"batch {n} refused during the outage")
            acked += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
        assert host.proc is not None
        started = time.monotonic()
        host.proc.send_signal(signal.SIGTERM)
        host.proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        postgres.start()
    assert took < 30, f"SIGTERM took {took:.0f} s during the outage"
    assert "stay in the spool" in host.log.read_text()
    again = Host(lake, "host0-again", tmp_path / "host0")  # the same state folder: the same spool
    hosts.append(again)
    again.start()
    stored = _wait_for(lake.uri, set(acked))
    again.stop()
    assert sorted(stored) == sorted(set(acked)) and len(acked) == 9
    for log in (host.log, again.log):  # the spool replay's line names the lake without its password
        assert re.search(r"password=(?!\*\*\*)", log.read_text()) is None


DAY_NS = 86_400 * 10**9


def _dated(doc: dict, start_ns: int) -> dict:  # type: ignore[type-arg]
    """``doc``'s spans moved to start at ``start_ns``, as far apart as they were."""
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    first = min(int(s["startTimeUnixNano"]) for s in spans)
    for s in spans:
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            s[key] = str(int(s[key]) - first + start_ns)
    return doc


def test_receivers_pruning_one_lake_while_they_write_keep_every_new_span_once(
    lake: Lake, hosts: list[Host], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(L.STATE_DIR_ENV, str(lake.state_dir))
    monkeypatch.setenv(L.DATA_PATH_ENV, str(lake.data_path))
    now_ns = time.time_ns()
    old: list[str] = []
    files = []
    for n in range(30):  # sixty days ago and after, two a day
        doc = _dated(otlp(*_trace(9, n)), now_ns - 60 * DAY_NS + n * DAY_NS // 2)
        old += _tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"])
        (tmp_path / f"old{n}.json").write_text(json.dumps(doc))
        files.append(str(tmp_path / f"old{n}.json"))
    ingest_files(files, CollectorConfig(db=lake.uri))
    L.close_all()
    # each applies the retention every second, at the same time as the others and as the writes
    hosts += [Host(lake, f"host{i}", tmp_path / f"host{i}", options=("--retain", "30d", "--prune-every", "1s"))
              for i in range(3)]  # fmt: skip
    for h in hosts:
        h.start()
    acked: list[str] = []
    lock = threading.Lock()

    def agent(i: int) -> None:
        for n in range(40):
            doc = _dated(otlp(*_trace(i, n)), now_ns - 3600 * 10**9)
            if hosts[i].send(json.dumps(doc).encode()):
                with lock:
                    acked.extend(_tool_ids(doc["resourceSpans"][0]["scopeSpans"][0]["spans"]))
            time.sleep(0.1)

    threads = [threading.Thread(target=agent, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(2)  # more retention runs, on a lake with nothing left to remove
    for h in hosts:
        h.stop()
    logs = "".join(h.log.read_text() for h in hosts)
    assert [h.proc.returncode for h in hosts if h.proc] == [0, 0, 0], logs[-3000:]
    stored = _wait_for(lake.uri, set(acked))
    assert len(acked) == 3 * 40 * 3
    assert len(stored) == len(set(stored)) == len(acked), "each acknowledged span exactly once"
    assert set(stored) == set(acked), "none of the new ones pruned, none of the old ones left"
    assert logs.count("tool_calls 90") == 1, "one receiver removed the old calls; the others found them gone"
    assert logs.count("toolmeter retention: ") >= 3 * 5 and "retention failed" not in logs, logs[-3000:]
