"""Soak: the fuzz properties at length, then a steady OTLP stream into a receiver killed with -9.

Part 1, fuzz: runs ``tests/collector/test_fuzz.py`` in pytest subprocesses with
``TOOLMETER_FUZZ_EXAMPLES`` set, until each property ran N cases (the properties that write
to DuckDB or talk HTTP run a fixed fraction of N, see the test file). Hypothesis keeps every
case of a run in memory, so the cases go in rounds of ``--chunk`` per process, each round
with fresh randomness. Reports the cases each property ran, their time, the peak RSS of
each round, and any failure (a crash, a hang past ``--fuzz-timeout``, a failing case). A
round killed by a signal this script did not send (another user's ``pkill`` on a shared
host) runs once more, and the report says so.

Part 2, stream: starts ``toolmeter serve`` in its own process and sends OTLP/HTTP requests
(protobuf and JSON, tool spans of 100 B to 20 KB) at a steady rate for M minutes, retrying
each request until it is acknowledged, as OTLP exporters do. Every K seconds the receiver
is killed with SIGKILL and started again on the same store and spool. At the end every
acknowledged span must be in DuckDB exactly once, with its bytes and tokens right. The
receiver's RSS is sampled (psutil) throughout: start, peak and end are reported for each
process and for the whole run.

Exits non-zero on any failure.

Usage::

    python benchmarks/soak.py                               # both parts: 100,000 cases, 10 minutes
    python benchmarks/soak.py --examples 2000 --minutes 2   # a short run
    python benchmarks/soak.py --only fuzz --examples 100000
    python benchmarks/soak.py --only stream --minutes 30 --kill-every 20 --rate 20
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from collector.measure.tokens import get_encoding
from collector.store.database import read_connection

ROOT = Path(__file__).resolve().parent.parent
FUZZ_FILE = "tests/collector/test_fuzz.py"
# an hour ago: spans older than the retention window (30 days by default) are pruned on arrival
START_NS = time.time_ns() - 3600 * 10**9


# --- part 1: the fuzz properties --------------------------------------------------------------


@dataclass
class PropertyRun:
    """What hypothesis reported for one test: cases run (all phases) and their time."""

    name: str
    cases: int = 0
    seconds: float = 0.0


@dataclass
class FuzzResult:
    ok: bool
    cases: int
    seconds: float
    per_test: list[PropertyRun]
    notes: list[str]
    """One line per pytest round: its outcome and the peak RSS of its process."""


_STATS_HEAD = re.compile(r"^(\S+::\S+):$")
_STATS_PHASE = re.compile(r"during (\w+) phase \(([\d.]+) seconds\)")
_STATS_CASES = re.compile(r"(\d+) passing, (\d+) failing, and (\d+) invalid")


def _fuzz_round(examples: int, timeout_s: float, log_path: Path, t0: float) -> tuple[int, str, int, bool]:
    """One pytest run of the fuzz file: (exit code, its log, peak RSS of pytest, killed as hung)."""
    env = dict(os.environ, TOOLMETER_FUZZ_EXAMPLES=str(examples))
    cmd = [sys.executable, "-m", "pytest", FUZZ_FILE, "-m", "not slow", "-p", "no:cacheprovider", "-v",
           "--hypothesis-show-statistics"]  # fmt: skip
    peak = [0]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        hung = threading.Event()

        def kill() -> None:
            hung.set()
            proc.kill()

        def sample() -> None:
            while proc.poll() is None:
                with contextlib.suppress(psutil.Error):
                    peak[0] = max(peak[0], psutil.Process(proc.pid).memory_info().rss)
                time.sleep(1)

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        threading.Thread(target=sample, name="soak-rss", daemon=True).start()
        try:
            for line in proc.stdout:
                log.write(line)
                if " PASSED" in line or " FAILED" in line or " ERROR" in line:
                    print(f"  [{time.monotonic() - t0:7.0f} s] {line.rstrip()}", flush=True)
            code = proc.wait()
        finally:
            timer.cancel()
    return code, log_path.read_text(), peak[0], hung.is_set()


_OUTSIDE_SIGNALS = (signal.SIGTERM, signal.SIGKILL, signal.SIGINT)
"""Signals this script never sends a round (its hang timer kills, and says so): on a shared
host another user's ``pkill`` can send them. Such a round runs once more; a crash signal
(SIGSEGV, SIGABRT) fails the soak at once."""


def run_fuzz(examples: int, chunk: int, timeout_s: float, workdir: Path) -> FuzzResult:
    """Run the fuzz file until each property ran ``examples`` cases, ``chunk`` per pytest process.

    Hypothesis remembers every case of a run (about 40 KB each for the larger properties), so
    long runs go in rounds of fresh processes, each with fresh randomness.
    """
    t0 = time.monotonic()
    rounds = [chunk] * (examples // chunk) + ([examples % chunk] if examples % chunk else [])
    totals: dict[str, PropertyRun] = {}
    ok = True
    notes = []
    for n, size in enumerate(rounds, 1):
        for attempt in (1, 2):
            log_path = workdir / f"fuzz-{n}-{attempt}.log"
            print(f"fuzz round {n}/{len(rounds)}: TOOLMETER_FUZZ_EXAMPLES={size:,}; log {log_path}", flush=True)
            code, text, peak, hung = _fuzz_round(size, timeout_s, log_path, t0)
            summary = next((ln.strip("= ") for ln in reversed(text.splitlines()) if " in " in ln and "=" in ln), "")
            if code == 0:
                notes.append(f"round {n}: {summary} (peak RSS {peak / 1e6:,.0f} MB)")
                _add_statistics(text, totals)
                print(f"  {notes[-1]}; {sum(r.cases for r in totals.values()):,} cases so far", flush=True)
                break
            if hung:
                why = f"killed after {timeout_s:,.0f} s (hung?)"
            elif code < 0:
                why = f"killed by {signal.Signals(-code).name}"
            else:
                why = f"exit code {code}"
            note = f"round {n}: pytest {why} (peak RSS {peak / 1e6:,.0f} MB): {summary or 'no summary'}; log {log_path}"
            if attempt == 1 and not hung and -code in _OUTSIDE_SIGNALS:
                notes.append(note + "; not sent by this script: round run again")
                print(f"  {notes[-1]}", flush=True)
                continue
            notes.append(note)
            _add_statistics(text, totals)
            ok = False
            break
        if not ok:
            break
    seconds = time.monotonic() - t0
    per_test = list(totals.values())
    return FuzzResult(ok, sum(r.cases for r in per_test), seconds, per_test, notes)


def _add_statistics(text: str, totals: dict[str, PropertyRun]) -> None:
    """Add the cases and seconds of hypothesis' statistics in a pytest log to ``totals``."""
    current: PropertyRun | None = None
    for line in text.splitlines():
        if m := _STATS_HEAD.match(line.strip()):
            name = m.group(1).split("::", 1)[1]
            current = totals.setdefault(name, PropertyRun(name))
        elif current is not None and (m := _STATS_PHASE.search(line)):
            current.seconds += float(m.group(2))
        elif current is not None and (m := _STATS_CASES.search(line)):
            current.cases += sum(int(g) for g in m.groups())


