"""Peer benchmark: `toolmeter serve` against Arize Phoenix and the MLflow tracking server.

The same OTLP/HTTP protobuf stream of tool spans goes, on loopback, to each server in turn
(one server running at a time, each in its own process group):

* ``toolmeter serve`` (this checkout, DuckDB store);
* ``phoenix serve`` (Arize Phoenix, its default SQLite store);
* ``mlflow server`` (SQLite backend store, its OTLP endpoint ``/v1/traces``).

Each span carries both the OpenTelemetry GenAI conventions (``gen_ai.operation.name =
execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``,
``gen_ai.tool.call.result``) and OpenInference (``openinference.span.kind = TOOL``,
``tool.name``, ``input.value``, ``output.value``), so every server sees a tool call. Every
span is the root of its own trace; trace and span ids are random per run.

Per server it reports:

* accepted: spans/s from the first request sent to the last 2xx acknowledgement;
* queryable: seconds from the first request until the server's own query path counts every
  span (toolmeter: ``count(*)`` on ``tool_calls``; Phoenix: GraphQL ``recordCount`` of the
  project; MLflow: ``POST /api/3.0/mlflow/traces/metrics`` span count of the experiment), and
  the end-to-end spans/s that follows;
* CPU: user + system seconds the server's process tree used from the first request until
  every span was queryable, and spans per CPU second (steadier than wall time when other
  work shares the machine; the 1-minute load average is printed beside each server);
* memory: RSS of the server's whole process tree when idle after start, and its peak during
  the run (sampled every 50 ms; shared pages of forked workers count once per process);
* both rates as a ratio to the faster of the two peers.

Requests are sent from 4 threads, 100 spans each, on keep-alive connections; 503 and 429
are retried with backoff. Nothing is sent or retried after ``--timeout`` seconds from the
first request, and a server that has not made every span queryable by then is reported
with the count it reached.

Phoenix and MLflow are installed from PyPI into their own virtual environments under
``.bench-venvs/`` the first time (several minutes each) and reused afterwards;
``--reinstall`` recreates them. A peer that fails to install or start is reported as failed,
with the tail of its log, and the others still run.

Usage::

    python benchmarks/bench_peers.py [--spans 20000] [--only toolmeter,phoenix,mlflow]
        [--reinstall] [--mlflow-workers 1] [--timeout 600] [--keep] [--json PATH]
"""

from __future__ import annotations

import abc
import argparse
import ctypes
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import psutil
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from collector.store.database import read_connection

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".bench-venvs"
SPANS_PER_REQUEST = 100
CLIENT_THREADS = 4
POLL_S = 0.1
POLL_FRACTION = 0.01
SAMPLE_S = 0.05
READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 60.0
SERVICE_NAME = "bench-agent"
TOOLS = ("search_orders", "list_invoices", "get_customer")
LOG_TAIL_LINES = 40
PR_SET_PDEATHSIG = 1


# --- workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """Serialized requests, built before the clock starts."""

    spans: int
    bodies: list[bytes]
    spans_per_body: list[int]
    result_bytes: int

    @property
    def request_bytes(self) -> int:
        return sum(len(b) for b in self.bodies)


