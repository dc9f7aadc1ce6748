"""`toolmeter doctor`: coverage per service and dialect, on a store built by `toolmeter ingest`."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from collector.cli import main
from collector.query.coverage import HINTS, KEYS, coverage
from collector.query.ranking import Filters
from collector.store.database import read_connection

T0 = 1_763_800_000_000_000_000
GENAI_SETTING = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ROWS = ("alpha beta gamma delta epsilon", "one two three four five six seven")
LANGCHAIN = json.dumps({"type": "tool", "data": {"content": "order 7 shipped", "type": "tool", "tool_call_id": "lc_1"}})


def attr(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def span(trace: str, i: int, name: str, kind: int = 1, **attrs: object) -> dict[str, Any]:
    start = T0 + i * 1_000_000_000
    return {
        "traceId": trace, "spanId": f"{int(trace[:4], 16):04x}{i:012x}", "name": name, "kind": kind,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5_000_000),
        "attributes": [attr(k, v) for k, v in attrs.items()], "status": {"code": 1},
    }  # fmt: skip


def tool(
    trace: str, i: int, name: str = "lookup", call_id: str | None = None, result: str | None = None
) -> dict[str, Any]:
    attrs: dict[str, object] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    return span(trace, i, f"execute_tool {name}", **attrs)


def chat(trace: str, i: int, responses: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    """An LLM call; ``responses`` are (call id, tool name, text) the model is given back."""
    attrs: dict[str, object] = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 500}
    if responses:
        messages = [{"role": "user", "parts": [{"type": "text", "content": "go"}]}]
        messages.append({"role": "assistant", "parts": [
            {"type": "tool_call", "id": cid, "name": name, "arguments": {}} for cid, name, _ in responses]})  # fmt: skip
        messages += [{"role": "tool", "parts": [{"type": "tool_call_response", "id": cid, "response": text}]}
                     for cid, _, text in responses]  # fmt: skip
        attrs["gen_ai.input.messages"] = json.dumps(messages)
    return span(trace, i, "chat gpt-4o", kind=3, **attrs)


def oi_tool(trace: str, i: int, output: str) -> dict[str, Any]:
    return span(
        trace, i, "lookup", **{"openinference.span.kind": "TOOL", "tool.name": "lookup", "output.value": output}
    )


def resource(service: str, *spans: dict[str, Any]) -> dict[str, Any]:
    return {"resource": {"attributes": [attr("service.name", service)]},
            "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}  # fmt: skip


def trace_id(n: int) -> str:
    return f"{n:04x}" + "ab" * 14


@pytest.fixture
def store(tmp_path: Path, db_path: str) -> str:
    a, b, c, d, e, f = (trace_id(n) for n in range(1, 7))
    doc = {
        "resourceSpans": [
            # everything: results, call ids, and the next model call's input messages
            resource(
                "full-agent",
                tool(a, 1, call_id="c1", result=ROWS[0]),
                tool(a, 2, call_id="c2", result=ROWS[1]),
                chat(a, 3, [("c1", "lookup", ROWS[0]), ("c2", "lookup", ROWS[1][:9])]),
            ),
            # content capture off: call ids, no results, model calls without messages
            resource("bare-agent", tool(b, 1, call_id="b1"), tool(b, 2, call_id="b2"), chat(b, 3), chat(b, 4)),
            # OpenInference results, no call ids, no model calls
            resource("oi-agent", oi_tool(c, 1, "plain result text"), oi_tool(c, 2, "another result")),
            # a LangChain ToolMessage envelope around the result
            resource("wrapped-agent", oi_tool(d, 1, LANGCHAIN)),
            # id-less call with no result, joined to the model's input by order alone
            resource("order-agent", tool(e, 1, name="get_status"), chat(e, 2, [("o1", "get_status", "shipped")])),
            # no tool span at all: the call is known only from the model's input
            resource("msgs-agent", chat(f, 2, [("m1", "get_status", "delivered")])),
        ]
    }
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(doc))
    assert main(["ingest", str(path), "--db", db_path, "--quiet"]) == 0
    return db_path


def doctor_json(db: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    capsys.readouterr()
    assert main(["doctor", "--db", db, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(list(r) == list(KEYS) for r in rows)
    return {r["service"]: r for r in rows}


def has(row: dict[str, Any], text: str) -> bool:
    return any(text in h for h in row["hints"])


def test_full_coverage_has_no_hints(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["full-agent"]
    assert row["dialect"] == "gen_ai" and row["calls"] == 2 and row["llm_calls"] == 1
    assert (row["raw_rate"], row["view_rate"], row["call_id_rate"]) == (1.0, 1.0, 1.0)
    assert (row["joined_by_call_id"], row["joined_by_order_content"], row["joined_by_order"]) == (2, 0, 0)
    assert row["from_messages"] == 0 and row["envelopes_removed"] == 0
    assert row["hints"] == []


def test_content_capture_off_names_the_genai_setting(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["bare-agent"]
    assert (row["calls"], row["llm_calls"]) == (2, 2)
    assert (row["raw_rate"], row["view_rate"], row["call_id_rate"]) == (0.0, 0.0, 1.0)
    assert has(row, GENAI_SETTING)
    assert not has(row, "no call id") and not has(row, "OPENINFERENCE") and not has(row, "No LLM calls")


def test_openinference_without_views_or_ids(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["oi-agent"]
    assert row["dialect"] == "openinference" and row["calls"] == 2 and row["llm_calls"] == 0
    assert (row["raw_rate"], row["view_rate"], row["call_id_rate"]) == (1.0, 0.0, 0.0)
    assert row["no_view_no_call_id"] == 2
    assert has(row, "2 call(s) have no view and no call id") and has(row, "No LLM calls recorded")
    assert not has(row, "OPENINFERENCE_HIDE")  # no model call to read views from: that comes first
    assert not has(row, GENAI_SETTING)


def test_openinference_hint_when_model_calls_carry_no_messages(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    t = trace_id(8)
    llm = span(t, 3, "ChatCompletion", kind=3, **{"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o"})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"resourceSpans": [resource("oi-hidden", oi_tool(t, 1, "result"), llm)]}))
    assert main(["ingest", str(path), "--db", db_path, "--quiet"]) == 0
    row = doctor_json(db_path, capsys)["oi-hidden"]
    assert (row["raw_rate"], row["view_rate"], row["llm_calls"]) == (1.0, 0.0, 1)
    assert has(row, "OPENINFERENCE_HIDE_INPUT_MESSAGES") and not has(row, "OPENINFERENCE_HIDE_OUTPUTS")
    assert not has(row, "No LLM calls recorded")


def test_envelopes_removed_and_their_overhead(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["wrapped-agent"]
    assert row["envelopes_removed"] == 1 and row["wrapper_tokens"] > 0
    assert row["envelope_kinds"] == ["langchain_message"]
    assert row["call_id_rate"] == 1.0  # the envelope carried the call id


def test_order_only_joins_are_called_out(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["order-agent"]
    assert (row["calls"], row["joined_by_order"], row["joined_by_order_rate"], row["view_rate"]) == (1, 1, 1.0, 1.0)
    assert has(row, "1 view(s) (100%) joined by order only")
    assert not has(row, GENAI_SETTING)


def test_calls_known_only_from_messages(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    row = doctor_json(store, capsys)["msgs-agent"]
    assert (row["calls"], row["from_messages"], row["view_rate"], row["llm_calls"]) == (1, 1, 1.0, 1)
    assert row["raw_rate"] == 0.0 and row["raw_missing"] == 0  # its raw is the message, not the tool's
    assert has(row, "1 call(s) recorded from the model's input messages")
    assert not has(row, GENAI_SETTING)


def test_human_table_and_hints(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["doctor", "--db", store]) == 0
    out = capsys.readouterr().out
    table, hints = out.split("hints (only where a gap exists):")
    lines = {line.split()[0]: line.split() for line in table.splitlines() if line.endswith(tuple("0123456789"))}
    assert lines["full-agent"][1:7] == ["gen_ai", "2", "100%", "100%", "100%", "2/0/0"]
    assert lines["bare-agent"][1:7] == ["gen_ai", "2", "0%", "0%", "100%", "0/0/0"]
    assert lines["wrapped-agent"][8] == "1" and lines["wrapped-agent"][9].startswith("(+")
    assert "full-agent" not in hints and "bare-agent / gen_ai:" in hints and GENAI_SETTING in hints
    assert hints.count("GenAI instrumentations gate content") == 1  # once, though raw and view are both missing


def test_filters_apply_to_tool_and_llm_calls(store: str) -> None:
    with read_connection(store) as con:
        rows = coverage(con, Filters(services=("bare-agent",)))
        assert [(r["service"], r["calls"], r["llm_calls"]) for r in rows] == [("bare-agent", 2, 2)]
        assert coverage(con, Filters(since=datetime(2030, 1, 1))) == []


def test_llm_calls_without_tool_calls(tmp_path: Path, db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"resourceSpans": [resource("chat-only", chat(trace_id(9), 1))]}))
    assert main(["ingest", str(path), "--db", db_path, "--quiet"]) == 0
    row = doctor_json(db_path, capsys)["chat-only"]
    assert (row["calls"], row["llm_calls"], row["raw_rate"]) == (0, 1, None)
    assert has(row, "LLM calls but no tool calls")


def test_every_hint_names_a_gap_it_is_shown_for() -> None:
    gaps = {"raw", "view", "no_call_id", "order", "messages", "raw_cut", "attributes_dropped", "no_llm_calls",
            "no_tool_calls"}  # fmt: skip
    assert {h.gap for h in HINTS} <= gaps


def test_missing_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--db", str(tmp_path / "nothing.duckdb")]) == 2
    assert "no toolmeter store at" in capsys.readouterr().err


def test_not_a_toolmeter_store_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = str(tmp_path / "other.duckdb")
    duckdb.connect(other).execute("CREATE TABLE t (a INTEGER)").close()
    assert main(["doctor", "--db", other, "--json"]) == 2
    assert "is not a toolmeter store" in capsys.readouterr().err
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert main(["doctor", "--db", str(text)]) == 2
    assert "toolmeter store" in capsys.readouterr().err


def test_raw_cut_at_the_attribute_limit(tmp_path: Path, db_path: str, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "20")
    t = trace_id(7)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"resourceSpans": [resource(
        "cut-agent", tool(t, 1, call_id="k1", result="x" * 20), tool(t, 2, call_id="k2", result="short"))]}))  # fmt: skip
    assert main(["ingest", str(path), "--db", db_path, "--quiet"]) == 0
    row = doctor_json(db_path, capsys)["cut-agent"]
    assert row["raw_cut"] == 1 and row["attributes_dropped"] == 0
    assert has(row, "1 raw result(s) cut at OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
