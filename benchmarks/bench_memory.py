"""Memory benchmark: peak RSS while a 100 MB result and a stream of 1 MB results go through.

The collector must stay bounded by its configuration (``max_queued_bytes``, the payload
cap, the receiver's ``--max-body-bytes``), not by how much an agent sends. Two modes:

A. In-process. One child process per scenario (a clean RSS): an OpenTelemetry
   ``TracerProvider`` with ``ToolResultProcessor`` on a temporary DuckDB store records one
   tool span with a 100 MB result (``record_tool_result(raw=..., view=<its head>)``), then
   ``S`` spans with 1 MB results each, one every 25 ms (several times faster than results
   are measured, so the queue fills), then ``force_flush``. The agent keeps the 100 MB
   result alive throughout (an agent that produced it holds it). RSS is sampled every 20 ms
   by a thread, and ``ru_maxrss`` is read at the end. Runs with the default
   ``max_queued_bytes`` (256 MiB) and a small one (32 MiB).
   Baseline: the same child and the same spans, with ``BatchSpanProcessor`` and a no-op
   exporter instead (exporting promptly, so the baseline is the agent's own memory); the
   result goes on the span as ``gen_ai.tool.call.result``, as without toolmeter, so that
   nothing of toolmeter's (``record_tool_result`` included) is in the baseline.

B. Receiver. ``toolmeter serve`` in its own process receives one OTLP/HTTP protobuf request
   with a 100 MB result, then ``S`` requests of one 1 MB result each (retrying on 503, as
   OTLP exporters do); this process samples the server's RSS until every span is stored.
   Runs with ``TOOLMETER_MAX_QUEUED_BYTES`` at its default and at the small value.
   Baseline: the server's RSS when idle (after a warm-up, four 1 MiB results and a 4 MiB
   one, was stored). In-process, idle is read after the same warm-up.

For each scenario the bound the configuration implies is printed beside the measurement.
Every figure is also given as a ratio against the baseline of the same run.

Usage: ``python benchmarks/bench_memory.py [--streams 100,400] [--big-mb 100] [--small-queue-mb 32]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

MiB = 1024 * 1024
SAMPLE_S = 0.02
VIEW_CHARS = 16 * 1024
DEFAULT_QUEUED_BYTES = 256 * MiB
PAYLOAD_CAP = 1 * MiB
WARM_UP_MB = 4
"""Before the idle RSS is read, one result of this many MiB and as many 1 MiB ones go through."""
ALLOWANCE = 40 * MiB
"""Added to every bound: allocator retention and native buffers (glibc's per-thread arenas,
tiktoken, zlib, DuckDB), 15-35 MiB above the model in runs with an 8 MiB result."""
# an hour ago: spans older than the retention window (30 days by default) are pruned on arrival
START_NS = time.time_ns() - 3600 * 10**9


# --- payloads ---------------------------------------------------------------------------------


def _log_block(size: int) -> str:
    """About ``size`` characters of log lines (ASCII, one char = one byte)."""
    lines = []
    n = 0
    i = 0
    while n < size:
        line = (
            f"2026-03-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}Z "
            f"{('INFO', 'WARN', 'DEBUG', 'ERROR')[i % 4]} api request_id={i:08x} path=/v1/orders/{i * 31 % 99991} "
            f"status={(200, 200, 404, 500)[i % 4]} latency_ms={i * 13 % 977}\n"
        )
        lines.append(line)
        n += len(line)
        i += 1
    return "".join(lines)[:size]


def big_result(mb: int) -> str:
    """A ``mb`` MiB log, built without a transient copy larger than the result itself."""
    return _log_block(MiB) * mb


_ROWS: list[str] = []


def stream_result(i: int) -> str:
    """A distinct 1 MiB JSON result (a list of rows), the kind of result an API tool returns."""
    if not _ROWS:
        rows = []
        n = 0
        k = 0
        while n < MiB:
            row = json.dumps({"id": k, "status": ("paid", "open", "void")[k % 3], "amount": round(k * 3.7, 2),
                              "region": ("north", "south", "east", "west")[k % 4], "note": "ok " * (k % 7)})  # fmt: skip
            rows.append(row)
            n += len(row) + 1
            k += 1
        _ROWS.append(",".join(rows))
    head = f'{{"request": {i}, "rows": ['
    body = _ROWS[0][: MiB - len(head) - 2]
    body = body[: body.rfind("},") + 1]
    return head + body + "]}"


def _view(raw: str) -> str:
    return raw[:VIEW_CHARS] + f"\n[truncated: {VIEW_CHARS:,} of {len(raw):,} characters shown]"


# --- RSS sampling -------------------------------------------------------------------------------


class Sampler:
    """Samples a process's RSS every ``SAMPLE_S`` seconds in a daemon thread."""

    def __init__(self, pid: int) -> None:
        self._proc = psutil.Process(pid)
        self._stop = threading.Event()
        self.peak = 0
        self.peak_at = 0.0
        self.samples: list[tuple[float, int]] = []
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.take()
            self._stop.wait(SAMPLE_S)

    def take(self) -> int:
        try:
            rss = int(self._proc.memory_info().rss)
        except psutil.Error:
            return 0
        now = time.monotonic() - self._t0
        self.samples.append((now, rss))
        if rss > self.peak:
            self.peak, self.peak_at = rss, now
        return rss

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.take()

    def peak_between(self, t0: float, t1: float) -> int:
        return max((rss for t, rss in self.samples if t0 <= t <= t1), default=0)


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _peak(run: dict[str, Any]) -> int:
    return max(int(run["peak"]), int(run["ru_maxrss"]))