def _kv(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _result_text(i: int) -> str:
    """About 1 KB of JSON rows (20 orders), different for every call."""
    rows = [
        {"id": i * 100 + k, "status": ("paid", "refunded", "open")[k % 3], "amount": round(k * 3.7 + i % 97, 2)}
        for k in range(20)
    ]
    return json.dumps(rows)


def _tool_span(i: int, trace_prefix: bytes, span_prefix: bytes, start_ns: int) -> tuple[Span, int]:
    tool = TOOLS[i % len(TOOLS)]
    call_id = f"call_{span_prefix.hex()}{i:08x}"
    arguments = json.dumps({"customer": f"c-{i % 1000}", "limit": 20})
    result = _result_text(i)
    attributes = [
        _kv("gen_ai.operation.name", "execute_tool"),
        _kv("gen_ai.tool.name", tool),
        _kv("gen_ai.tool.call.id", call_id),
        _kv("gen_ai.tool.call.arguments", arguments),
        _kv("gen_ai.tool.call.result", result),
        _kv("openinference.span.kind", "TOOL"),
        _kv("tool.name", tool),
        _kv("input.value", arguments),
        _kv("output.value", result),
    ]
    span = Span(
        trace_id=trace_prefix + i.to_bytes(8, "big"),
        span_id=span_prefix + i.to_bytes(4, "big"),
        name=f"execute_tool {tool}",
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start_ns + i * 1_000_000,
        end_time_unix_nano=start_ns + i * 1_000_000 + 800_000,
        attributes=attributes,
    )
    return span, len(result.encode())


def build_workload(n: int, per_request: int = SPANS_PER_REQUEST) -> Workload:
    """``n`` tool spans in requests of ``per_request``, with ids no earlier run used."""
    trace_prefix = os.urandom(8)
    span_prefix = os.urandom(4)
    start_ns = time.time_ns() - n * 1_000_000
    resource = Resource(attributes=[_kv("service.name", SERVICE_NAME)])
    scope = InstrumentationScope(name="bench_peers", version="1")
    bodies: list[bytes] = []
    counts: list[int] = []
    result_bytes = 0
    for first in range(1, n + 1, per_request):
        spans = []
        for i in range(first, min(first + per_request, n + 1)):
            span, size = _tool_span(i, trace_prefix, span_prefix, start_ns)
            spans.append(span)
            result_bytes += size
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])]
        )
        bodies.append(request.SerializeToString())
        counts.append(len(spans))
    return Workload(spans=n, bodies=bodies, spans_per_body=counts, result_bytes=result_bytes)


# --- processes, ports, memory ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_usage(root: psutil.Process) -> tuple[int, dict[int, float]]:
    """RSS in bytes of ``root`` and its descendants, and each one's CPU seconds so far."""
    rss, cpu = 0, {}
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, {}
    for proc in procs:
        try:
            with proc.oneshot():
                rss += proc.memory_info().rss
                times = proc.cpu_times()
            cpu[proc.pid] = times.user + times.system
        except psutil.Error:
            continue
    return rss, cpu


class TreeSampler(threading.Thread):
    """Samples a process tree every ``SAMPLE_S`` seconds: peak RSS, and CPU time used since a mark.

    CPU time sums user + system seconds over every process seen in the tree (the last
    sample of a process that exited counts).
    """

    def __init__(self, pid: int) -> None:
        super().__init__(name="tree-sampler", daemon=True)
        self._root = psutil.Process(pid)
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._cpu: dict[int, float] = {}
        self._cpu_mark: dict[int, float] = {}
        self.peak = 0
        self.peak_processes = 0

    def sample(self) -> tuple[int, int]:
        """Current RSS of the tree and how many processes it has."""
        rss, cpu = tree_usage(self._root)
        with self._lock:
            self._cpu.update(cpu)
            if rss > self.peak:
                self.peak, self.peak_processes = rss, len(cpu)
        return rss, len(cpu)

    def mark(self) -> None:
        """Start the peak and the CPU count afresh from now."""
        self.sample()
        with self._lock:
            self.peak, self.peak_processes = 0, 0
            self._cpu_mark = dict(self._cpu)

    def cpu_seconds(self) -> float:
        with self._lock:
            return sum(v - self._cpu_mark.get(pid, 0.0) for pid, v in self._cpu.items())

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_S):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
        self.sample()


def _die_with_parent() -> None:
    """In the server's child process: ask Linux for SIGTERM if this benchmark dies first."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(f"stopped by signal {signal.Signals(signum).name}")


def stop_servers_on_signals() -> None:
    """SIGTERM or SIGHUP end the run through the normal clean-up, so servers are stopped."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL whatever is left after a grace period."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    kept = [line for line in text if not line.startswith("WARNING: Location 'file://")]
    return "\n".join(kept[-lines:])


# --- HTTP -----------------------------------------------------------------------------------


