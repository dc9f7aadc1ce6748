"""Collector benchmark: agent-side cost per tool span, and worker throughput.

Prints two tables, each figure next to a baseline measured in the same run:

1. Agent-side time per tool span (what the agent's thread pays in ``span.end()``):
   no processor, ``BatchSpanProcessor`` with a no-op exporter, and ToolResultProcessor.
2. The agent's own Python work while toolmeter takes in every span it makes at full rate:
   in-process mode (measuring on the agent's interpreter) and forwarding mode (a helper
   process encodes and sends to a ``toolmeter serve`` on loopback, which measures in its own
   process), against the same work with ``BatchSpanProcessor`` and with no processor; wall
   time and the agent thread's own CPU time.
3. Measurement throughput (MB/s and spans/s) of the pipeline on real payloads from
   ``../shared/realworld`` against tiktoken's own ``encode_ordinary`` on the same text,
   one core.

Usage: ``python benchmarks/bench_collector.py [--spans N] [--rounds R] [--work-units N] [--work-rounds R]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from collector import ToolResultProcessor
from collector.config import CollectorConfig
from collector.measure.tokens import TokenCounter, get_encoding
from collector.model import Item, SpanData
from collector.pipeline import Pipeline

ROOT = Path(__file__).resolve().parent.parent
REALWORLD = Path(os.environ.get("TOOLMETER_REALWORLD", ROOT.parent / "shared" / "realworld" / "payloads"))


class NoOpExporter(SpanExporter):
    def export(self, spans: Sequence[object]) -> SpanExportResult:  # type: ignore[override]
        return SpanExportResult.SUCCESS


def _payloads() -> list[str]:
    out = []
    for path in sorted(REALWORLD.glob("*")):
        data = path.read_bytes()
        if path.name.startswith("holmesgpt__"):
            data = data.split(b"\n", 2)[2]
        out.append(data.decode("utf-8"))
    if not out:
        sys.exit(f"no payloads in {REALWORLD}; set TOOLMETER_REALWORLD")
    return out


IDLE_BASELINE = "BatchSpanProcessor, worker idle (baseline below)"
IDLE_VARIANT = "ToolResultProcessor, on_end only (worker idle)"
BATCH = "BatchSpanProcessor + no-op exporter"
FORWARDING = "ToolResultProcessor, forwarding mode"
WARM_UNITS = 200
"""Spans each variant of the agent-work table makes before it is timed."""


def _other_threads_cpu() -> dict[int, float]:
    """CPU seconds of each thread of this process but the calling one, by thread id."""
    me = threading.get_ident()
    out = {}
    for t in threading.enumerate():
        if t.ident is not None and t.ident != me:
            with contextlib.suppress(OSError):  # ended meanwhile
                out[t.ident] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return out


def agent_side(
    spans: int, rounds: int, results_of: list[str], port: int, receiver_pid: int
) -> tuple[list[tuple[str, float, float, float, float, float]], float]:
    """Medians over rounds, per tool span: wall time on the agent's thread, that thread's own
    CPU, the CPU of the processor's threads (its worker; the relay's threads) while the agent
    ran and until the processor had handed on every span; then the first two as ratios to
    the baseline's run in the same round. The processor's threads take the GIL from the
    agent, so their CPU is what the agent waits for. Also the median wall time of forwarding
    mode's first span and flush, which starts its helper process.

    Every variant is warmed with one span and a flush before its timed run, as in
    :func:`agent_work_slowdown`: the forwarding helper's start is paid once in an agent's life,
    not by each of the spans of a short run (it is reported on its own line)."""
    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-")

    def no_processor() -> tuple[TracerProvider, object]:
        return TracerProvider(shutdown_on_exit=False), None

    def batch_noop() -> tuple[TracerProvider, object]:
        tp = TracerProvider(shutdown_on_exit=False)
        p = BatchSpanProcessor(NoOpExporter(), max_queue_size=spans * 2)
        tp.add_span_processor(p)
        return tp, p

    def toolmeter() -> tuple[TracerProvider, object]:
        tp = TracerProvider(shutdown_on_exit=False)
        p = ToolResultProcessor(db=os.path.join(tmp, f"b{time.monotonic_ns()}.duckdb"), max_queue_size=spans * 2)
        tp.add_span_processor(p)
        return tp, p

    def toolmeter_idle() -> tuple[TracerProvider, object]:
        # the worker sleeps through the loop: isolates on_end from the worker's GIL use
        tp = TracerProvider(shutdown_on_exit=False)
        p = ToolResultProcessor(db=os.path.join(tmp, f"i{time.monotonic_ns()}.duckdb"), max_queue_size=spans * 2,
                                max_batch_size=spans * 2, flush_interval=3600)  # fmt: skip
        tp.add_span_processor(p)
        return tp, p

    def forwarding() -> tuple[TracerProvider, object]:
        # forwarding mode as shipped: the worker flattens batches for the helper meanwhile
        tp = TracerProvider(shutdown_on_exit=False)
        p = ToolResultProcessor(forward_to=f"http://127.0.0.1:{port}", max_queue_size=spans * 2)
        tp.add_span_processor(p)
        return tp, p

    def batch_idle() -> tuple[TracerProvider, object]:
        # holds every span through the loop, as the idle variant below does: a heap that grows
        # costs the agent (allocation, garbage collection) whoever holds it
        tp = TracerProvider(shutdown_on_exit=False)
        p = BatchSpanProcessor(NoOpExporter(), max_queue_size=spans * 2, schedule_delay_millis=3_600_000,
                               max_export_batch_size=spans * 2)  # fmt: skip
        tp.add_span_processor(p)
        return tp, p

    variants = [("no processor", no_processor), (BATCH, batch_noop),
                (FORWARDING, forwarding),
                ("ToolResultProcessor, in-process (worker measuring)", toolmeter),
                (IDLE_BASELINE, batch_idle),
                (IDLE_VARIANT, toolmeter_idle)]  # fmt: skip
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in variants}
    starts: list[float] = []
    calls = _tool_attributes(results_of, spans)
    for r in range(rounds):
        for name, make in variants[r % len(variants) :] + variants[: r % len(variants)]:  # each in every place
            tp, _p = make()
            tracer = tp.get_tracer("bench")
            w0 = time.perf_counter()
            with tracer.start_as_current_span("execute_tool search_orders", attributes=calls[0]):
                pass
            tp.force_flush()
            if name == FORWARDING:
                starts.append(time.perf_counter() - w0)
            _wait_idle(receiver_pid)
            before = _other_threads_cpu()
            t0, c0 = time.perf_counter(), time.thread_time()
            for attrs in calls:
                with tracer.start_as_current_span("execute_tool search_orders", attributes=attrs):
                    pass
            wall, own = time.perf_counter() - t0, time.thread_time() - c0
            if name not in (IDLE_BASELINE, IDLE_VARIANT):  # the idle ones hold their spans until shutdown
                tp.force_flush()
            after = _other_threads_cpu()
            others = sum(cpu - before.get(ident, 0.0) for ident, cpu in after.items())
            results[name].append((wall / spans, own / spans, others / spans))
            tp.shutdown()
            _wait_idle(receiver_pid)
    # this machine's speed drifts by a fifth over seconds: each run is compared with its
    # baseline's run of the same round, and the ratios' median is the figure
    out = []
    for name, v in results.items():
        base = results[IDLE_BASELINE if name in (IDLE_BASELINE, IDLE_VARIANT) else BATCH]
        wall, own, others = (statistics.median(r[i] for r in v) for i in range(3))
        wall_ratio = statistics.median(r[0] / b[0] for r, b in zip(v, base, strict=True))
        own_ratio = statistics.median(r[1] / b[1] for r, b in zip(v, base, strict=True))
        out.append((name, wall, own, others, wall_ratio, own_ratio))
    return out, statistics.median(starts)


def _tool_attributes(results_of: list[str], calls: int) -> list[dict[str, str]]:
    """The attributes of ``calls`` tool spans, each call with a result of its own (the results
    cycle through ``results_of``): a real tool returns new text every call, and a serialiser
    that finds one string object repeated writes it once."""
    base = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders"}
    return [{**base, "gen_ai.tool.call.result": results_of[i % len(results_of)]} for i in range(calls)]


def on_end_alone(port: int, calls: int = 100_000, forwarded_calls: int = 20_000) -> list[tuple[str, float]]:
    """Time of on_end itself (timeit, one finished span offered again and again). Forwarding
    mode's spans go to the receiver on ``port`` when it shuts down (``forwarded_calls`` of them)."""
    import timeit

    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-")
    tp = TracerProvider(shutdown_on_exit=False)
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "s", "gen_ai.tool.call.result": "x" * 1000}
    with tp.get_tracer("b").start_as_current_span("execute_tool s", attributes=attrs) as span:
        pass
    readable = span._readable_span()  # type: ignore[attr-defined]
    ours = ToolResultProcessor(db=os.path.join(tmp, "o.duckdb"), max_queue_size=calls * 2,
                               max_batch_size=calls * 2, flush_interval=3600)  # fmt: skip
    batch = BatchSpanProcessor(NoOpExporter(), max_queue_size=calls * 2, schedule_delay_millis=3_600_000,
                               max_export_batch_size=calls * 2)  # fmt: skip
    forwarding = ToolResultProcessor(forward_to=f"http://127.0.0.1:{port}", max_queue_size=forwarded_calls * 2,
                                     max_batch_size=forwarded_calls * 2, flush_interval=3600)  # fmt: skip
    rows = []
    for name, proc, n in (("BatchSpanProcessor.on_end", batch, calls), ("ToolResultProcessor.on_end", ours, calls),
                          ("ToolResultProcessor.on_end, forwarding mode", forwarding, forwarded_calls)):  # fmt: skip
        rows.append((name, timeit.timeit(lambda p=proc: p.on_end(readable), number=n) / n))  # type: ignore[misc]
    forwarding.shutdown()
    return rows


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent_work() -> int:
    """One unit of the agent's own pure-Python work (parsing, bookkeeping): about 0.3 ms."""
    total = 0
    for i in range(1500):
        total += len(str(i * i))
    return total


