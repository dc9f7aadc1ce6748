"""What runs on the observed agent's thread never raises into it, and toolmeter's own work is not traced."""

from __future__ import annotations

import logging
import threading

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider

from collector import measured_tool, record_tool_result
from collector.errors import ConfigError
from collector.store.database import read_connection


def test_a_bad_decorator_argument_fails_where_it_is_applied() -> None:
    with pytest.raises(ConfigError, match="budget_tokens='lots'"):
        measured_tool("t", budget_tokens="lots")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="shape='table'"):
        measured_tool("t", shape="table")


def test_a_result_that_cannot_be_recorded_does_not_fail_the_tool(provider_with, caplog, contained) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    tracer = provider.get_tracer("agent")
    circular: dict = {}  # type: ignore[type-arg]
    circular["self"] = circular

    @measured_tool("loop", tracer=tracer)
    def loop() -> dict:  # type: ignore[type-arg]
        return circular

    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        assert loop() is circular  # returned unchanged, no exception
        assert loop() is circular
    assert sum("recording the result" in r.message and "returned unchanged" in r.message
               for r in caplog.records if r.levelno == logging.WARNING) == 1  # fmt: skip
    with tracer.start_as_current_span("execute_tool direct"):
        record_tool_result(raw=circular)  # called directly: the same
    assert processor.force_flush()
    # and the stored call says why it holds no result
    with read_connection(processor.config.db) as con:
        rows = con.execute("SELECT tool_name, raw_bytes, warnings FROM tool_calls ORDER BY tool_name").fetchall()
    assert [(name, raw) for name, raw, _ in rows] == [("direct", None), ("loop", None), ("loop", None)]
    assert all(any("toolmeter.record.error" in w and "could not be recorded" in w and "ValueError" in w
                   for w in warnings) for _, _, warnings in rows), rows  # fmt: skip


def test_the_worker_runs_with_the_sdks_suppression_key(provider_with) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(flush_interval=3600)
    seen: list[object] = []
    pipeline = processor._pipeline
    original = pipeline.write  # runs on the worker thread, in the worker's context

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY))
        return original(*args, **kwargs)

    pipeline.write = spy  # type: ignore[method-assign]
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "gen_ai.tool.call.result": "ok"}
    with provider.get_tracer("agent").start_as_current_span("execute_tool t", attributes=attrs):
        pass
    assert processor.force_flush()
    assert True in seen and threading.current_thread().name != "toolmeter-worker"


def test_spans_toolmeter_sends_are_not_traced_by_an_instrumented_urllib(db_path: str, serve) -> None:  # type: ignore[no-untyped-def]
    # forwarding mode: the worker's own HTTP requests go through urllib; an instrumentation that
    # honours the suppression key (as every contrib one does) makes no span of them
    from collector import ToolResultProcessor

    r = serve()
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ToolResultProcessor(forward_to=r.url)
    provider.add_span_processor(processor)
    made: list[str] = []
    real_urlopen = __import__("urllib.request").request.urlopen

    def traced_urlopen(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not otel_context.get_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY):
            made.append("span")
        return real_urlopen(*args, **kwargs)

    import urllib.request

    urllib.request.urlopen = traced_urlopen
    try:
        with provider.get_tracer("agent").start_as_current_span(
            "execute_tool t", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                                          "gen_ai.tool.call.result": "ok"}):  # fmt: skip
            pass
        assert processor.force_flush()
    finally:
        urllib.request.urlopen = real_urlopen
        provider.shutdown()
    assert r.receiver.flush()
    with read_connection(r.receiver.pipeline.config.db) as con:
        assert con.execute("SELECT tool_name FROM tool_calls").fetchall() == [("t",)]
    assert made == []


def test_sizes_in_the_environment_take_units_and_bad_ones_name_the_variable(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from collector.cli import main
    from collector.config import CollectorConfig, parse_bytes

    assert parse_bytes("X_BYTES", "64MB") == 64 * 10**6
    assert parse_bytes("X_BYTES", "64 MiB") == 64 * 2**20
    assert parse_bytes("X_BYTES", "1048576") == 2**20
    monkeypatch.setenv("TOOLMETER_PAYLOAD_CAP_BYTES", "2MiB")
    assert CollectorConfig.resolve(db=str(tmp_path / "a.duckdb")).payload_cap_bytes == 2 * 2**20
    monkeypatch.setenv("TOOLMETER_MAX_BODY_BYTES", "lots")
    assert main(["serve", "--db", str(tmp_path / "t.duckdb"), "--port", "0", "--grpc-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "TOOLMETER_MAX_BODY_BYTES='lots' is not a size" in err and "Traceback" not in err


def test_a_fork_while_the_parking_lock_is_held_does_not_deadlock_the_child() -> None:
    import os

    from collector.agent import handoff as _payloads

    with _payloads._lock:  # another thread of the agent is parking a payload when the fork happens
        pid = os.fork()
        if pid == 0:  # the child: parking must not wait for a lock no thread will release
            got = _payloads._lock.acquire(timeout=5)
            os._exit(0 if got else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_strict_mode_raises_what_production_would_contain(provider_with) -> None:  # type: ignore[no-untyped-def]
    # the suite runs with TOOLMETER_STRICT=1: the same failure that is logged in production
    # fails the test that meets it, so a bug on the agent's thread cannot hide behind the guard
    provider, _ = provider_with(flush_interval=3600)
    circular: list[object] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):  # noqa: SIM117
        with provider.get_tracer("agent").start_as_current_span("execute_tool t") as span:
            record_tool_result(span, raw=circular)


def test_on_end_failures_are_contained_and_logged_once(provider_with, caplog, contained) -> None:  # type: ignore[no-untyped-def]
    import logging

    provider, _ = provider_with(flush_interval=3600)

    def broken(name: str, attrs: object) -> object:
        raise RuntimeError("attribute read failed")

    import collector.agent.processor as P

    original = P.classify
    P.classify = broken  # type: ignore[assignment]
    try:
        with caplog.at_level(logging.DEBUG, logger="toolmeter"):
            for _ in range(3):
                with provider.get_tracer("agent").start_as_current_span("execute_tool t"):
                    pass  # the agent's own code goes on
    finally:
        P.classify = original
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "on_end" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].exc_info
    assert sum("on_end" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) == 2


def test_forwarding_mode_never_imports_duckdb(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from collector import ToolResultProcessor\n"
        "p = ToolResultProcessor(forward_to='http://127.0.0.1:9')\n"
        "p.shutdown()\n"
        "print(sorted(m for m in ('duckdb', 'collector.store.database', 'collector.pipeline', 'pyarrow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
