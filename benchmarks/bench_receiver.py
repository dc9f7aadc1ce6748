"""Receiver benchmark: what `toolmeter serve` sustains on loopback, against the tokenizer.

Starts ``toolmeter serve`` in its own process (both cores available to it), sends OTLP/HTTP
protobuf requests of tool spans from this process, and reports:

* accepted: spans/s and MB/s until the last request was acknowledged (spooled, fsync-ed);
* stored: spans/s and MB/s until the last span was queryable in DuckDB;
* baseline: tiktoken ``encode_ordinary`` on the same payload texts, one core, in this process.
* CPU a span of the receiver's process, of its measuring processes, and of this process
  sending (it shares the machine's cores with the receiver).

Two workloads: small results (about 1 KB of JSON rows each) and large ones (the real
payloads in ../shared/realworld).

With ``--views`` each tool span is followed by a model span whose input carries the tool
responses of its run so far, as an instrumented agent's are: the receiver also stores the model
calls and the views and joins them to the calls.

With ``--rounds N`` each workload runs N times (a fresh receiver each time, the counters'
baselines measured again in each), and a summary gives the median and range of each figure and
in how many rounds each target was reached: a 2-core machine's figures vary by 10 % or more
from one run to the next, so one run says little about a target near the figures.

Usage: ``python benchmarks/bench_receiver.py [--small N] [--large-repeat R] [--views] [--rounds N]``
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from collector.measure.tokens import TokenCounter, get_encoding
from collector.store.database import read_connection

ROOT = Path(__file__).resolve().parent.parent
REALWORLD = Path(os.environ.get("TOOLMETER_REALWORLD", ROOT.parent / "shared" / "realworld" / "payloads"))
SPANS_PER_REQUEST = 100
# an hour ago: spans older than the retention window (30 days by default) are pruned on arrival
START_NS = time.time_ns() - 3600 * 10**9
SMALL_TARGET_SPANS_S = 20_000
"""Small tool spans stored a second, end to end (BENCHMARKS.md)."""
LARGE_TARGET_MB_S = 50.0
"""Megabytes of the real payloads stored a second, end to end (BENCHMARKS.md)."""
COUNTER_SHARE_TARGET = 0.5
"""The real payloads stored a second, as a share of the fast counter's own two-thread rate (BENCHMARKS.md)."""


@dataclass(frozen=True)
class Round:
    """One timed run of a workload: its size and the seconds each figure took."""

    spans: int
    mb: float
    tiktoken_s: float
    counter_2_threads_s: float
    stored_s: float

    @property
    def stored_spans_s(self) -> float:
        return self.spans / self.stored_s

    @property
    def stored_mb_s(self) -> float:
        return self.mb / self.stored_s

    @property
    def counter_share(self) -> float:
        """Stored MB/s over the counter's two-thread MB/s, in the same round."""
        return self.counter_2_threads_s / self.stored_s


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def requests_for(texts: list[str], per_request: int, offset: int) -> list[bytes]:
    bodies = []
    for start in range(0, len(texts), per_request):
        spans = []
        for i, text in enumerate(texts[start : start + per_request], start=start + offset):
            spans.append(Span(
                # trace ids spread as OpenTelemetry's random ones are (sequential ones made the store's
                # key work look cheaper than it is), the same for the same i
                trace_id=hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).digest(),
                span_id=(i + 1).to_bytes(8, "big"), name="execute_tool t",
                start_time_unix_nano=START_NS + i, end_time_unix_nano=START_NS + i + 1,
                attributes=[_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "t"),
                            _kv("gen_ai.tool.call.result", text)],
            ))  # fmt: skip
        req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
        bodies.append(req.SerializeToString())
    return bodies


TOOLS_PER_TRACE = 5
"""Tool calls of one agent run in :func:`conversations`."""