def start_receiver() -> tuple[subprocess.Popen[bytes], int]:
    """A real ``toolmeter serve`` on loopback, kept to the last CPU.

    It stands for a collector host: on a two-core machine it would otherwise take the agent's
    core, and the figures would measure two cores shared three ways, not the agent's cost."""
    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-rx-")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", os.path.join(tmp, "rx.duckdb"), "--port", str(port),
         "--grpc-port", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        os.sched_setaffinity(server.pid, {cpus[-1]})
    _wait_for_port(port)
    return server, port


def _wait_idle(pid: int, quiet_s: float = 0.3, timeout_s: float = 120) -> None:
    """Wait until process ``pid`` has used no CPU for ``quiet_s`` (Linux /proc)."""

    def cpu() -> int:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks

    deadline = time.monotonic() + timeout_s
    last = cpu()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = cpu()
        if now == last:
            return
        last = now


def agent_work_slowdown(
    units: int, rounds: int, results_of: list[str], port: int, receiver_pid: int
) -> list[tuple[str, float, float, float, float]]:
    """(variant, wall seconds, agent-thread CPU seconds, and each as a ratio to the no-processor
    run of the same round) per unit of agent work, each unit followed by one tool span; medians
    over rounds.

    The agent makes spans as fast as its own work allows, so toolmeter takes in spans at full
    rate for the whole run. Forwarding mode sends to the real ``toolmeter serve`` through its
    helper process (:mod:`collector.agent.relay`), so the agent's interpreter only queues
    spans and flattens them; the helper encodes and sends, at a lower CPU priority.
    """
    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-work-")

    def none() -> TracerProvider:
        return TracerProvider(shutdown_on_exit=False)

    def batch() -> TracerProvider:
        tp = TracerProvider(shutdown_on_exit=False)
        tp.add_span_processor(BatchSpanProcessor(NoOpExporter(), max_queue_size=units * 2))
        return tp

    def in_process() -> TracerProvider:
        tp = TracerProvider(shutdown_on_exit=False)
        db = os.path.join(tmp, f"w{time.monotonic_ns()}.duckdb")
        tp.add_span_processor(ToolResultProcessor(db=db, max_queue_size=units * 2))
        return tp

    def forwarding() -> TracerProvider:
        tp = TracerProvider(shutdown_on_exit=False)
        tp.add_span_processor(ToolResultProcessor(forward_to=f"http://127.0.0.1:{port}", max_queue_size=units * 2))
        return tp

    variants = [("no processor", none), ("BatchSpanProcessor + no-op exporter", batch),
                ("ToolResultProcessor, in-process", in_process),
                ("ToolResultProcessor, forwarding to toolmeter serve", forwarding)]  # fmt: skip
    calls = _tool_attributes(results_of, units)
    # every variant is set up and warmed once, untimed: an agent runs for hours, and the
    # forwarding helper's start (an interpreter importing protobuf, ~0.3 s of CPU) is paid once
    providers = {name: make() for name, make in variants}
    for tp in providers.values():
        tracer = tp.get_tracer("bench")
        for attrs in calls[:WARM_UNITS]:
            with tracer.start_as_current_span("execute_tool search_orders", attributes=attrs):
                pass
        tp.force_flush()
    _wait_idle(receiver_pid)
    # then short runs, the variants in turn (each first in some rounds), round after round: this
    # machine's speed drifts by a fifth over seconds, so each variant is compared with the
    # no-processor run of its own round
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in variants}
    order = list(providers)
    for r in range(rounds):
        for name in order[r % len(order) :] + order[: r % len(order)]:  # each variant in every place
            tracer = providers[name].get_tracer("bench")
            t0, c0 = time.perf_counter(), time.thread_time()
            for attrs in calls:
                _agent_work()
                with tracer.start_as_current_span("execute_tool search_orders", attributes=attrs):
                    pass
            results[name].append(((time.perf_counter() - t0) / units, (time.thread_time() - c0) / units))
            providers[name].force_flush()  # drains the agent's side
            _wait_idle(receiver_pid)  # and the receiver's: each run starts on an idle machine
    for tp in providers.values():
        tp.shutdown()
    none_runs = results["no processor"]
    return [
        (name, statistics.median(w for w, _ in v), statistics.median(c for _, c in v),
         statistics.median(w / n[0] for (w, _), n in zip(v, none_runs, strict=True)),
         statistics.median(c / n[1] for (_, c), n in zip(v, none_runs, strict=True)))
        for name, v in results.items()
    ]  # fmt: skip