def http_json(url: str, payload: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
    """GET (no payload) or POST a JSON body; the decoded JSON answer."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status: int = resp.status
            return 200 <= status < 300
    except (OSError, http.client.HTTPException):
        return False


class OtlpSender:
    """Posts OTLP/HTTP protobuf bodies over one keep-alive connection per thread.

    503 and 429 are retried with exponential backoff, as OpenTelemetry exporters do. Nothing
    is sent or retried after ``deadline`` (a ``time.perf_counter()`` value).
    """

    def __init__(self, port: int, headers: dict[str, str], deadline: float) -> None:
        self.port = port
        self.headers = {"Content-Type": "application/x-protobuf", **headers}
        self.deadline = deadline
        self._local = threading.local()
        self._lock = threading.Lock()
        self.retries = 0
        self.refusals: dict[int, int] = {}
        self.last_ack = 0.0

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            self._local.conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def post(self, body: bytes) -> bool:
        """True once the server acknowledged ``body``; False if the deadline passed first."""
        delay = 0.1
        while time.perf_counter() < self.deadline:
            try:
                conn = self._connection()
                conn.request("POST", "/v1/traces", body=body, headers=self.headers)
                resp = conn.getresponse()
                answer = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException):
                self._drop_connection()
                status, answer = 0, b""
            if 200 <= status < 300:
                now = time.perf_counter()
                with self._lock:
                    self.last_ack = max(self.last_ack, now)
                return True
            if status not in (0, 429, 503):
                raise RuntimeError(f"/v1/traces answered {status}: {answer[:300]!r}")
            with self._lock:
                self.retries += 1
                self.refusals[status] = self.refusals.get(status, 0) + 1
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        return False


# --- servers --------------------------------------------------------------------------------


@dataclass
class PeerEnv:
    """A peer installed from PyPI into its own virtual environment."""

    name: str
    distribution: str
    executable: str
    install_s: float | None = None
    installed_now: bool = False

    @property
    def path(self) -> Path:
        return VENVS / self.name

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def marker(self) -> Path:
        return self.path / ".bench-installed.json"

    def version(self) -> str:
        code = f"from importlib.metadata import version; print(version({self.distribution!r}))"
        out = subprocess.run([str(self.bin / "python"), "-c", code], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def usable(self) -> bool:
        if not (self.bin / self.executable).exists():
            return False
        try:
            self.version()
        except (OSError, subprocess.CalledProcessError):
            return False
        return True

    def ensure(self, reinstall: bool) -> None:
        """Create the environment and install the peer unless a usable one is there."""
        if reinstall and self.path.exists():
            shutil.rmtree(self.path)
        if self.usable():
            if self.marker.exists():
                self.install_s = json.loads(self.marker.read_text()).get("install_s")
            return
        shutil.rmtree(self.path, ignore_errors=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        log = self.path.parent / f"{self.name}-install.log"
        print(f"installing {self.distribution} into {self.path} (several minutes; log: {log})", flush=True)
        t0 = time.perf_counter()
        with log.open("wb") as out:
            steps = [
                [sys.executable, "-m", "venv", str(self.path)],
                [str(self.bin / "python"), "-m", "pip", "install", "--upgrade", "pip"],
                [str(self.bin / "python"), "-m", "pip", "install", self.distribution],
            ]
            for step in steps:
                if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT, check=False).returncode != 0:
                    raise RuntimeError(f"`{' '.join(step)}` failed:\n{log_tail(log)}")
        self.install_s = time.perf_counter() - t0
        self.installed_now = True
        self.marker.write_text(json.dumps({"install_s": self.install_s, "version": self.version()}))
        print(f"installed {self.distribution} {self.version()} in {self.install_s:.0f} s", flush=True)


class Server(abc.ABC):
    """One OTLP/HTTP server under test, started in its own process group."""

    name: str
    query_path: str = ""

    def __init__(self, workdir: Path, peer: PeerEnv | None = None) -> None:
        self.workdir = workdir
        self.peer = peer
        self.port = free_port()
        self.log_path = workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @abc.abstractmethod
    def command(self) -> list[str]: ...

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def is_ready(self) -> bool: ...

    def prepare(self) -> dict[str, str]:
        """Set up what the server needs before spans arrive; the extra OTLP request headers."""
        return {}

    @abc.abstractmethod
    def count(self) -> int:
        """Spans of this run visible through the server's own query path."""

    def start(self) -> None:
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # no thread of this process runs while a server starts, so preexec_fn is safe here
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Seconds until the server answered its readiness check."""
        assert self.proc is not None
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode} while starting")
            if self.is_ready():
                return time.perf_counter() - t0
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)
        if self._log is not None:
            self._log.close()
            self._log = None


class Toolmeter(Server):
    name = "toolmeter"
    query_path = "DuckDB: SELECT count(*) FROM tool_calls (collector.store.database.read_connection)"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.db = workdir / "toolmeter.duckdb"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "collector", "serve", "--db", str(self.db), "--port", str(self.port),
                "--grpc-port", "0"]  # fmt: skip

    def version(self) -> str:
        return metadata.version("toolmeter")

    def is_ready(self) -> bool:
        empty = ExportTraceServiceRequest().SerializeToString()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/traces", data=empty, headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as resp:
                status: int = resp.status
            return 200 <= status < 300
        except (OSError, http.client.HTTPException):
            return False

    def count(self) -> int:
        with read_connection(self.db, wait_s=5) as con:
            row = con.execute("SELECT count(*) FROM tool_calls").fetchone()
        return int(row[0]) if row else 0


class Phoenix(Server):
    name = "phoenix"
    query_path = "GraphQL: projects { recordCount } of project 'default'"

    def __init__(self, workdir: Path, peer: PeerEnv) -> None:
        super().__init__(workdir, peer)
        self.venv = peer
        self.grpc_port = free_port()

    def command(self) -> list[str]:
        return [str(self.venv.bin / "phoenix"), "serve"]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_WORKING_DIR": str(self.workdir / "phoenix-home"),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_LOG_MIGRATIONS": "false",
        })  # fmt: skip
        return env

    def version(self) -> str:
        return self.venv.version()

    def is_ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.port}/healthz")

    def count(self) -> int:
        query = {"query": "query { projects { edges { node { name recordCount } } } }"}
        answer = http_json(f"http://127.0.0.1:{self.port}/graphql", query)
        for edge in answer["data"]["projects"]["edges"]:
            if edge["node"]["name"] == "default":
                return int(edge["node"]["recordCount"])
        return 0


class MLflow(Server):
    name = "mlflow"
    query_path = "REST: POST /api/3.0/mlflow/traces/metrics (SPANS, span_count, COUNT) of the experiment"

    def __init__(self, workdir: Path, peer: PeerEnv, workers: int) -> None:
        super().__init__(workdir, peer)
        self.venv = peer
        self.workers = workers
        self.experiment_id = ""

    def command(self) -> list[str]:
        return [
            str(self.venv.bin / "mlflow"), "server",
            "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
            "--default-artifact-root", str(self.workdir / "mlflow-artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
        return env

    def version(self) -> str:
        return self.venv.version()

    def is_ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.port}/health")

    def prepare(self) -> dict[str, str]:
        name = f"bench-peers-{os.urandom(4).hex()}"
        answer = http_json(f"http://127.0.0.1:{self.port}/api/2.0/mlflow/experiments/create", {"name": name})
        self.experiment_id = str(answer["experiment_id"])
        return {"x-mlflow-experiment-id": self.experiment_id}

    def count(self) -> int:
        query = {
            "experiment_ids": [self.experiment_id],
            "view_type": "SPANS",
            "metric_name": "span_count",
            "aggregations": [{"aggregation_type": "COUNT"}],
        }
        answer = http_json(f"http://127.0.0.1:{self.port}/api/3.0/mlflow/traces/metrics", query)
        points = answer.get("data_points") or []
        return int(points[0]["values"]["COUNT"]) if points else 0


# --- one run --------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    version: str = ""
    query_path: str = ""
    startup_s: float | None = None
    accepted: int = 0
    accepted_s: float | None = None
    queryable_s: float | None = None
    visible: int = 0
    spans: int = 0
    retries: int = 0
    timeout_s: float = 0.0
    load_avg: list[float] = field(default_factory=list)
    idle_rss_mb: float | None = None
    idle_processes: int = 0
    peak_rss_mb: float | None = None
    peak_processes: int = 0
    cpu_s: float | None = None
    install_s: float | None = None
    installed_now: bool = False
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def accept_rate(self) -> float | None:
        return self.accepted / self.accepted_s if self.accepted_s else None

    @property
    def e2e_rate(self) -> float | None:
        return self.spans / self.queryable_s if self.queryable_s else None

    @property
    def spans_per_cpu_s(self) -> float | None:
        """Spans made queryable per CPU second of the server tree: less sensitive to a busy machine."""
        return self.visible / self.cpu_s if self.cpu_s and self.queryable_s else None


def send_all(sender: OtlpSender, workload: Workload) -> int:
    """Spans acknowledged."""
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        acks = list(pool.map(sender.post, workload.bodies))
    return sum(n for n, ok in zip(workload.spans_per_body, acks, strict=True) if ok)


def poll_visible(count: Callable[[], int], want: int, t0: float, deadline: float) -> tuple[float | None, int, str]:
    """Seconds from ``t0`` until ``count()`` reached ``want`` (None past ``deadline``), last count, last error.

    Polls every ``POLL_S`` seconds or every ``POLL_FRACTION`` of the time elapsed, whichever is
    longer: a count costs the server CPU (a Phoenix GraphQL count about 25 ms, an MLflow
    metrics query a few hundred), so long waits poll less often, at most 1% late.
    """
    seen, error = 0, ""
    while True:
        try:
            seen = count()
            error = ""
        except Exception as e:  # the server may be too busy to answer; keep polling
            error = f"{type(e).__name__}: {e}"
        now = time.perf_counter()
        if seen >= want:
            return now - t0, seen, error
        if now > deadline:
            return None, seen, error
        time.sleep(max(POLL_S, POLL_FRACTION * (now - t0)))


@contextmanager
def running(server: Server) -> Iterator[Server]:
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _send(sender: OtlpSender, workload: Workload, t0: float, result: Result) -> None:
    result.accepted = send_all(sender, workload)
    result.accepted_s = (sender.last_ack - t0) if result.accepted else None
    result.retries = sender.retries
    if sender.refusals:
        refused = ", ".join(f"{code or 'connection error'}: {n}" for code, n in sorted(sender.refusals.items()))
        result.notes.append(f"requests refused and retried ({refused})")
    if result.accepted < workload.spans:
        result.notes.append(
            f"only {result.accepted:,} of {workload.spans:,} spans acknowledged within {result.timeout_s:.0f} s"
        )


def _wait_queryable(server: Server, workload: Workload, t0: float, deadline: float, result: Result) -> None:
    result.queryable_s, result.visible, last_error = poll_visible(server.count, workload.spans, t0, deadline)
    if result.queryable_s is None:
        note = f"not all queryable after {result.timeout_s:.0f} s: {result.visible:,} of {workload.spans:,}"
        result.notes.append(note + (f" (last query error: {last_error})" if last_error else ""))
    if result.visible > workload.spans:
        result.notes.append(f"query counts {result.visible:,} spans for {workload.spans:,} sent")


def _drive(server: Server, headers: dict[str, str], workload: Workload, result: Result) -> None:
    """Idle memory, then the stream, then the wait until queryable, with the tree sampled throughout."""
    assert server.proc is not None
    sampler = TreeSampler(server.proc.pid)
    time.sleep(2.0)  # let start-up work settle before the idle figure
    idle, result.idle_processes = sampler.sample()
    result.idle_rss_mb = idle / 2**20
    sampler.mark()
    sampler.start()
    load_before = os.getloadavg()[0]
    try:
        print(f"  {server.name}: ready after {result.startup_s or 0:.1f} s; sending {workload.spans:,} spans")
        t0 = time.perf_counter()
        deadline = t0 + result.timeout_s
        _send(OtlpSender(server.port, headers, deadline), workload, t0, result)
        print(f"  {server.name}: {result.accepted:,} spans acknowledged after {time.perf_counter() - t0:.1f} s")
        _wait_queryable(server, workload, t0, deadline, result)
    finally:
        sampler.stop()
    result.load_avg = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    result.cpu_s = sampler.cpu_seconds()
    result.peak_rss_mb = sampler.peak / 2**20
    result.peak_processes = sampler.peak_processes


def measure(server: Server, workload: Workload, timeout_s: float) -> Result:
    """Start ``server``, stream ``workload`` to it, and stop it (its process group), whatever happens."""
    result = Result(name=server.name, query_path=server.query_path, spans=workload.spans, timeout_s=timeout_s)
    try:
        result.version = server.version()
        with running(server):
            result.startup_s = server.wait_ready()
            _drive(server, server.prepare(), workload, result)
    except Exception as e:
        result.error = f"{type(e).__name__}: {e}"
        print(f"  {server.name} FAILED: {result.error}")
        print(f"  --- {server.log_path} (tail) ---\n{log_tail(server.log_path)}")
    return result


# --- report ---------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _ratio(value: float | None, best: float | None) -> str:
    return "-" if value is None or not best else f"{value / best:.2f}x"


def _best_peer(results: list[Result], rate: Callable[[Result], float | None]) -> float | None:
    rates = [r for r in (rate(res) for res in results if res.name != "toolmeter") if r]
    return max(rates) if rates else None


COLUMNS = (
    "server", "version", "accepted in (s)", "accepted spans/s", "accept vs faster peer", "queryable after (s)",
    "end-to-end spans/s", "queryable vs faster peer", "server CPU (s)", "spans per CPU s", "idle RSS (MB)",
    "peak RSS (MB)", "processes", "retries",
)  # fmt: skip


def _row(r: Result, best_accept: float | None, best_e2e: float | None) -> list[str]:
    if r.error:
        return [r.name, r.version or "?", f"failed: {r.error[:100]}"] + [""] * (len(COLUMNS) - 3)
    queryable = _fmt(r.queryable_s, ".1f", f"> {r.timeout_s:.0f} ({r.visible:,} seen)")
    return [
        r.name, r.version, _fmt(r.accepted_s, ".1f"), _fmt(r.accept_rate, ",.0f"), _ratio(r.accept_rate, best_accept),
        queryable, _fmt(r.e2e_rate, ",.0f"), _ratio(r.e2e_rate, best_e2e), _fmt(r.cpu_s, ",.1f"),
        _fmt(r.spans_per_cpu_s, ",.0f"), _fmt(r.idle_rss_mb, ",.0f"), _fmt(r.peak_rss_mb, ",.0f"),
        str(r.peak_processes), str(r.retries),
    ]  # fmt: skip


def table(results: list[Result]) -> str:
    """Markdown table; ratios are against the faster of the two peers for that figure."""
    best_accept = _best_peer(results, lambda r: r.accept_rate)
    best_e2e = _best_peer(results, lambda r: r.e2e_rate)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "---:|" * (len(COLUMNS) - 2)]
    lines += ["| " + " | ".join(_row(r, best_accept, best_e2e)) + " |" for r in results]
    return "\n".join(lines)


def verdict(results: list[Result]) -> str:
    own = next((r for r in results if r.name == "toolmeter" and not r.error), None)
    best_accept = _best_peer(results, lambda r: r.accept_rate)
    best_e2e = _best_peer(results, lambda r: r.e2e_rate)
    if own is None or best_accept is None:
        return "Target not evaluated: toolmeter or both peers did not complete."
    accept = own.accept_rate or 0.0
    e2e = own.e2e_rate or 0.0
    parts = [
        f"accept >= faster peer: {'met' if accept >= best_accept else 'missed'} ({accept / best_accept:.2f}x)",
    ]
    if best_e2e:
        parts.append(
            f"queryable >= 50x faster peer: {'met' if e2e >= 50 * best_e2e else 'missed'} ({e2e / best_e2e:.2f}x)"
        )
    return "Target: " + "; ".join(parts) + "."


COMPARISON = """\
What the peers record that toolmeter does not (checked in the installed sources):
- Phoenix: every span with all its attributes (JSON in SQLite) and events, a trace/span tree
  UI, sessions, annotations and evaluations (phoenix-evals, LLM-as-judge), datasets and
  experiments, a prompt playground and prompt management, and LLM cost tracking
  (token counts x model prices). Token counts are read from what the LLM span reports
  (llm.token_count.*, gen_ai.usage.*, translated to OpenInference): nothing tokenizes a tool
  span's output.value; a tool result is stored as text and counts 0 tokens.
- MLflow: every span as JSON in its `spans` table, traces with request/response previews,
  linked to experiments and runs, assessments/feedback and GenAI evaluation (scorers,
  judges), a prompt registry, the model registry, and LLM token usage (as reported by the
  span) with a cost computed from it and model prices, summed per trace. Its
  `token_count` metric (tiktoken cl100k_base) belongs to model evaluation over predictions,
  not to stored tool spans: a tool span's result gets no token count.
- Both answer questions about LLM calls (latency, tokens the provider billed, cost,
  quality scores) and keep the raw payloads for inspection.

What toolmeter records that neither does:
- exact tiktoken counts (o200k_base or cl100k_base) and bytes of every tool result, raw and
  view (what the model was shown), measured at ingest;
- truncation (how, and which byte ranges of the raw were kept), per-tool budgets and
  over-budget calls;
- result shape and a JSON-schema fingerprint, to tie envelope growth to a field;
- window cost: view tokens x the LLM calls later in the same trace; p99-first ranking of
  tools; alert rules and webhooks; secrets masked in payloads before they are stored.
It keeps tool payloads for replay (capped at 1 MiB, head and tail beyond) but reads LLM
spans only to count the calls after each tool call: no LLM latency, billed tokens or cost,
no evaluation or prompt management, and its views are of tool calls, not of span trees.

Acknowledgement semantics differ: toolmeter answers after the request is fsync-ed to its
spool; Phoenix after decoding, with spans queued in memory (503 when its queue is full);
MLflow after the spans are committed to its store, so its queryable time follows its ack."""


def report(results: list[Result], workload: Workload, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "spans": workload.spans,
        "spans_per_request": SPANS_PER_REQUEST,
        "client_threads": CLIENT_THREADS,
        "request_mb": workload.request_bytes / 1e6,
        "result_mb": workload.result_bytes / 1e6,
        "mlflow_workers": args.mlflow_workers,
        "timeout_s": args.timeout,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "results": [
            asdict(r)
            | {"accept_spans_s": r.accept_rate, "e2e_spans_s": r.e2e_rate, "spans_per_cpu_s": r.spans_per_cpu_s}
            for r in results
        ],
    }


# --- main -----------------------------------------------------------------------------------


def make_servers(names: list[str], workdir: Path, args: argparse.Namespace) -> Iterator[Server | Result]:
    """The servers to measure, or a failed Result for a peer that could not be installed."""
    peers = {"phoenix": PeerEnv("phoenix", "arize-phoenix", "phoenix"), "mlflow": PeerEnv("mlflow", "mlflow", "mlflow")}
    for name in names:
        sub = workdir / name
        sub.mkdir()
        if name == "toolmeter":
            yield Toolmeter(sub)
            continue
        peer = peers[name]
        try:
            peer.ensure(args.reinstall)
        except Exception as e:
            print(f"  {name}: could not be installed: {e}")
            yield Result(name=name, error=f"install failed: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        yield Phoenix(sub, peer) if name == "phoenix" else MLflow(sub, peer, args.mlflow_workers)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--spans", type=int, default=20_000, help="tool spans to send to each server")
    parser.add_argument("--only", default="toolmeter,phoenix,mlflow", help="comma-separated servers to run")
    parser.add_argument("--reinstall", action="store_true", help="recreate the peers' virtual environments")
    parser.add_argument("--mlflow-workers", type=int, default=1, help="`mlflow server --workers`")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every span to be queryable")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (stores and server logs)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    stop_servers_on_signals()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(names) - {"toolmeter", "phoenix", "mlflow"}
    if unknown:
        raise SystemExit(f"unknown server(s): {', '.join(sorted(unknown))}")
    workdir = Path(tempfile.mkdtemp(prefix="toolmeter-bench-peers-"))
    results: list[Result] = []
    workload: Workload | None = None
    try:
        for item in make_servers(names, workdir, args):
            if isinstance(item, Result):
                results.append(item)
                continue
            workload = build_workload(args.spans)  # fresh trace and span ids for every server
            print(f"{item.name}: starting (log: {item.log_path})", flush=True)
            result = measure(item, workload, args.timeout)
            if item.peer is not None:
                result.install_s, result.installed_now = item.peer.install_s, item.peer.installed_now
            results.append(result)
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    workload = workload or build_workload(args.spans)
    print()
    print(f"{args.spans:,} tool spans (~{workload.result_bytes / args.spans / 1000:.1f} KB result each, "
          f"{workload.request_bytes / 1e6:.1f} MB of OTLP protobuf), {SPANS_PER_REQUEST} spans per request, "
          f"{CLIENT_THREADS} client threads, loopback; RSS = whole server process tree")  # fmt: skip
    print()
    print(table(results))
    print()
    for r in results:
        extra = [f"query: {r.query_path}"] if r.query_path else []
        if r.install_s is not None:
            extra.append(f"install {r.install_s:.0f} s{' (this run)' if r.installed_now else ' (earlier run)'}")
        if r.startup_s is not None:
            extra.append(f"ready {r.startup_s:.1f} s after start")
        if r.load_avg:
            extra.append(f"1-min load average {r.load_avg[0]} before sending, {r.load_avg[1]} at the end")
        print(f"- {r.name}: " + "; ".join(extra + r.notes))
    print()
    print(verdict(results))
    print()
    print(COMPARISON)
    if args.json:
        args.json.write_text(json.dumps(report(results, workload, args), indent=2))
        print(f"\nwrote {args.json}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
