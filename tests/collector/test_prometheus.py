"""deploy/grafana-dashboard.json against a real Prometheus (Debian's ``prometheus``) scraping a real
``toolmeter serve --metrics-port``: every panel's query runs, and its numbers agree with the store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
PROMETHEUS = shutil.which("prometheus")
# (tool, calls, of them truncated, over budget, failed) in the second wave; tokens grow with i
WAVE = [("search", 40, 10, 4, 2), ("fetch_logs", 20, 10, 0, 1), ("lookup", 10, 0, 5, 0)]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    if PROMETHEUS is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed; .ci/run installs Debian's prometheus")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    http, metrics, prom = _port(), _port(), _port()
    db = str(tmp_path / "store.duckdb")
    serve = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", str(http), "--grpc-port", "0",
         "--metrics-port", str(metrics)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: toolmeter, static_configs: [{{targets: ['127.0.0.1:{metrics}']}}]}}]\n"
    )
    prometheus = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom}"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait("the receiver", lambda: _get(f"http://127.0.0.1:{http}/healthz")["status"] == "ok")
        _wait("Prometheus", lambda: _get(f"http://127.0.0.1:{prom}/api/v1/status/runtimeinfo")["status"] == "success")
        yield {"db": db, "otlp": f"http://127.0.0.1:{http}/v1/traces", "prom": f"http://127.0.0.1:{prom}"}
    finally:
        for proc in (prometheus, serve):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _send(otlp: str, wave: str, calls: list[tuple[str, int, bool, bool, bool]]) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp)))
    tracer = provider.get_tracer("agent")
    for k, (tool, size, truncated, over, failed) in enumerate(calls):
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                 "gen_ai.tool.call.id": f"{wave}-{k}", "gen_ai.tool.call.result": "row " * size,
                                 "toolmeter.truncated": truncated, "toolmeter.budget.tokens": 10 if over else 10**6}  # fmt: skip
        with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attrs) as span:
            if failed:
                span.set_status(Status(StatusCode.ERROR, "timeout after 30s"))
    provider.shutdown()


def _query(prom: str, expr: str) -> dict[str, float]:
    body = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert body["status"] == "success", (expr, body)
    return {r["metric"].get("gen_ai_tool_name", "all"): float(r["value"][1]) for r in body["data"]["result"]}


def _calls_seen(prom: str) -> dict[str, float]:
    return _query(prom, "sum by (gen_ai_tool_name) (toolmeter_tool_calls_total)")


def test_every_dashboard_query_runs_and_agrees_with_the_store(stack: dict[str, Any]) -> None:
    prom = stack["prom"]
    # a first call per tool that is truncated, over budget and failed: every counter exists before
    # the second wave, so increase() over the range counts all of the second wave
    _send(stack["otlp"], "w1", [(tool, 20, True, True, True) for tool, *_ in WAVE])
    _wait("the first wave scraped", lambda: _calls_seen(prom) == {t: 1.0 for t, *_ in WAVE})
    # increase() extrapolates to the ends of its range: past the last sample by up to 1.1 scrape
    # intervals (1 s), and back from the first by up to a tenth of the sampled span here (the
    # counter stood at 1 before the n of the second wave). Over ~12 s of samples that is at
    # most ~1.2x; over the ~6 s that shorter waits gave, up to ~1.3x, past the 0.25 allowed
    time.sleep(5)
    second = [(tool, 50 + 30 * i, i < trunc, trunc <= i < trunc + over, i >= n - failed)
              for tool, n, trunc, over, failed in WAVE for i in range(n)]  # fmt: skip
    _send(stack["otlp"], "w2", second)
    _wait("the second wave scraped", lambda: _calls_seen(prom) == {t: 1.0 + n for t, n, *_ in WAVE})
    time.sleep(5)  # samples after the last increment (see above)

    with duckdb.connect(stack["db"], read_only=True) as con:
        store = {t: (n, tr, ob, er, p99) for t, n, tr, ob, er, p99 in con.execute(
            """SELECT tool_name, count(*), count(*) FILTER (WHERE truncated), count(*) FILTER (WHERE over_budget),
                      count(*) FILTER (WHERE status = 'error'), quantile_cont(view_tokens, 0.99)
               FROM tool_calls WHERE tool_call_id LIKE 'w2-%' GROUP BY 1""").fetchall()}  # fmt: skip
    assert {t: v[0] for t, v in store.items()} == {t: n for t, n, *_ in WAVE}

    panels = json.loads(DASHBOARD.read_text())["panels"]
    results = {}
    for p in panels:
        (target,) = p["targets"]
        expr = target["expr"].replace("$__rate_interval", "5m").replace("$__range", "5m")
        results[p["title"]] = _query(prom, expr)
    assert len(results) == len(panels) == 8

    def by_title(words: str) -> dict[str, float]:
        return next(v for k, v in results.items() if words in k)

    for tool, (n, truncated, over, errors, p99) in store.items():
        # increase() extrapolates past the first and last samples, each counter by its own slope
        # (and not below zero): shares come out within a few points, counts within a quarter
        assert by_title("Truncated share")[tool] == pytest.approx(truncated / n, abs=0.05)
        assert by_title("over budget share")[tool] == pytest.approx(over / n, abs=0.05)
        assert by_title("Error share")[tool] == pytest.approx(errors / n, abs=0.05)
        assert by_title("Tool calls")[tool] == pytest.approx(n, rel=0.25)
        # buckets at powers of two: the interpolated p99 lies within a factor of two of the exact one
        assert p99 / 2 <= by_title("p99 tokens shown")[tool] <= p99 * 2
        assert by_title("p99 tokens the tool produced")[tool] > 0 and by_title("entering the window")[tool] > 0
    assert by_title("dropped").get("all", 0.0) == 0.0