# --- part 2: a steady stream into a receiver killed with -9 -------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _result_text(rng: random.Random, n: int) -> str:
    kind = rng.random()
    if kind < 0.4:
        rows = [{"id": n * 100 + k, "status": rng.choice(["paid", "late", "void"]), "amount": round(rng.random() * 500, 2)}
                for k in range(rng.randint(1, 200))]  # fmt: skip
        return json.dumps(rows)
    if kind < 0.7:
        return "\n".join(
            f"2026-01-0{k % 9 + 1}T10:00:{k % 60:02d}Z INFO request {n}-{k} ok" for k in range(rng.randint(1, 250))
        )
    if kind < 0.9:
        return " ".join(
            rng.choice(["alpha", "beta", "🙂", "<|endoftext|>", "naïve", "x" * 40]) for _ in range(rng.randint(1, 3000))
        )
    return ""


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def request_body(trace_id: str, texts: list[str], as_json: bool) -> bytes:
    """One export request: a tool span per text, in one trace."""
    if as_json:
        spans = [
            {"traceId": trace_id, "spanId": f"{i + 1:016x}", "name": "execute_tool soak",
             "startTimeUnixNano": str(START_NS + i), "endTimeUnixNano": str(START_NS + i + 1),
             "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                            {"key": "gen_ai.tool.name", "value": {"stringValue": "soak"}},
                            {"key": "gen_ai.tool.call.result", "value": {"stringValue": t}}]}
            for i, t in enumerate(texts)
        ]  # fmt: skip
        doc = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
        return json.dumps(doc).encode()
    pb = [
        Span(trace_id=bytes.fromhex(trace_id), span_id=(i + 1).to_bytes(8, "big"), name="execute_tool soak",
             start_time_unix_nano=START_NS + i, end_time_unix_nano=START_NS + i + 1,
             attributes=[_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "soak"),
                         _kv("gen_ai.tool.call.result", t)])
        for i, t in enumerate(texts)
    ]  # fmt: skip
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=pb)])])
    return bytes(req.SerializeToString())


