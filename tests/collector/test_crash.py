"""Faults: kill -9 of the receiver mid-stream, and a producer faster than ingest."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from collector.store.database import read_connection
from tests.collector.test_ingest_cli import otlp, tool


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(db: str, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", str(port), "--grpc-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("receiver did not start")


def _count(db: str) -> int:
    try:
        with read_connection(db, wait_s=10) as con:
            return int(con.execute("SELECT count(*) FROM tool_calls").fetchone()[0])  # type: ignore[index]
    except Exception:
        return -1


def _replayed(db: str, port: int, acked: int) -> set[str]:
    """Start the receiver again (it replays its spool from the position the store holds), wait
    until ``acked`` calls are stored, stop it; the (trace id + span id) of every stored call."""
    proc = _start(db, port)
    try:
        deadline = time.monotonic() + 180
        while _count(db) < acked and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    with read_connection(db) as con:
        return {r[0] + r[1] for r in con.execute("SELECT trace_id, span_id FROM tool_calls").fetchall()}


def test_kill_9_mid_stream_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = str(tmp_path / "crash.duckdb")
    port = _free_port()
    proc = _start(db, port)
    acked: list[str] = []
    # a stream of batches with results large enough that measuring lags behind accepting
    for n in range(60):
        spans = [tool(k, "word " * 4000 + f"batch {n} span {k}", trace=f"{n:016x}{k:016x}") for k in range(1, 11)]
        body = json.dumps(otlp(*spans)).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                if resp.status == 200:
                    acked += [s["traceId"] + s["spanId"] for s in spans]
        except (urllib.error.URLError, ConnectionError):
            break
        if n == 40:
            os.kill(proc.pid, signal.SIGKILL)  # mid-stream, with acknowledged work still queued
    proc.wait()
    assert len(acked) >= 400
    before_restart = _count(db)
    stored = _replayed(db, port, len(acked))
    with read_connection(db) as con:
        # nothing half-written: every stored call has its figures
        assert con.execute("SELECT count(*) FROM tool_calls WHERE raw_tokens IS NULL").fetchone() == (0,)
    assert set(acked) <= stored, (
        f"{len(set(acked) - stored)} acknowledged spans lost ({before_restart} stored before restart)"
    )
    assert len(stored) == len(set(stored))


def test_a_faster_producer_gets_503_and_the_real_exporter_retries_until_stored(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    r = serve(max_queued_bytes=200_000)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{r.url}/v1/traces", timeout=60),
            max_export_batch_size=20,
            schedule_delay_millis=50,
            max_queue_size=10_000,
        )
    )
    tracer = provider.get_tracer("burst")
    for i in range(300):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "burst",
                 "gen_ai.tool.call.result": "token " * 3000 + str(i)}  # fmt: skip
        with tracer.start_as_current_span("execute_tool burst", attributes=attrs):
            pass
    assert provider.force_flush(timeout_millis=180_000)
    provider.shutdown()
    assert r.receiver.refused > 0, "the burst was meant to fill the queue"
    assert r.receiver.flush(timeout_s=180)
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (300,)


def test_kill_9_while_concurrent_senders_share_spool_syncs_loses_nothing_acknowledged(tmp_path: Path) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    db = str(tmp_path / "crash.duckdb")
    port = _free_port()
    proc = _start(db, port)
    acked: list[str] = []
    lock = threading.Lock()
    enough = threading.Event()

    def sender(t: int) -> None:
        for n in range(40):
            spans = [tool(k, "word " * 2000 + f"sender {t} batch {n} span {k}", trace=f"{t:08x}{n:08x}{k:016x}")
                     for k in range(1, 6)]  # fmt: skip
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/traces", data=json.dumps(otlp(*spans)).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    if resp.status == 200:
                        with lock:
                            acked.extend(s["traceId"] + s["spanId"] for s in spans)
                            if len(acked) >= 300:
                                enough.set()
            except (urllib.error.URLError, ConnectionError):
                return

    with ThreadPoolExecutor(6) as pool:
        running = [pool.submit(sender, t) for t in range(6)]
        enough.wait(120)
        os.kill(proc.pid, signal.SIGKILL)  # requests in flight, sharing syncs, acknowledged work still queued
        for f in running:
            f.result()
    proc.wait()
    assert len(acked) >= 300
    stored = _replayed(db, port, len(acked))
    assert set(acked) <= stored, f"{len(set(acked) - stored)} acknowledged spans lost"