def _wait_for_port(port: int) -> None:
    for _ in range(300):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"toolmeter serve did not start on port {port}")


def throughput(payloads: list[str], repeat: int) -> list[tuple[str, float, float]]:
    """(name, MB/s, spans/s) for tiktoken alone and for the whole measurement pipeline."""
    texts = payloads * repeat
    total_mb = sum(len(t.encode()) for t in texts) / 1e6
    counter = TokenCounter()
    enc = get_encoding()
    t0 = time.perf_counter()
    for t in texts:
        enc.encode_ordinary(t)
    tik = time.perf_counter() - t0
    t0 = time.perf_counter()
    for t in texts:
        counter.count(t)
    fast = time.perf_counter() - t0

    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-")
    pipeline = Pipeline(CollectorConfig(db=os.path.join(tmp, "t.duckdb")))
    items = [
        Item("tool", SpanData(name="execute_tool t", trace_id=f"{i:032x}", span_id=f"{i:016x}", start_ns=1, end_ns=2,
                              attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                                          "gen_ai.tool.call.result": t}))
        for i, t in enumerate(texts)
    ]  # fmt: skip
    t0 = time.perf_counter()
    batch = pipeline.build_batch(items)
    measure_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    pipeline.write(batch)
    total_s = measure_s + time.perf_counter() - t0
    n = len(texts)
    return [
        ("tiktoken encode_ordinary, 1 core (baseline)", total_mb / tik, n / tik),
        (f"{counter.name} count, 1 core", total_mb / fast, n / fast),
        ("toolmeter measure (count, infer, fingerprint), 1 core", total_mb / measure_s, n / measure_s),
        ("toolmeter measure + DuckDB write, 1 core", total_mb / total_s, n / total_s),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="passes over the real payloads for throughput")
    parser.add_argument("--work-units", type=int, default=1_000, help="units of agent work a run, slowdown table")
    parser.add_argument("--work-rounds", type=int, default=24, help="rounds of the slowdown table")
    args = parser.parse_args()
    server, port = start_receiver()
    try:
        report(args, port, server.pid)
    finally:
        server.terminate()
        server.wait(timeout=120)