def conversations(texts: list[str], per_request: int, offset: int) -> list[bytes]:
    """Requests of agent runs of :data:`TOOLS_PER_TRACE` tool calls (``per_request`` calls a
    request), each call followed by a model call whose input carries every tool response of the
    run so far (a chat's history, as the GenAI conventions' ``gen_ai.input.messages`` holds it):
    each view is repeated by every later model call of its run."""
    spans = []
    for i, text in enumerate(texts, start=offset):
        run, turn = divmod(i, TOOLS_PER_TRACE)
        trace_id = hashlib.blake2b(run.to_bytes(8, "big"), digest_size=16).digest()
        start = START_NS + i * 2_000_000
        tool_attrs = [_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "t"),
                      _kv("gen_ai.tool.call.id", f"call_{turn}"), _kv("gen_ai.tool.call.result", text)]  # fmt: skip
        spans.append(Span(trace_id=trace_id, span_id=(2 * i + 1).to_bytes(8, "big"), name="execute_tool t",
                          start_time_unix_nano=start, end_time_unix_nano=start + 1, attributes=tool_attrs))  # fmt: skip
        history = [{"role": "user", "parts": [{"type": "text", "content": "what was paid?"}]}]
        for k in range(turn + 1):
            earlier = texts[i - offset - turn + k] if i - offset - turn + k >= 0 else text
            history += [
                {"role": "assistant", "parts": [{"type": "tool_call", "id": f"call_{k}", "name": "t", "arguments": {}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{k}", "response": earlier}]},
            ]  # fmt: skip
        llm_attrs = [_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.input.messages", json.dumps(history))]
        spans.append(Span(trace_id=trace_id, span_id=(2 * i + 2).to_bytes(8, "big"), name="chat m",
                          start_time_unix_nano=start + 2, end_time_unix_nano=start + 3, attributes=llm_attrs))  # fmt: skip
    bodies = []
    for at in range(0, len(spans), 2 * per_request):
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans[at : at + 2 * per_request])])]
        )
        bodies.append(request.SerializeToString())
    return bodies


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: bytes) -> None:
    delay = 0.2
    while True:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/x-protobuf"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()
                return
        except urllib.error.HTTPError as e:
            if e.code != 503:
                raise RuntimeError(f"receiver answered {e.code}: {e.read()[:300]!r}") from e
            time.sleep(delay)  # queue full: back off as OTel exporters do
            delay = min(delay * 2, 5)


def _cpu(pid: int) -> tuple[float, float, float, float]:
    """CPU seconds (user + system) of the receiver's own process and of its measuring processes,
    then the system (kernel) part of each."""
    proc = psutil.Process(pid)
    own = proc.cpu_times()
    workers = [0.0, 0.0]
    for child in proc.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = child.cpu_times()
            workers[0] += times.user + times.system
            workers[1] += times.system
    return own.user + own.system, workers[0], own.system, workers[1]


def _wait_stored(db: str, rows: int) -> None:
    while True:
        try:
            with read_connection(db, wait_s=5) as con:
                n = con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]  # type: ignore[index]
        except Exception:
            n = 0
        if n >= rows:
            return
        time.sleep(0.05)


def run(texts: list[str], label: str, views: bool = False) -> Round:
    total_mb = sum(len(t.encode()) for t in texts) / 1e6
    enc = get_encoding()
    t0 = time.perf_counter()
    for t in texts:
        enc.encode_ordinary(t)
    tik_s = time.perf_counter() - t0
    fast = TokenCounter()  # what the receiver counts with (quicktok when installed)
    t0 = time.perf_counter()
    for t in texts:
        fast.count(t)
    fast_s = time.perf_counter() - t0
    half = len(texts) // 2
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:  # the counter's own two-core rate: it releases the GIL
        list(pool.map(lambda part: [fast.count(t) for t in part], (texts[:half], texts[half:])))
    fast2_s = time.perf_counter() - t0

    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-rx-")
    db = os.path.join(tmp, "rx.duckdb")
    port = _free_port()
    log = open(os.path.join(tmp, "serve.log"), "wb")  # noqa: SIM115 (open for the server's life)
    server = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", str(port), "--grpc-port", "0"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        for _ in range(200):
            try:
                _post(url, ExportTraceServiceRequest().SerializeToString())
                break
            except OSError:
                time.sleep(0.1)
        per_request = SPANS_PER_REQUEST if total_mb / len(texts) < 0.01 else 5
        requests = conversations if views else requests_for
        # warm up first, untimed: a receiver runs for days, and its first second (starting its
        # measuring processes, loading the counter) is not its rate
        warm = [t + "\n" for t in texts[: max(len(texts) // 10, per_request * 8)]]  # not the timed ones
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda b: _post(url, b), requests(warm, per_request, offset=10_000_000)))
        _wait_stored(db, len(warm))
        bodies = requests(texts, per_request, offset=1)
        cpu0 = _cpu(server.pid)
        client0 = time.process_time()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda b: _post(url, b), bodies))
        accepted_s = time.perf_counter() - t0
        _wait_stored(db, len(warm) + len(texts))
        stored_s = time.perf_counter() - t0
        cpu1 = _cpu(server.pid)
        client_s = time.process_time() - client0
    finally:
        server.terminate()
        server.wait(timeout=120)
        log.close()
    warnings = [line for line in Path(log.name).read_text().splitlines() if "failed" in line or "Error" in line]
    for line in warnings[:5]:  # a measuring process that broke would make the figures a lie
        print(f"   serve said: {line}")
    n = len(texts)
    runs = (
        f", each followed by a model span carrying its run's tool responses ({TOOLS_PER_TRACE} a run)" if views else ""
    )
    print(f"\n{label}: {n:,} tool spans{runs}, {total_mb:.1f} MB of results")
    print(f"   {'':<44} {'spans/s':>9} {'MB/s':>7} {'vs tiktoken 1 core':>19}")
    tik_mbs = total_mb / tik_s
    for name, sec in (("tiktoken encode_ordinary, 1 core (baseline)", tik_s),
                      (f"{fast.name} count, 1 core", fast_s),
                      (f"{fast.name} count, 2 threads", fast2_s),
                      ("receiver: accepted (spooled, acknowledged)", accepted_s),
                      ("receiver: stored (queryable in DuckDB)", stored_s)):  # fmt: skip
        print(f"   {name:<44} {n / sec:>9,.0f} {total_mb / sec:>7.2f} {total_mb / sec / tik_mbs:>18.2f}x")
    own, workers, own_kernel, workers_kernel = (b - a for a, b in zip(cpu0, cpu1, strict=True))
    print(
        f"   CPU per span: receiver process {own / n * 1e6:,.1f} µs, measuring processes "
        f"{workers / n * 1e6:,.1f} µs, the sending client (this process, on the same cores) "
        f"{client_s / n * 1e6:,.1f} µs (tiktoken's count: {tik_s / n * 1e6:,.1f} µs)\n"
        f"   of which in the kernel (system time): receiver {own_kernel / n * 1e6:,.1f} µs, "
        f"measuring processes {workers_kernel / n * 1e6:,.1f} µs"
    )
    return Round(n, total_mb, tik_s, fast2_s, stored_s)


