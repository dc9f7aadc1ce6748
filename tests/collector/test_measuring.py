"""Large batches measured in worker processes store exactly what the receiver's threads store."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from collector import measuring
from collector.config import CollectorConfig
from collector.serve.receiver import ReceiverConfig, RunningReceiver
from collector.store.database import read_connection
from tests.collector.test_ingest_cli import llm, otlp, tool

SKIP = {"token_counter"}


def _body(n: int, offset: int = 0) -> bytes:
    spans = []
    for i in range(n):
        rows = [{"id": i * 100 + k, "status": "paid", "note": "x" * 30} for k in range(40)]
        spans.append(
            tool(offset + i, json.dumps(rows), trace=f"{offset + i // 10:032x}", **{"gen_ai.tool.call.id": f"c{i}"})
        )
        if i % 10 == 9:
            spans.append(llm(offset + i, trace=f"{offset + i // 10:032x}"))
    return json.dumps(otlp(*spans)).encode()


def _bodies(requests: int, spans: int, offset: int = 0) -> list[bytes]:
    """Enough requests for the worker processes to take the batch (see MeasuringPool.worth_it)."""
    return [_body(spans, offset + k * 1000) for k in range(requests)]


def _post(url: str, body: bytes) -> None:
    req = urllib.request.Request(f"{url}/v1/traces", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def _post_as_one_batch(r: RunningReceiver, bodies: list[bytes]) -> None:
    """Post ``bodies`` while the writer is paused, so that it takes them as one batch, and wait until stored."""
    r.receiver.paused = True
    for body in bodies:
        _post(r.url, body)
    r.receiver.paused = False
    assert r.receiver.flush(120)


def _count_starts(r: RunningReceiver) -> list[int]:
    """The requests of every slice ``r`` starts measuring, appended as it starts them."""
    started: list[int] = []
    start = r.receiver._start_measuring

    def counted(records):  # type: ignore[no-untyped-def]
        started.append(len(records))
        return start(records)

    r.receiver._start_measuring = counted  # type: ignore[method-assign]
    return started


def _run(db: str, processes: int, bodies: list[bytes]) -> tuple[list[tuple[object, ...]], list[str]]:
    r = RunningReceiver(CollectorConfig(db=db, flush_interval=0.05),
                        ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None, measure_processes=processes))  # fmt: skip
    try:
        _post_as_one_batch(r, bodies)  # over MIN_POOL_BYTES
        workers = [p.name for p in multiprocessing.active_children()]
    finally:
        r.stop()
    with read_connection(db) as con:
        cols = [c[0] for c in con.execute("DESCRIBE tool_calls").fetchall() if c[0] not in SKIP]
        rows = con.execute(f"SELECT {', '.join(cols)} FROM tool_calls ORDER BY trace_id, span_id").fetchall()
    return rows, workers


def test_worker_processes_store_what_threads_store(tmp_path: Path) -> None:
    bodies = _bodies(12, 30)
    assert sum(map(len, bodies)) > measuring.MIN_POOL_BYTES
    in_threads, none = _run(str(tmp_path / "threads.duckdb"), 1, bodies)
    in_processes, workers = _run(str(tmp_path / "processes.duckdb"), 2, bodies)
    assert none == [] and len(workers) == 2, "two measuring processes ran the large batch"
    assert len(in_threads) == 360 and in_processes == in_threads
    assert multiprocessing.active_children() == [], "the receiver stops its workers"


def test_slices_are_measured_while_the_one_before_is_written(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import collector.serve.receiver as receiver_module

    bodies = _bodies(48, 10)
    monkeypatch.setattr(receiver_module, "SLICE_BYTES", sum(map(len, bodies[:8])))  # 6 slices, 2 batches
    db = str(tmp_path / "slices.duckdb")
    r = RunningReceiver(CollectorConfig(db=db, flush_interval=0.05),
                        ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None, measure_processes=2))  # fmt: skip
    started = _count_starts(r)
    prefetched: list[bool] = []
    prefetch = r.receiver._prefetch

    def noted() -> None:
        prefetch()
        prefetched.append(r.receiver._prefetched is not None)

    r.receiver._prefetch = noted  # type: ignore[method-assign]
    try:
        _post_as_one_batch(r, bodies)
    finally:
        r.stop()
    # each slice measured once: the next batch's first slice, started while the last slice of
    # the batch before was written, is the one it used
    assert prefetched.count(True) == 1, "the second batch's first slice was started during the first batch"
    assert sum(started) == 48 and len(started) == 6
    with read_connection(db) as con:
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM tool_calls").fetchone() == (480, 480)
        assert con.execute("SELECT max(duplicates) FROM collector_stats").fetchone() == (0,)
    assert multiprocessing.active_children() == []


def test_a_prefetched_slice_of_many_small_requests_is_measured_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import collector.serve.receiver as receiver_module

    bodies = _bodies(48, 10)
    # a slice's bytes span more requests than a batch takes (as with an exporter sending a span a request)
    monkeypatch.setattr(receiver_module, "SLICE_BYTES", sum(map(len, bodies[:16])))
    monkeypatch.setattr(measuring, "MIN_POOL_BYTES", 1)
    db = str(tmp_path / "many.duckdb")
    r = RunningReceiver(CollectorConfig(db=db, flush_interval=0.05),
                        ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None, measure_processes=2))  # fmt: skip
    r.receiver._worker.batch_items = 8
    started = _count_starts(r)
    try:
        _post_as_one_batch(r, bodies)
    finally:
        r.stop()
    assert sum(started) == 48, "a slice measured ahead is the next batch's: none measured twice"
    with read_connection(db) as con:
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM tool_calls").fetchone() == (480, 480)
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_leaves_the_batch_to_the_receivers_threads(tmp_path: Path) -> None:
    db = str(tmp_path / "broken.duckdb")
    r = RunningReceiver(CollectorConfig(db=db, flush_interval=0.05),
                        ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None, measure_processes=2))  # fmt: skip
    try:
        _post_as_one_batch(r, _bodies(10, 20))
        for worker in multiprocessing.active_children():  # an OOM kill, say
            os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
        time.sleep(0.5)
        _post_as_one_batch(r, _bodies(10, 20, offset=50_000))
        assert r.receiver._processes.broken
    finally:
        r.stop()
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (400,)
    assert multiprocessing.active_children() == []


def test_requests_are_dealt_by_size_and_logs_stay_together_in_order() -> None:
    from collector.serve import spool as S

    logs = [(S.LOGS_JSON, b"l1"), (S.LOGS_PROTOBUF, b"l2")]
    spans = [(S.TRACES_JSON, b"x" * n) for n in (900, 100, 500, 450)]
    shares = measuring.deal([spans[0], logs[0], spans[1], logs[1], spans[2], spans[3]], 2)
    assert shares[0][:2] == logs
    assert sorted(sum(len(b) for _, b in s) for s in shares) == [954, 1000]


def test_workers_end_when_their_receiver_is_killed(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve = subprocess.Popen([sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "k.duckdb"),
                              "--port", str(port), "--grpc-port", "0"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    workers: list[str] = []
    everything: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        import psutil

        while time.monotonic() < deadline and len(workers) < 2:  # serve starts them at once
            time.sleep(0.2)
            children = psutil.Process(serve.pid).children()
            workers = [str(c.pid) for c in children if "resource_tracker" not in " ".join(c.cmdline())]
        everything = [str(c.pid) for c in psutil.Process(serve.pid).children()]
        with ThreadPoolExecutor(8) as pool:  # and they are measuring when it dies
            list(pool.map(lambda b: _post(f"http://127.0.0.1:{port}", b), _bodies(24, 20)))
    finally:
        serve.kill()  # no shutdown: nobody stops the pool
        serve.wait()
    assert len(workers) == 2

    def alive(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(alive, everything)):
        time.sleep(0.2)
    left = [w for w in everything if alive(w)]
    for w in left:
        os.kill(int(w), signal.SIGKILL)
    assert left == [], "measuring processes outlived their receiver"


def test_ingest_of_a_long_file_in_processes_stores_what_threads_store(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from collector import ingest as I
    from collector.config import MEASURE_PROCESSES_ENV
    from collector.ingest import ingest_files

    spans = []
    for i in range(400):
        rows = [{"id": i * 100 + k, "status": "paid"} for k in range(20)]
        spans.append(tool(i, json.dumps(rows), trace=f"{i // 10:032x}"))
    trace_file = tmp_path / "long.json"
    trace_file.write_text(json.dumps(otlp(*spans)))
    monkeypatch.setattr(I, "BATCH_SIZE", 32)  # 13 chunks: over MIN_POOL_CHUNKS
    used: list[int] = []
    real = measuring.MeasuringPool.submit_items

    def spy(self, chunks):  # type: ignore[no-untyped-def]
        pending = real(self, chunks)

        def result():  # type: ignore[no-untyped-def]
            parts = pending()
            used.append(len(parts or []))
            return parts

        return result

    monkeypatch.setattr(measuring.MeasuringPool, "submit_items", spy)
    stored = {}
    for processes in ("1", "2"):
        monkeypatch.setenv(MEASURE_PROCESSES_ENV, processes)
        db = str(tmp_path / f"p{processes}.duckdb")
        summary = ingest_files([str(trace_file)], CollectorConfig(db=db))
        assert summary.tool_calls == 400 and summary.failed == 0
        with read_connection(db) as con:
            cols = [c[0] for c in con.execute("DESCRIBE tool_calls").fetchall() if c[0] not in SKIP]
            stored[processes] = con.execute(f"SELECT {', '.join(cols)} FROM tool_calls ORDER BY span_id").fetchall()
    assert used == [13], "the long file went to the worker processes (and the other run did not)"
    assert stored["2"] == stored["1"]
    assert multiprocessing.active_children() == []


def test_a_folder_of_small_files_is_written_a_group_at_a_time_and_stored_as_a_call_a_file_stores_it(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """One OTLP request a file (as exporters that write files leave them): the files are measured
    and written together, not a write a file (or a chunk of one), a group while the next is
    measured; what is stored, the files' issues and their progress lines are a call a file's."""
    from collector import ingest as I
    from collector.ingest import ingest_files
    from collector.pipeline import Pipeline
    from tests.collector.test_ingest_cli import write

    files = []
    for f in range(8):
        trace = f"{f + 1:032x}"
        spans = [tool(f * 10 + k, json.dumps([{"id": f * 10 + k, "n": k}] * (k + 1)), trace=trace) for k in range(6)]
        files.append(write(tmp_path / f"r{f}.json", otlp(*spans, llm(f * 10 + 3, trace), llm(f * 10 + 9, trace))))
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": [ {"oops" ')
    files.insert(4, str(bad))
    writes: list[int] = []
    real = Pipeline.write

    def counted(self, batch, queued=0):  # type: ignore[no-untyped-def]
        writes.append(len(batch))
        return real(self, batch, queued)

    def stored(db: str) -> dict[str, list[tuple[object, ...]]]:
        with read_connection(db) as con:
            out = {}
            for table, key in (("tool_calls", "span_id"), ("llm_calls", "span_id"), ("ingest_issues", "message")):
                cols = [c[0] for c in con.execute(f"DESCRIBE {table}").fetchall() if c[0] not in SKIP | {"logged_at"}]
                out[table] = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {key}").fetchall()
            return out

    one_by_one = str(tmp_path / "one.duckdb")
    for path in files:
        ingest_files([path], CollectorConfig(db=one_by_one))
    monkeypatch.setattr(Pipeline, "write", counted)
    runs, default = {}, I.GROUP_BYTES
    for group_bytes in (default, 1):  # every file in one group; a group a file, one measured while one is written
        monkeypatch.setattr(I, "GROUP_BYTES", group_bytes)
        db, lines = str(tmp_path / f"g{group_bytes}.duckdb"), []
        writes.clear()
        summary = ingest_files(files, CollectorConfig(db=db), progress=lines.append)
        runs[group_bytes] = len(writes)
        assert summary.tool_calls == 48 and summary.llm_calls == 16 and summary.failed_files == [str(bad)]
        assert lines == [f"{path}: {0 if path == str(bad) else 8} tool/LLM spans" for path in files]
        assert stored(db) == stored(one_by_one)
        assert [row[2] for row in stored(db)["ingest_issues"]] == [str(bad)], "the unreadable file is said"
    # one write for the folder; with a group of one byte, a file is read in parts of one span, each
    # a group written on its own (48 + 16), and each file's last part, holding no span, joins the
    # next group (the last file's is a group of its own)
    assert runs == {default: 1, 1: 48 + 16 + 1}


def test_workers_whose_receiver_dies_while_they_start_end_too(tmp_path: Path) -> None:
    # the receiver is killed while its workers are still starting: a worker that read its
    # parent's pid only then would find init's and never end
    import subprocess
    import sys
    import uuid

    import psutil

    marker = f"toolmeter-test-{uuid.uuid4().hex}"
    code = (
        "import os, time\n"
        "from collector.config import CollectorConfig\n"
        "from collector.measuring import MeasuringPool\n"
        "from collector.pipeline import Pipeline\n"
        "if __name__ == '__main__':\n"
        "    import psutil\n"
        f"    MeasuringPool(Pipeline(CollectorConfig(db={str(tmp_path / 'x.duckdb')!r})), 2).start()\n"
        "    while sum('spawn_main' in ' '.join(c.cmdline()) for c in psutil.Process().children()) < 2:\n"
        "        time.sleep(0.01)\n"
        "    os._exit(0)  # the workers exist, and are still importing\n"
    )
    script = tmp_path / "receiver.py"
    script.write_text(code)
    env = dict(os.environ, TOOLMETER_TEST_MARKER=marker)
    subprocess.run([sys.executable, str(script)], env=env, timeout=60, check=True)

    def marked() -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("TOOLMETER_TEST_MARKER") == marker:
                    found.append(proc)
            except (psutil.Error, OSError):
                continue
        return found

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and marked():
        time.sleep(0.3)
    left = marked()
    for proc in left:
        proc.kill()
    assert left == [], f"{len(left)} process(es) outlived the process that started them"


def test_a_worker_warms_up_without_measuring_or_storing_anything(tmp_path: Path) -> None:
    from collector.pipeline import Pipeline
    from collector.store.payloads import payload_dir

    db = tmp_path / "w.duckdb"
    pipeline = Pipeline(CollectorConfig(db=db), collector_id="warm")
    before = vars(pipeline.counters).copy()
    measuring._warm_up(pipeline)
    assert vars(pipeline.counters) == before
    assert not db.exists()
    folder = Path(payload_dir(str(db)))
    assert not folder.exists() or not any(folder.rglob("*.*"))
