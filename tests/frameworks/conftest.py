"""Real agent frameworks, each in its own virtual environment, exporting OTLP to a live receiver.

Each framework's packages are pinned in a ``fw-*`` extra of ``pyproject.toml``; the first
test that needs one builds ``.venv-frameworks/<extra>`` from that list (a stamp of the list
makes later runs reuse it). A driver script (``drivers/``) runs the framework's own agent
loop against :class:`FakeOpenAI` on 127.0.0.1 (or the framework's own test model) and
exports with the framework's own instrumentation to a recorder on 127.0.0.1, which keeps
every OTLP request body and forwards it unchanged to ``toolmeter serve`` (in this process).

``CAPTURE_FRAMEWORK_TRACES=1`` also writes the bodies to ``traces/<name>.otlp.json.gz``: traces
as the framework emitted them, replayed by the unit tests without the framework installed.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import subprocess
import sys
import threading
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.config import CollectorConfig
from collector.serve.receiver import ReceiverConfig, RunningReceiver
from tests.frameworks.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DRIVERS = HERE / "drivers"
TRACES = HERE / "traces"
VENVS = ROOT / ".venv-frameworks"


def extra_requirements(extra: str) -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    if extra not in extras:
        raise KeyError(f"pyproject.toml has no optional dependency group {extra!r}")
    return list(extras[extra])


def framework_python(extra: str, with_toolmeter: bool = False) -> Path:
    """The python of a venv holding exactly the pinned packages of ``extra`` (built once), and
    toolmeter itself (editable, as ``pip install -e``) when ``with_toolmeter``."""
    reqs = extra_requirements(extra)
    venv = VENVS / extra
    stamp = venv / ".requirements"
    # toolmeter's own metadata (its dependencies, entry points) is part of what the venv holds
    own = (ROOT / "pyproject.toml").read_text() if with_toolmeter else ""
    want = hashlib.sha256(("\n".join(reqs) + own).encode()).hexdigest()
    python = venv / "bin" / "python"
    if stamp.exists() and stamp.read_text() == want and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *reqs], check=True, timeout=1800)
    if with_toolmeter:
        subprocess.run([*pip, "-e", str(ROOT)], check=True, timeout=1800)
    stamp.write_text(want)
    return python


def _read_chunked(rfile: Any) -> bytes:
    """A ``Transfer-Encoding: chunked`` request body (what Node's OTLP/HTTP exporters always send)."""
    out = bytearray()
    while size := int(rfile.readline().split(b";")[0].strip() or b"0", 16):
        out += rfile.read(size)
        rfile.readline()  # the CRLF ending the chunk
    while rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers, up to the blank line
        pass
    return bytes(out)


@dataclass
class Recorder:
    """Keeps every OTLP request and forwards it, byte for byte, to the receiver."""

    target: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():  # Node's OTLP exporters
                    body = _read_chunked(self.rfile)
                else:
                    body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "content-encoding")}
                rec.bodies.append({"path": self.path, "headers": headers, "body": base64.b64encode(body).decode()})
                req = urllib.request.Request(rec.target + self.path, data=body, headers=headers, method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=60) as resp:
                        code, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
                except urllib.error.HTTPError as e:
                    code, data, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
                rec.statuses.append(code)
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-recorder", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def save(self, name: str) -> Path:
        TRACES.mkdir(exist_ok=True)
        path = TRACES / f"{name}.otlp.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as f:
            json.dump(self.bodies, f)
        return path


@dataclass
class Run:
    """What one driver run left: the tools' results, the model's requests, the store."""

    name: str
    db: str
    returned: dict[str, list[str]]
    extra: dict[str, Any]
    model_requests: list[dict[str, Any]]
    receiver: RunningReceiver
    stdout: str
    usages: list[dict[str, Any]] = field(default_factory=list)
    """The usage the fake model reported for each chat completion, in order."""


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    yield fake
    fake.stop()


@pytest.fixture
def run_agent(tmp_path: Path, fake_openai: FakeOpenAI) -> Iterator[Any]:
    """``run_agent(argv, name, env=...)``: run an agent program into a fresh store; returns a :class:`Run`.

    The program gets the OTLP endpoint (the recorder), the fake model's URL and key, and
    ``TOOLMETER_FW_RESULTS`` (where it writes what its tools returned) in its environment.
    """
    started: list[tuple[RunningReceiver, Recorder]] = []

    def run(argv: list[str], name: str, env: dict[str, str] | None = None, timeout: float = 300,
            fake: FakeOpenAI | None = None) -> Run:  # fmt: skip
        db = str(tmp_path / f"{name}.duckdb")
        receiver = RunningReceiver(CollectorConfig(db=db, flush_interval=0.1),
                                   ReceiverConfig(host="127.0.0.1", port=0, grpc_port=None))  # fmt: skip
        recorder = Recorder(receiver.url)
        started.append((receiver, recorder))
        model = fake or fake_openai
        results = tmp_path / f"{name}.results.json"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLMETER_", "OPENAI_"))}
        child_env.update({
            "OTEL_EXPORTER_OTLP_ENDPOINT": recorder.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": name,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BLRP_SCHEDULE_DELAY": "100",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_BASE": model.base_url,
            "OPENAI_API_KEY": "sk-test-not-a-real-key",
            "TOOLMETER_FW_RESULTS": str(results),
            "PYTHONPATH": str(DRIVERS),
            # nothing may reach the internet: frameworks' own telemetry and downloads off
            "DO_NOT_TRACK": "1",
            "LANGCHAIN_TRACING_V2": "false",
            "CREWAI_DISABLE_TELEMETRY": "true",
            "OTEL_SDK_DISABLED": "false",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HF_HUB_OFFLINE": "1",
            "ANONYMIZED_TELEMETRY": "False",
            **(env or {}),
        })  # fmt: skip
        out = subprocess.run(argv, env=child_env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
        assert out.returncode == 0, f"{name} failed:\n{out.stdout[-4000:]}\n{out.stderr[-8000:]}"
        assert receiver.receiver.flush()
        assert recorder.statuses and all(s == 200 for s in recorder.statuses), recorder.statuses
        if os.environ.get("CAPTURE_FRAMEWORK_TRACES"):
            recorder.save(name)
        data = json.loads(results.read_text())
        return Run(
            name, db, data.pop("returned"), data, model.chat_requests(), receiver, out.stdout, list(model.usages)
        )

    yield run
    for receiver, recorder in started:
        recorder.stop()
        receiver.stop()


@pytest.fixture
def run_framework(run_agent: Any) -> Any:
    """``run_framework(extra, driver, name=..., env=...)``: a Python driver in the venv of ``extra``."""

    def run(extra: str, driver: str, name: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 300, fake: FakeOpenAI | None = None) -> Run:  # fmt: skip
        python = framework_python(extra)
        return run_agent([str(python), str(DRIVERS / driver)], name or Path(driver).stem, env, timeout, fake)  # type: ignore[no-any-return]

    return run