# --- mode A: the child ----------------------------------------------------------------------------


def child(mode: str, stream: int, big_mb: int, queued_bytes: int, interval: float) -> dict[str, Any]:
    """One in-process scenario in this (fresh) process; returns its figures."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from collector import ToolResultProcessor, record_tool_result

    class NoOpExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-mem-")
    provider = TracerProvider(shutdown_on_exit=False)
    processor: Any
    if mode == "baseline":
        processor = BatchSpanProcessor(
            NoOpExporter(), max_queue_size=64, max_export_batch_size=4, schedule_delay_millis=10
        )
    else:
        processor = ToolResultProcessor(db=os.path.join(tmp, "m.duckdb"), max_queued_bytes=queued_bytes)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench-memory")
    attrs = {"gen_ai.operation.name": "execute_tool"}

    def tool(name: str, raw: str) -> None:
        with tracer.start_as_current_span(
            f"execute_tool {name}", attributes={**attrs, "gen_ai.tool.name": name}
        ) as span:
            if mode == "baseline":  # the same span as an agent without toolmeter makes it
                span.set_attribute("gen_ai.tool.call.result", raw)
            else:
                record_tool_result(span, raw=raw, view=_view(raw))

    # warm up on the workload's shapes: encoding, schema, DuckDB buffers, allocator arenas
    tool("warm_up", big_result(WARM_UP_MB))
    for i in range(WARM_UP_MB):
        tool("warm_up", stream_result(-1 - i))
    processor.force_flush(600_000)
    before = dict(processor.counters) if mode != "baseline" else {}
    gc.collect()
    time.sleep(0.5)
    idle = _rss()

    sampler = Sampler(os.getpid()).start()
    t0 = time.monotonic()
    big = big_result(big_mb)  # the agent keeps it: an agent that produced it holds it
    tool("fetch_logs", big)
    for i in range(stream):
        tool("search_orders", stream_result(i))
        time.sleep(interval)
    sent_s = time.monotonic() - t0
    flushed = processor.force_flush(3_600_000)
    total_s = time.monotonic() - t0
    sampler.stop()
    counters = {k: v - before[k] for k, v in processor.counters.items()} if mode != "baseline" else {}
    del big
    provider.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    return {
        "idle": idle,
        "peak": sampler.peak,
        "peak_at": sampler.peak_at,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "sent_s": sent_s,
        "total_s": total_s,
        "flushed": flushed,
        "seen": counters.get("spans_seen"),
        "dropped": counters.get("dropped"),
        "written": counters.get("tool_calls_written"),
    }


@dataclass
class Result:
    stream: int
    idle: int
    peak: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


def run_child(mode: str, stream: int, big_mb: int, queued_bytes: int, interval: float) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", mode, "--stream", str(stream),
           "--big-mb", str(big_mb), "--queued-bytes", str(queued_bytes), "--interval-ms", str(interval * 1000)]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


# --- mode B: the receiver ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(i: int, raw: str, view: str | None) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    attributes = [kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "t"),
                  kv("gen_ai.tool.call.result", raw)]  # fmt: skip
    if view is not None:
        attributes.append(kv("toolmeter.view", view))
    span = Span(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name="execute_tool t",
                start_time_unix_nano=START_NS + i, end_time_unix_nano=START_NS + i + 1,
                attributes=attributes)  # fmt: skip
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    return bytes(req.SerializeToString())


def _post(url: str, body: bytes) -> int:
    """POST until accepted; returns how many 503s it took."""
    refused = 0
    delay = 0.2
    while True:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                resp.read()
                return refused
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise RuntimeError(f"receiver answered {e.code}: {e.read()[:300]!r}") from e
            refused += 1
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _stored(db: str) -> int:
    from collector.store.database import read_connection

    try:
        with read_connection(db, wait_s=5) as con:
            return int(con.execute("SELECT count(*) FROM tool_calls").fetchone()[0])  # type: ignore[index]
    except Exception:
        return 0


def receiver_run(stream: int, big_mb: int, max_body: int, queued_bytes: int) -> Result:
    """Serve, send the large request then ``stream`` small ones, and sample the server's RSS."""
    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-mem-rx-")
    db = os.path.join(tmp, "rx.duckdb")
    port = _free_port()
    env = {**os.environ, "TOOLMETER_MAX_QUEUED_BYTES": str(queued_bytes)}
    server = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", str(port), "--grpc-port", "0",
         "--max-body-bytes", str(max_body)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp,  # the collector this imports
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        warm = [_request(1_000_000 + i, stream_result(-1 - i), None) for i in range(WARM_UP_MB)]
        warm.append(_request(1_000_000 + WARM_UP_MB, big_result(WARM_UP_MB), None))
        for _ in range(300):
            try:
                _post(url, warm[0])
                break
            except OSError:
                time.sleep(0.1)
        for body in warm[1:]:
            _post(url, body)
        while _stored(db) < len(warm):
            time.sleep(0.1)
        time.sleep(1.0)
        idle = int(psutil.Process(server.pid).memory_info().rss)
        big = _request(1, big_result(big_mb), None)
        body_bytes = len(big)
        sampler = Sampler(server.pid).start()
        t0 = time.monotonic()
        refused = _post(url, big)
        del big
        half = time.monotonic() - t0
        for i in range(stream):
            if i == stream // 2:
                half = time.monotonic() - t0
            result = stream_result(i)
            refused += _post(url, _request(i + 2, result, _view(result)))
        sent = time.monotonic() - t0
        while _stored(db) < len(warm) + 1 + stream:
            time.sleep(0.2)
        seconds = time.monotonic() - t0
        sampler.stop()
    finally:
        server.terminate()
        server.wait(timeout=300)
        shutil.rmtree(tmp, ignore_errors=True)
    return Result(
        stream, idle, sampler.peak, seconds,
        extra={"refused": refused, "body_bytes": body_bytes, "first_half": sampler.peak_between(0, half),
               "second_half": sampler.peak_between(half, sent)},
    )  # fmt: skip