@dataclass
class Incarnation:
    """One receiver process: when it ran and how much memory it held."""

    pid: int
    started: float
    ended: float = 0.0
    rss: list[int] = field(default_factory=list)
    killed: bool = False


class Receiver:
    """A ``toolmeter serve`` process on a fixed port, store and spool; restartable."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.db = str(workdir / "soak.duckdb")
        self.spool = str(workdir / "soak.spool")
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1/traces"
        self.log = workdir / "receiver.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.incarnations: list[Incarnation] = []
        self._lock = threading.Lock()

    def start(self, wait_s: float = 120) -> None:
        cmd = [sys.executable, "-m", "collector", "serve", "--db", self.db, "--spool", self.spool,
               "--port", str(self.port), "--grpc-port", "0"]  # fmt: skip
        with self._lock, open(self.log, "ab") as log:  # the process keeps its own copy of the file
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=log)
            self.incarnations.append(Incarnation(self.proc.pid, time.monotonic()))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolmeter serve exited with {self.proc.returncode}; see {self.log}")
            try:
                post(self.url, ExportTraceServiceRequest().SerializeToString(), "application/x-protobuf", timeout=5)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"toolmeter serve did not answer within {wait_s:.0f} s; see {self.log}")

    def kill9(self) -> None:
        with self._lock:
            assert self.proc is not None
            self.sample()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.incarnations[-1].ended = time.monotonic()
            self.incarnations[-1].killed = True

    def stop(self) -> int:
        with self._lock:
            assert self.proc is not None
            self.sample()
            self.proc.terminate()
            code = self.proc.wait(timeout=300)
            self.incarnations[-1].ended = time.monotonic()
            return code

    def sample(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(psutil.Error):  # it may have just exited
            self.incarnations[-1].rss.append(psutil.Process(self.proc.pid).memory_info().rss)


def post(url: str, body: bytes, content_type: str, timeout: float = 60) -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as e:
        e.read()
        return int(e.code)


@dataclass
class StreamResult:
    ok: bool
    problems: list[str]
    requests: int
    acked_spans: int
    stored_rows: int
    kills: int
    retries: int
    replayed: int
    """Requests a restarted receiver replayed from its spool (acknowledged, not yet stored)."""
    seconds: float
    drain_seconds: float
    incarnations: list[Incarnation]


def run_stream(minutes: float, kill_every: float, rate: float, spans_per_request: int, workdir: Path) -> StreamResult:
    rng = random.Random(20260101)
    receiver = Receiver(workdir, _free_port())
    receiver.start()
    run_id = f"{os.getpid() & 0xFFFFFFFF:08x}"
    expected: dict[tuple[str, str], str] = {}  # acknowledged (trace, span) -> result text
    problems: list[str] = []
    stop = threading.Event()
    counts = {"requests": 0, "retries": 0}

    def send() -> None:
        for n in itertools.count(1):
            if stop.is_set():
                return
            t_next = time.monotonic() + 1 / rate
            trace = f"{run_id}{n:024x}"
            texts = [_result_text(rng, n) for _ in range(spans_per_request)]
            as_json = n % 2 == 0
            body = request_body(trace, texts, as_json)
            ct = "application/json" if as_json else "application/x-protobuf"
            while True:  # an exporter retries until the request is acknowledged
                try:
                    status = post(receiver.url, body, ct)
                except OSError:
                    status = 0  # refused or cut off by the kill: retry
                if status == 200:
                    break
                if status not in (0, 503):
                    problems.append(f"request {n} answered {status}")
                    break
                counts["retries"] += 1
                time.sleep(0.2)
            counts["requests"] += 1
            if status == 200:
                for i, t in enumerate(texts):
                    expected[(trace, f"{i + 1:016x}")] = t
            time.sleep(max(0.0, t_next - time.monotonic()))

    sender = threading.Thread(target=send, name="soak-sender", daemon=True)
    t0 = time.monotonic()
    sender.start()
    end = t0 + minutes * 60
    next_kill = t0 + kill_every
    kills = 0
    try:
        while time.monotonic() < end:
            receiver.sample()
            if time.monotonic() >= next_kill:
                receiver.kill9()
                kills += 1
                print(
                    f"  [{time.monotonic() - t0:6.0f} s] kill -9 #{kills}; {len(expected):,} spans acknowledged",
                    flush=True,
                )
                receiver.start()
                next_kill = time.monotonic() + kill_every
            time.sleep(0.5)
        stop.set()
        sender.join(timeout=600)
        if sender.is_alive():
            problems.append("the sender never got its last request acknowledged")
        streamed = time.monotonic() - t0
        print(f"  [{streamed:6.0f} s] stream stopped; waiting for {len(expected):,} spans in DuckDB", flush=True)
        t_drain = time.monotonic()
        rows = _wait_for_rows(receiver, run_id, len(expected), timeout_s=600)
        drain = time.monotonic() - t_drain
        code = receiver.stop()
        if code != 0:
            problems.append(f"toolmeter serve exited with {code} on SIGTERM")
    except BaseException:
        if receiver.proc is not None and receiver.proc.poll() is None:
            receiver.proc.kill()
        raise
    problems += _check_rows(receiver.db, run_id, expected)
    log = receiver.log.read_text(errors="replace")
    replayed = sum(int(n) for n in re.findall(r"replaying (\d+) spooled request", log))
    return StreamResult(not problems, problems, counts["requests"], len(expected), rows, kills, counts["retries"],
                        replayed, streamed, drain, receiver.incarnations)  # fmt: skip


def _count_rows(db: str, run_id: str) -> int:
    with read_connection(db, wait_s=30) as con:
        row = con.execute("SELECT count(*) FROM tool_calls WHERE starts_with(trace_id, ?)", [run_id]).fetchone()
    return int(row[0]) if row else 0


def _wait_for_rows(receiver: Receiver, run_id: str, n: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    rows = 0
    while time.monotonic() < deadline:
        receiver.sample()
        rows = _count_rows(receiver.db, run_id)
        if rows >= n:
            return rows
        time.sleep(1)
    return rows


def _check_rows(db: str, run_id: str, expected: dict[tuple[str, str], str]) -> list[str]:
    """Every acknowledged span stored exactly once, with the right bytes and tokens."""
    enc = get_encoding("o200k_base")
    with read_connection(db) as con:
        got = con.execute(
            "SELECT trace_id, span_id, count(*), any_value(raw_bytes), any_value(raw_tokens) FROM tool_calls "
            "WHERE starts_with(trace_id, ?) GROUP BY ALL",
            [run_id],
        ).fetchall()
    problems = []
    stored = {(t, s): (n, b, k) for t, s, n, b, k in got}
    missing = [key for key in expected if key not in stored]
    if missing:
        problems.append(f"{len(missing):,} acknowledged spans are not stored, e.g. {missing[:3]}")
    twice = [key for key, (n, _, _) in stored.items() if n != 1]
    if twice:
        problems.append(f"{len(twice):,} spans stored more than once, e.g. {twice[:3]}")
    # a request cut off by a kill after it was spooled is stored before its 200, but the
    # sender retries it until acknowledged: every stored span ends up acknowledged
    unexpected = [key for key in stored if key not in expected]
    if unexpected:
        problems.append(f"{len(unexpected):,} stored spans were never sent, e.g. {unexpected[:3]}")
    wrong = []
    for key, text in expected.items():
        if key in stored:
            _, raw_bytes, raw_tokens = stored[key]
            if (raw_bytes, raw_tokens) != (len(text.encode()), len(enc.encode_ordinary(text))):
                wrong.append(key)
    if wrong:
        problems.append(f"{len(wrong):,} spans stored with wrong bytes or tokens, e.g. {wrong[:3]}")
    return problems


# --- the report -----------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["fuzz", "stream"], help="run one part only")
    parser.add_argument("--examples", type=int, default=100_000, help="hypothesis cases per property (default 100000)")
    parser.add_argument(
        "--chunk", type=int, default=10_000, help="cases per property per pytest process (default 10000)"
    )
    parser.add_argument(
        "--fuzz-timeout", type=float, default=3 * 3600, help="seconds a pytest round may run before it counts as hung"
    )
    parser.add_argument("--minutes", type=float, default=10, help="length of the stream (default 10)")
    parser.add_argument("--kill-every", type=float, default=20, help="seconds between kill -9s (default 20)")
    parser.add_argument("--rate", type=float, default=10, help="requests per second (default 10)")
    parser.add_argument("--spans-per-request", type=int, default=10, help="tool spans per request (default 10)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work folder (store, spool, logs); kept on failure"
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="toolmeter-soak-"))
    rows: list[tuple[str, str, str]] = []
    ok = True
    try:
        if args.only in (None, "fuzz"):
            fz = run_fuzz(args.examples, args.chunk, args.fuzz_timeout, workdir)
            ok &= fz.ok
            print("\nfuzz properties:")
            width = max([len(r.name) for r in fz.per_test] + [8])
            print(f"  {'property':<{width}} {'cases':>9} {'seconds':>9}")
            for r in fz.per_test:
                print(f"  {r.name:<{width}} {r.cases:>9,} {r.seconds:>9.1f}")
            rows.append(("fuzz", "ok" if fz.ok else "FAILED",
                         f"{fz.cases:,} cases in {fz.seconds:,.0f} s"))  # fmt: skip
            rows += [("", "", note) for note in fz.notes]
        if args.only in (None, "stream"):
            print(f"\nstream: {args.minutes:g} min at {args.rate:g} requests/s x {args.spans_per_request} spans, "
                  f"kill -9 every {args.kill_every:g} s; work folder {workdir}", flush=True)  # fmt: skip
            sr = run_stream(args.minutes, args.kill_every, args.rate, args.spans_per_request, workdir)
            ok &= sr.ok
            print("\nreceiver processes:")
            print(f"  {'#':>3} {'pid':>8} {'ran s':>7} {'ended':>8} {'rss start':>10} {'peak':>10} {'end':>10}")
            for i, inc in enumerate(sr.incarnations, 1):
                if inc.rss:
                    print(f"  {i:>3} {inc.pid:>8} {inc.ended - inc.started:>7.0f} "
                          f"{'kill -9' if inc.killed else 'SIGTERM':>8} {_mb(inc.rss[0]):>10} "
                          f"{_mb(max(inc.rss)):>10} {_mb(inc.rss[-1]):>10}")  # fmt: skip
            rows.append(("stream", "ok" if sr.ok else "FAILED",
                         f"{sr.requests:,} requests, {sr.acked_spans:,} spans acknowledged, {sr.stored_rows:,} "
                         f"stored once; {sr.kills} kill -9s, {sr.retries:,} retries, {sr.replayed:,} requests replayed "
                         f"from the spool; {sr.seconds:,.0f} s + "
                         f"{sr.drain_seconds:,.0f} s to drain"))  # fmt: skip
            rows += [("", "", p) for p in sr.problems]
            samples = [inc.rss for inc in sr.incarnations if inc.rss]
            if samples:
                rows.append(("memory", "", f"RSS start {_mb(samples[0][0])}, peak {_mb(max(max(s) for s in samples))}, "
                                           f"end {_mb(samples[-1][-1])} (sampled every 0.5 s)"))  # fmt: skip
    finally:
        if args.keep or not ok:
            print(f"\nwork folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\nsummary")
    print(f"  {'part':<8} {'result':<7} details")
    for part, result, details in rows:
        print(f"  {part:<8} {result:<7} {details}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