def _spread(values: list[float], spec: str) -> str:
    return f"{format(statistics.median(values), spec)} median ({format(min(values), spec)}-{format(max(values), spec)})"


def summary(label: str, rounds: list[Round], large: bool) -> str:
    """Median and range of each round's figures, and in how many rounds each target was reached."""
    n = len(rounds)
    lines = [f"\n{label}, {n} rounds (each against its own baselines):"]
    lines.append(f"   tiktoken 1 core: {_spread([r.mb / r.tiktoken_s for r in rounds], '.2f')} MB/s")
    lines.append(f"   counter, 2 threads: {_spread([r.mb / r.counter_2_threads_s for r in rounds], '.2f')} MB/s")
    spans = [r.stored_spans_s for r in rounds]
    lines.append(f"   stored: {_spread(spans, ',.0f')} spans/s, {_spread([r.stored_mb_s for r in rounds], '.2f')} MB/s")
    if large:
        reached = sum(r.stored_mb_s >= LARGE_TARGET_MB_S for r in rounds)
        lines.append(f"   target >= {LARGE_TARGET_MB_S:.0f} MB/s stored: reached in {reached} of {n} rounds")
        shares = [r.counter_share for r in rounds]
        reached = sum(share >= COUNTER_SHARE_TARGET for share in shares)
        lines.append(f"   stored / counter's 2-thread rate: {_spread(shares, '.2f')}; target >= "
                     f"{COUNTER_SHARE_TARGET:.2f}: reached in {reached} of {n} rounds")  # fmt: skip
    else:
        reached = sum(rate >= SMALL_TARGET_SPANS_S for rate in spans)
        lines.append(f"   target >= {SMALL_TARGET_SPANS_S:,} spans/s stored: reached in {reached} of {n} rounds")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=20_000, help="small tool spans to send")
    parser.add_argument("--large-repeat", type=int, default=4, help="passes over the real payloads")
    parser.add_argument("--views", action="store_true",
                        help="agent runs: each tool span followed by a model span whose input carries the run's "
                             "tool responses so far (views stored and joined too; rates count the tool spans)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1,
                        help="timed runs of each workload, each on a fresh receiver; with more than one, a summary "
                             "of their median and range and of the rounds that reached each target")  # fmt: skip
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    small = [json.dumps([{"id": i * 10 + k, "status": "paid", "amount": round(k * 3.7, 2), "region": "north"}
                         for k in range(14)]) for i in range(args.small)]  # fmt: skip
    summaries = []
    if small:
        label = "small results (~1 KB)"
        rounds = [run(small, label, args.views) for _ in range(args.rounds)]
        summaries.append(summary(label, rounds, large=False))
    large = []
    for path in sorted(REALWORLD.glob("*")):
        data = path.read_bytes()
        if path.name.startswith("holmesgpt__"):
            data = data.split(b"\n", 2)[2]
        large.append(data.decode())
    if large and args.large_repeat:
        # each pass's copies differ by trailing spaces: a receiver sees new results, and the
        # payload store keeps one file per distinct payload (repeats would cost it nothing)
        texts = [text + " " * r for r in range(args.large_repeat) for text in large]
        label = "large results (real payloads)"
        rounds = [run(texts, label, args.views) for _ in range(args.rounds)]
        summaries.append(summary(label, rounds, large=True))
    if args.rounds > 1:
        print("\n".join(summaries))


if __name__ == "__main__":
    main()