# --- the report ---------------------------------------------------------------------------------------


def _mb(n: float) -> str:
    return f"{n / MiB:,.0f}"


def json_working_set() -> int:
    """Python memory that parsing and fingerprinting one 1 MiB JSON result takes (tracemalloc peak)."""
    from collector.measure.measurement import schema_of

    text = stream_result(0)
    tracemalloc.start()
    schema_of(json.loads(text))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return int(peak)


def in_process(streams: list[int], big_mb: int, queues: list[int], interval: float, json_ws: int) -> bool:
    big = big_mb * MiB
    print(
        f"\n## A. In-process: ToolResultProcessor in the agent's process (one 1 MiB result every {interval * 1000:.0f} ms)\n"
    )
    baselines = {s: run_child("baseline", s, big_mb, DEFAULT_QUEUED_BYTES, interval) for s in streams}
    runs = [(q, s, run_child("toolmeter", s, big_mb, q, interval)) for q in queues for s in streams]
    print("| scenario | S | idle MiB | peak MiB | peak − idle MiB | collector's own MiB | peak vs baseline | "
          "bound MiB | within bound | accepted / dropped | s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for s, b in baselines.items():
        print(f"| BatchSpanProcessor + no-op exporter (baseline) | {s} | {_mb(b['idle'])} | {_mb(_peak(b))} | "
              f"{_mb(_peak(b) - b['idle'])} | | 1.00x | | | | {b['total_s']:.1f} |")  # fmt: skip
    verdicts = []
    for q, s, r in runs:
        b = baselines[s]
        agent = _peak(b) - b["idle"]  # what the agent itself holds at its peak
        bound = r["idle"] + agent + max(q, big) + MiB + json_ws + PAYLOAD_CAP + ALLOWANCE
        peak = _peak(r)
        verdicts.append(peak <= bound and r["flushed"])
        accepted = (r["seen"] or 0) - (r["dropped"] or 0)
        print(f"| ToolResultProcessor, max_queued_bytes {_mb(q)} MiB | {s} | {_mb(r['idle'])} | {_mb(peak)} | "
              f"{_mb(peak - r['idle'])} | {_mb(peak - r['idle'] - agent)} | {peak / _peak(b):.2f}x | {_mb(bound)} | "
              f"{'yes' if verdicts[-1] else '**no**'} | {accepted} / {r['dropped']} | {r['total_s']:.1f} |")  # fmt: skip
    print(
        f"\nPeak: the larger of the sampled RSS and ru_maxrss. Idle: RSS after set-up and a warm-up (a {WARM_UP_MB} "
        f"MiB result and {WARM_UP_MB} of 1 MiB). Collector's own = peak − idle − the agent's own growth "
        "(baseline peak − baseline idle). Bound implied by the configuration = idle + the agent's own growth "
        "+ max(max_queued_bytes, B) (payload text held until written, B the largest payload, which goes through "
        f"alone when larger; the {big_mb} MiB result is the agent's, so its UTF-8 copy made while it is measured "
        "fits in the room it takes) + the UTF-8 copy of a 1 MiB result + parsing it as JSON "
        f"({_mb(json_ws)} MiB, tracemalloc) + the payload cap ({_mb(PAYLOAD_CAP)} MiB) + {_mb(ALLOWANCE)} MiB "
        "for allocator retention and native buffers."
    )
    for q in queues:
        growth = [_peak(r) - r["idle"] for rq, _s, r in runs if rq == q]
        print(f"\n- max_queued_bytes {_mb(q)} MiB: peak − idle for S = {', '.join(map(str, streams))}: "
              f"{', '.join(_mb(g) for g in growth)} MiB")  # fmt: skip
    return all(verdicts)


def receiver(streams: list[int], big_mb: int, queues: list[int], json_ws: int) -> bool:
    max_body = (big_mb + 64) * MiB
    print(f"\n## B. Receiver: `toolmeter serve --max-body-bytes {max_body}` in its own process\n")
    runs = [(q, receiver_run(s, big_mb, max_body, q)) for q in queues for s in streams]
    print("| scenario | S | idle MiB (baseline) | peak MiB | peak − idle MiB | peak vs idle | "
          "peak MiB, 1st / 2nd half of stream | bound MiB | within bound | 503 answers | s |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    verdicts = []
    for q, r in runs:
        body = r.extra["body_bytes"]
        bound = r.idle + max(3 * body, max(q, body) + 2 * body + 3 * MiB) + json_ws + PAYLOAD_CAP + ALLOWANCE
        verdicts.append(r.peak <= bound)
        print(f"| TOOLMETER_MAX_QUEUED_BYTES={_mb(q)} MiB | {r.stream} | {_mb(r.idle)} | {_mb(r.peak)} | "
              f"{_mb(r.peak - r.idle)} | {r.peak / r.idle:.2f}x | "
              f"{_mb(r.extra['first_half'])} / {_mb(r.extra['second_half'])} | {_mb(bound)} | "
              f"{'yes' if verdicts[-1] else '**no**'} | {r.extra['refused']} | {r.seconds:.1f} |")  # fmt: skip
    print(
        "\nBound implied by the configuration for a client sending one request at a time, with B the largest "
        f"request body (here {_mb(runs[0][1].extra['body_bytes'])} MiB, at most --max-body-bytes) = idle + the "
        "larger of 3B (the large request being read and decoded: body, then read buffer or protobuf and text) "
        "and max(max_queued_bytes, B) + 2B + 3 MiB (request bodies spooled and not yet written, one larger "
        "request accepted alone; the writer's decoded text and UTF-8 copy of the large one; a 1 MiB request "
        f"being read meanwhile) + parsing one JSON result ({_mb(json_ws)} MiB) + the payload cap "
        f"({_mb(PAYLOAD_CAP)} MiB) + {_mb(ALLOWANCE)} MiB for allocator retention and native buffers."
    )
    for q in queues:
        growth = [r.peak - r.idle for rq, r in runs if rq == q]
        print(f"\n- max_queued_bytes {_mb(q)} MiB: peak − idle for S = {', '.join(map(str, streams))}: "
              f"{', '.join(_mb(g) for g in growth)} MiB")  # fmt: skip
    return all(verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--streams", default="100,400", help="numbers of 1 MiB results, comma-separated")
    parser.add_argument("--big-mb", type=int, default=100, help="size of the large result, MiB")
    parser.add_argument("--small-queue-mb", type=int, default=32, help="max_queued_bytes of the small-queue runs")
    parser.add_argument("--interval-ms", type=float, default=25.0, help="in-process: pause between 1 MiB results")
    parser.add_argument("--skip-receiver", action="store_true")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--child", choices=("baseline", "toolmeter"), help=argparse.SUPPRESS)
    parser.add_argument("--stream", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--queued-bytes", type=int, default=DEFAULT_QUEUED_BYTES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    interval = args.interval_ms / 1000
    if args.child:
        print(json.dumps(child(args.child, args.stream, args.big_mb, args.queued_bytes, interval)))
        return
    streams = [int(s) for s in args.streams.split(",")]
    queues = [DEFAULT_QUEUED_BYTES, args.small_queue_mb * MiB]
    json_ws = json_working_set()
    print(f"# Peak memory: one {args.big_mb} MiB result, then S results of 1 MiB\n")
    print(f"Python {sys.version.split()[0]}, {psutil.cpu_count()} cores, RSS sampled every {SAMPLE_S * 1000:.0f} ms; "
          f"payload cap {_mb(PAYLOAD_CAP)} MiB (default).")  # fmt: skip
    ok = True
    if not args.skip_in_process:
        ok &= in_process(streams, args.big_mb, queues, interval, json_ws)
    if not args.skip_receiver:
        ok &= receiver(streams, args.big_mb, queues, json_ws)
    print(f"\nEvery scenario within the bound its configuration implies: {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
