"""The OpenTelemetry JavaScript SDK's OTLP exporters (JSON and protobuf), run under Node, into `toolmeter serve`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from collector.store.database import read_connection
from tests.collector.conftest import TOKEN
from tests.conftest import NODE, node_project

JS = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture(scope="module")
def js_agent() -> Path:
    return node_project(JS, "@opentelemetry/sdk-trace-base") / "agent.js"


@pytest.mark.parametrize("mode", ["json", "proto"])
def test_js_sdk_exporter(mode: str, js_agent: Path, serve, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    r = serve(token=TOKEN)
    out = subprocess.run([NODE, str(js_agent), r.url, mode, TOKEN], capture_output=True, text=True, timeout=120)  # type: ignore[list-item]
    assert out.returncode == 0, out.stderr
    results = json.loads(out.stdout)
    assert r.receiver.flush()
    with read_connection(db_path) as con:
        rows = con.execute(
            "SELECT tool_name, tool_call_id, raw_bytes, raw_tokens, later_llm_calls, service_name FROM tool_calls ORDER BY tool_call_id"
        ).fetchall()
        llm = con.execute("SELECT count(*), max(input_tokens) FROM llm_calls").fetchone()
    assert [(n, c) for n, c, *_ in rows] == [("lookup_rows", f"call_{i}") for i in range(3)]
    assert [b for _, _, b, *_ in rows] == [len(x.encode()) for x in results]
    assert [t for _, _, _, t, *_ in rows] == [counter.count(x).tokens for x in results]
    assert [later for *_, later, _ in rows] == [3, 2, 1]
    assert {s for *_, s in rows} == {f"js-agent-{mode}"}
    assert llm == (4, 3000)
