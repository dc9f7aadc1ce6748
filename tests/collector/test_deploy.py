"""deploy/: the systemd unit and the Kubernetes manifest parse, and the command line each one runs
starts a receiver that takes spans, answers its health probe, and stops cleanly on SIGTERM."""

from __future__ import annotations

import configparser
import json
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest
import yaml  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "toolmeter.service")
    return parser


def deployment() -> dict:  # type: ignore[type-arg]
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text()))
    assert {d["kind"] for d in docs} == {"Secret", "PersistentVolumeClaim", "Deployment", "Service"}
    return next(d for d in docs if d["kind"] == "Deployment")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(argv: list[str], db: str) -> list[str]:
    """The same command line, on loopback, free ports and a store under the test's folder."""
    out = list(argv)
    for flag, value in (("--host", "127.0.0.1"), ("--port", str(_free_port())), ("--grpc-port", str(_free_port())),
                        ("--db", db)):  # fmt: skip
        out[out.index(flag) + 1] = value
    return out


def _stored_soon(db: str) -> None:
    """Wait until the receiver has written the span (it holds the file only while it writes)."""
    from collector.store.database import read_connection

    for _ in range(600):
        try:
            with read_connection(db, wait_s=5) as con:
                if con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]:  # type: ignore[index]
                    return
        except Exception:  # not created yet
            pass
        time.sleep(0.1)
    raise AssertionError("the receiver did not store the span within a minute")


def run_and_stop(argv: list[str], tmp_path: Path, stop_timeout: float) -> list[tuple[str, int]]:
    """Start ``toolmeter ARGS``, send one tool span, stop it with SIGTERM; the calls stored."""
    db = str(tmp_path / "store.duckdb")
    args = _local(argv, db)
    build_parser().parse_args(args)  # every flag is one serve takes
    port = args[args.index("--port") + 1]
    proc = subprocess.Popen([sys.executable, "-m", "collector", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        health = None
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    health = json.loads(r.read())
                break
            except OSError:
                time.sleep(0.1)
        assert health is not None and health["status"] == "ok", proc.stdout.read1().decode() if proc.stdout else ""
        provider = TracerProvider(resource=Resource.create({"service.name": "deployed-agent"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces"))
        )
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup",
            "gen_ai.tool.call.result": "ok " * 40,
        }
        with provider.get_tracer("t").start_as_current_span("execute_tool lookup", attributes=attrs):
            pass
        provider.shutdown()
        _stored_soon(db)
        proc.send_signal(signal.SIGTERM)  # what systemd and the kubelet send
        try:
            code = proc.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # serve prints every thread's stack
            time.sleep(2)
            proc.kill()
            output = proc.communicate(timeout=30)[0].decode(errors="replace")
            raise AssertionError(
                f"serve did not stop within {stop_timeout:.0f} s of SIGTERM:\n{output[-20000:]}"
            ) from None
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
    with duckdb.connect(db, read_only=True) as con:
        return [(r[0], r[1]) for r in con.execute("SELECT tool_name, raw_tokens FROM tool_calls").fetchall()]


def test_the_systemd_unit_restarts_always_and_its_command_line_serves(tmp_path: Path) -> None:
    service = unit()["Service"]
    assert service["Restart"] == "always" and service["KillSignal"] == "SIGTERM"
    argv = shlex.split(service["ExecStart"])
    assert argv[0] == "/opt/toolmeter/bin/toolmeter" and argv[1] == "serve"
    assert service["ReadWritePaths"] in argv[argv.index("--db") + 1]  # the store is where it may write
    stored = run_and_stop(argv[1:], tmp_path, float(service["TimeoutStopSec"]))
    assert [name for name, _ in stored] == ["lookup"] and stored[0][1] > 0


def test_the_kubernetes_deployment_probes_health_and_its_command_line_serves(tmp_path: Path) -> None:
    d = deployment()
    pod = d["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["restartPolicy"] == "Always" and d["spec"]["strategy"]["type"] == "Recreate"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    args = container["args"]
    assert args[:2] == ["toolmeter", "serve"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert args[args.index("--db") + 1].startswith(mount + "/")  # the store is on the volume
    stored = run_and_stop(args[1:], tmp_path, float(pod["terminationGracePeriodSeconds"]))
    assert [name for name, _ in stored] == ["lookup"]


@pytest.mark.parametrize("where", ["unit", "manifest"])
def test_the_ports_agents_are_told_are_the_ones_served(where: str) -> None:
    if where == "unit":
        argv = shlex.split(unit()["Service"]["ExecStart"])
    else:
        argv = deployment()["spec"]["template"]["spec"]["containers"][0]["args"]
    assert argv[argv.index("--port") + 1] == "4318" and argv[argv.index("--grpc-port") + 1] == "4317"
