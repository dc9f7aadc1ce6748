"""Trace files as other projects publish them: ReadableSpan.to_json() variants, and files toolmeter cannot read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from collector.store.database import read_connection

RESULT = "\n".join(f"2026-11-20T10:00:{i % 60:02d}Z INFO line {i}" for i in range(200))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "collector", *args], capture_output=True, text=True, timeout=120)


def test_to_json_wrappers_decimal_ids_integer_times_and_parent_objects(tmp_path: Path, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    trace = 0x5B8AA5A2D2C872E8321CF37308D69DF2
    spans = [
        {"name": "execute_tool fetch_logs", "trace_id": trace, "span_id": 0x051581BF3BB55C45,
         "parent": {"trace_id": trace, "span_id": 0x6E0C63257DE34C92, "is_remote": False},
         "start_time": 1_763_632_800_000_000_000, "end_time": 1_763_632_800_200_000_000,
         "status": {"status_code": "OK"}, "kind": "SpanKind.INTERNAL",
         "attributes": {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch_logs",
                        "gen_ai.tool.call.id": "call_1", "gen_ai.tool.call.result": RESULT},
         "resource": {"attributes": {"service.name": "published"}}},
        {"name": "call_llm", "context": {"trace_id": f"{trace:032x}", "span_id": str(0x1111111111111111)},
         "parent_id": None, "start_time": "2025-11-20T10:00:01.000000Z", "end_time": "2025-11-20T10:00:02Z",
         "attributes": {"gen_ai.operation.name": "call_llm", "gen_ai.usage.input_tokens": 900}},
    ]  # fmt: skip
    path = tmp_path / "published.json"
    path.write_text(json.dumps({"spans": spans}, indent=2))
    out = cli("ingest", str(path), "--db", db_path)
    assert out.returncode == 0, out.stderr + out.stdout
    with read_connection(db_path) as con:
        row = con.execute(
            "SELECT tool_name, tool_call_id, parent_span_id, raw_tokens, start_ns, service_name, later_llm_calls "
            "FROM tool_calls"
        ).fetchone()
        llm = con.execute("SELECT span_id, input_tokens FROM llm_calls").fetchone()
    assert row == ("fetch_logs", "call_1", "6e0c63257de34c92", counter.count(RESULT).tokens,
                   1_763_632_800_000_000_000, "published", 1)  # fmt: skip
    assert llm == ("1111111111111111", 900)
    # a bare JSON array of the same objects reads the same
    path.write_text(json.dumps(spans))
    assert cli("ingest", str(path), "--db", str(tmp_path / "b.duckdb")).returncode == 0


def test_a_file_toolmeter_cannot_read_names_it_and_fails(tmp_path: Path, db_path: str) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"data": [{"id": 1}], "version": 2}))
    out = cli("ingest", str(path), "--db", db_path)
    assert out.returncode == 1
    text = out.stdout + out.stderr
    assert "other.json" in text and "resourceSpans" in text and "to_json" in text
