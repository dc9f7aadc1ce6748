"""Shared fixtures: a clean environment, a store path, a local tracer provider, real payloads."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
REALWORLD = Path(os.environ.get("TOOLMETER_REALWORLD", ROOT.parent / "shared" / "realworld" / "payloads"))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if (name.startswith("TOOLMETER_") and name != "TOOLMETER_REALWORLD") or name.startswith("OTEL_"):
            monkeypatch.delenv(name, raising=False)
    # a failure toolmeter would swallow on the agent's thread fails the test instead; the tests of
    # that containment itself turn it off (the `contained` fixture)
    monkeypatch.setenv("TOOLMETER_STRICT", "1")
    # the tests' traces carry fixed dates, which a receiver's default retention (30 days from
    # now) would remove as they age; tests of retention give their own
    monkeypatch.setenv("TOOLMETER_RETAIN", "forever")
    monkeypatch.setenv("TOOLMETER_RETAIN_PAYLOADS", "forever")


@pytest.fixture
def contained(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failures on the agent's thread are logged and contained, as in production."""
    monkeypatch.delenv("TOOLMETER_STRICT", raising=False)


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "toolmeter.duckdb")


@pytest.fixture(scope="session", params=["quicktok", "tiktoken"])
def counter(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Each exactness test runs with both counters: the fast one and tiktoken, the reference."""
    from collector.measure.tokens import TokenCounter

    return TokenCounter("o200k_base", request.param)


NODE = shutil.which("node")
NPM = shutil.which("npm")


def node_project(folder: Path, installed: str) -> Path:
    """``folder`` with its locked npm packages installed (``npm ci`` when ``node_modules/installed`` is missing).

    Node and npm come from .ci/run: under CI their absence fails the test, elsewhere it skips it.
    """
    if NODE is None or NPM is None:
        if os.environ.get("CI"):
            pytest.fail("node and npm are needed; .ci/run installs them")
        pytest.skip("node/npm not installed")
    if not (folder / "node_modules" / installed).exists():
        subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, timeout=600)
    return folder


def realworld(name: str) -> bytes:
    """A real payload from ../shared/realworld (HolmesGPT files lose their 2-line header)."""
    path = REALWORLD / name
    if not path.exists():
        pytest.skip(f"real payloads not found at {REALWORLD} (set TOOLMETER_REALWORLD)")
    data = path.read_bytes()
    if name.startswith("holmesgpt__"):
        data = data.split(b"\n", 2)[2]
    return data


def realworld_names() -> list[str]:
    return sorted(p.name for p in REALWORLD.glob("*")) if REALWORLD.exists() else []


@pytest.fixture
def provider_with(db_path: str) -> Iterator:  # type: ignore[type-arg]
    """Build a TracerProvider with a ToolResultProcessor; both shut down after the test."""
    from opentelemetry.sdk.trace import TracerProvider

    from collector import ToolResultProcessor

    made = []

    def make(**kwargs):  # type: ignore[no-untyped-def]
        processor = ToolResultProcessor(db=kwargs.pop("db", db_path), **kwargs)
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(processor)
        made.append(provider)
        return provider, processor

    yield make
    for provider in made:
        provider.shutdown()


def _is_resource_tracker(proc: Any) -> bool:
    """multiprocessing's own helper, started with the first spawned process (a receiver's
    measuring workers) and ended by the interpreter at exit: not a process a test left."""
    try:
        return "multiprocessing.resource_tracker" in " ".join(proc.cmdline())
    except Exception:
        return False


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a process a test started outlives the tests (then end it)."""
    import psutil

    left = [p for p in psutil.Process().children(recursive=True) if not _is_resource_tracker(p)]
    _, alive = psutil.wait_procs(left, timeout=5)
    if not alive:
        return
    names = []
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            names.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
            proc.kill()
    session.config.get_terminal_writer().line(
        "processes started by the tests were still running after them:\n  " + "\n  ".join(names), red=True
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