def report(args: argparse.Namespace, port: int, receiver_pid: int) -> None:
    results_of = [json.dumps([{"id": n + i, "status": "paid", "amount": i * 1.5} for i in range(20)])
                  for n in range(1000)]  # fmt: skip
    print(f"1. agent-side time per tool span ({args.spans:,} spans x {args.rounds} rounds, median; 1 KB results, "
          "each call its own)")  # fmt: skip
    rows, helper_start = agent_side(args.spans, args.rounds, results_of, port, receiver_pid)
    print("   (wall: the agent's time a span; agent CPU: its thread's own; processor CPU: the")
    print("   processor's threads, until every span was handed on. 'vs Batch': the median over rounds of")
    print("   each run against the Batch row above it in the same round)")
    print(f"   {'variant':<50} {'us/span':>9} {'vs Batch':>9} {'agent CPU':>10} {'vs Batch':>9} {'proc. CPU':>10}")
    for name, wall, own, others, wall_ratio, own_ratio in rows:
        print(f"   {name:<50} {wall * 1e6:>9.2f} {wall_ratio:>8.2f}x {own * 1e6:>10.2f} {own_ratio:>8.2f}x "
              f"{others * 1e6:>10.2f}")  # fmt: skip
    print(f"   forwarding mode's first span and flush, which start its helper (once, untimed above): "
          f"{helper_start * 1e3:.0f} ms")  # fmt: skip
    print("\n   on_end alone (timeit, 100,000 calls of one finished span; forwarding mode 20,000)")
    rows2 = on_end_alone(port)
    base2 = rows2[0][1]
    for name, sec in rows2:
        print(f"   {name:<50} {sec * 1e6:>9.2f} {sec / base2:>8.2f}x")
    work_results = [json.dumps([{"id": n + i, "status": "paid", "amount": i * 1.5, "note": "x" * 40} for i in range(60)])
                    for n in range(1000)]  # fmt: skip
    print(f"\n2. agent's own work while toolmeter ingests every span at full rate ({args.work_rounds} rounds of "
          f"{args.work_units:,} units of ~0.3 ms, one {len(work_results[0]) / 1000:.1f} KB tool span after each, each call its own result; medians)")  # fmt: skip
    rows4 = agent_work_slowdown(args.work_units, args.work_rounds, work_results, port, receiver_pid)
    print("   (wall: what the agent waited; CPU: what its own thread spent, so what the rest of the")
    print("   machine took from it is the difference. The receiver runs on the last CPU. 'vs none':")
    print("   the median over rounds of each run against the no-processor run of its round.)")
    print(f"   {'variant':<50} {'ms/unit':>9} {'vs none':>8} {'CPU ms':>8} {'vs none':>8}")
    for name, sec, cpu, wall_ratio, cpu_ratio in rows4:
        print(f"   {name:<50} {sec * 1e3:>9.3f} {wall_ratio:>7.3f}x {cpu * 1e3:>8.3f} {cpu_ratio:>7.3f}x")
    payloads = _payloads()
    print(f"\n3. measurement throughput on {len(payloads)} real payloads x {args.repeat}")
    rows3 = throughput(payloads, args.repeat)
    tik = rows3[0][1]
    print(f"   {'stage':<55} {'MB/s':>7} {'spans/s':>9} {'vs tiktoken':>11}")
    for name, mbs, sps in rows3:
        print(f"   {name:<55} {mbs:>7.2f} {sps:>9.1f} {mbs / tik:>10.2f}x")


if __name__ == "__main__":
    main()
