"""`toolmeter ingest` / `top` on OTLP/JSON files: the samples, and every kind of bad input."""

import gzip
import json
from pathlib import Path

import pytest

from collector.cli import main
from collector.store.database import read_connection
from collector.store.payloads import load_payload
from tests.conftest import SAMPLE_TRACES

TOP_KEYS = {
    "tool", "calls", "view_tokens_p50", "view_tokens_p95", "view_tokens_p99", "view_tokens_max",
    "raw_tokens_p99", "truncated_rate", "over_budget_rate", "window_cost_tokens",
}  # fmt: skip


def attr(key: str, value: object) -> dict:  # type: ignore[type-arg]
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def otlp(*spans: dict) -> dict:  # type: ignore[type-arg]
    resource = {"attributes": [attr("service.name", "test-agent")]}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}


def tool(i: int, result: str, name: str | None = "lookup", trace: str = "ab" * 16, **extra: object) -> dict:  # type: ignore[type-arg]
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": result, **extra}
    if name:
        attrs["gen_ai.tool.name"] = name
    start = 1_763_800_000_000_000_000 + i * 1_000_000_000
    return {
        "traceId": trace, "spanId": f"{i:016x}", "name": f"execute_tool {name or ''}".strip(), "kind": 1,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 5_000_000),
        "attributes": [attr(k, v) for k, v in attrs.items()], "status": {"code": 1},
    }  # fmt: skip


def llm(i: int, trace: str = "ab" * 16) -> dict:  # type: ignore[type-arg]
    start = 1_763_800_000_000_000_000 + i * 1_000_000_000
    return {
        "traceId": trace, "spanId": f"{i:016x}", "name": "chat gpt-4o", "kind": 3,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1000),
        "attributes": [attr("gen_ai.operation.name", "chat"), attr("gen_ai.usage.input_tokens", 1000)],
    }  # fmt: skip


def write(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def top_json(db: str, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:  # type: ignore[type-arg]
    capsys.readouterr()
    assert main(["top", "--db", db, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_window_cost_counts_later_llm_calls(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    # a 12-word result at turn 2 of a 10-turn run is re-read by the 8 later LLM calls
    spans = [llm(1), tool(2, "one two three four five six seven eight nine ten eleven twelve")]
    spans += [llm(i) for i in range(3, 11)]
    assert main(["ingest", write(tmp_path / "t.json", otlp(*spans)), "--db", db_path]) == 0
    (row,) = top_json(db_path, capsys)
    assert set(row) >= TOP_KEYS
    assert row["view_tokens_max"] == 12 and row["window_cost_tokens"] == 12 * 8


def test_jsonl_and_gzip_files_are_read(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    lines = "\n".join(json.dumps(otlp(tool(i, f"r{i}", trace=f"{i:032x}"))) for i in range(1, 4))
    (tmp_path / "a.jsonl").write_text(lines)
    with gzip.open(tmp_path / "b.json.gz", "wt") as f:
        json.dump(otlp(tool(9, "zipped", trace="cd" * 16)), f)
    assert main(["ingest", str(tmp_path / "a.jsonl"), str(tmp_path / "b.json.gz"), "--db", db_path]) == 0
    assert top_json(db_path, capsys)[0]["calls"] == 4


def test_a_json_lines_result_holding_line_separators_json_allows_in_strings_is_read_whole(
    tmp_path: Path, db_path: str, capsys
) -> None:  # type: ignore[no-untyped-def]
    """U+2028, U+2029 and U+0085 may stand unescaped in a JSON string (JavaScript's JSON.stringify
    leaves them so): a line is cut at a newline only, and its span's result kept as sent."""
    result = "first\u2028second\u2029third\x85fourth"
    path = tmp_path / "t.jsonl"
    lines = [json.dumps(otlp(tool(1, result)), ensure_ascii=False), json.dumps(otlp(tool(2, "plain")))]
    path.write_text(lines[0] + "\r\n\n" + lines[1] + "\n", encoding="utf-8")
    assert main(["ingest", str(path), "--db", db_path]) == 0
    assert "not valid JSON" not in "".join(capsys.readouterr())
    with read_connection(db_path) as con:
        rows = con.execute("SELECT span_id, raw_bytes FROM tool_calls ORDER BY span_id").fetchall()
    assert rows == [(f"{1:016x}", len(result.encode())), (f"{2:016x}", 5)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[1] + "\n{oops\n" + lines[1] + "\n", encoding="utf-8")
    assert main(["ingest", str(bad), "--db", db_path]) == 0
    assert "line 2 is not valid JSON" in "".join(capsys.readouterr()), "lines numbered as the file has them"


def test_a_json_lines_file_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """A file's spans come as its lines are read: lines added to the file after its first span
    was read are read too (a whole-file read would not see them). Plain and gzip-compressed; a
    file of one line names its spans by the file, as a whole document does."""
    from collector.decode.files import read_file

    line = [json.dumps(otlp(tool(i, f"r{i}", trace=f"{i:032x}"))) for i in range(1, 4)]
    path = tmp_path / "t.jsonl"
    path.write_text(line[0] + "\n" + line[1] + "\n")
    issues: list = []  # type: ignore[type-arg]
    spans = read_file(str(path), issues)
    first = next(spans)
    with open(path, "a") as f:
        f.write(line[2] + "\n")
    read = [first, *spans]
    assert [(s.span_id, s.source) for s in read] == [(f"{i:016x}", f"{path}:{i}") for i in range(1, 4)]
    assert issues == []
    zipped = tmp_path / "t.jsonl.gz"
    with gzip.open(zipped, "wt") as f:
        f.write("\n".join(line) + "\n")
    assert [s.span_id for s in read_file(str(zipped), issues)] == [s.span_id for s in read]
    one = tmp_path / "one.json"
    one.write_text(line[0] + "\n\n")
    assert [s.source for s in read_file(str(one), issues)] == [str(one)]


def test_ingesting_twice_does_not_double_count(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path / "t.json", otlp(tool(1, "hello")))
    assert main(["ingest", path, "--db", db_path]) == 0
    assert main(["ingest", path, "--db", db_path]) == 0
    assert "1 already stored" in capsys.readouterr().out
    assert top_json(db_path, capsys)[0]["calls"] == 1


def test_malformed_json_names_the_file_and_position_and_other_files_still_load(
    tmp_path: Path,
    db_path: str,
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": [ {"oops" ')
    good = write(tmp_path / "good.json", otlp(tool(1, "fine")))
    assert main(["ingest", str(bad), good, "--db", db_path]) == 1
    err = capsys.readouterr().err
    assert "bad.json" in err and "line 1, column" in err
    assert top_json(db_path, capsys)[0]["calls"] == 1


def test_non_utf8_file_is_read_with_a_warning(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    data = json.dumps(otlp(tool(1, "caf\u00e9 PLACEHOLDER"))).encode().replace(b"PLACEHOLDER", b"\xff\xfe")
    (tmp_path / "latin.json").write_bytes(data)
    assert main(["ingest", str(tmp_path / "latin.json"), "--db", db_path]) == 0
    assert "not valid UTF-8" in capsys.readouterr().err
    assert top_json(db_path, capsys)[0]["calls"] == 1


def test_a_bad_span_is_named_and_the_rest_of_the_batch_is_kept(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    broken = tool(2, "x")
    broken["traceId"] = "not-hex"
    nameless = tool(3, "who am I", name=None)
    nameless["name"] = "mystery"
    nameless["attributes"].append(attr("openinference.span.kind", "TOOL"))
    doc = otlp(tool(1, "ok"), broken, nameless)
    assert main(["ingest", write(tmp_path / "t.json", doc), "--db", db_path]) == 0
    err = capsys.readouterr().err
    assert "spans[1]" in err and "traceId" in err and "the others were kept" in err
    assert "no tool name" in err and "0000000000000003" in err
    tools = {r["tool"] for r in top_json(db_path, capsys)}
    assert tools == {"lookup", "(unnamed)"}
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM ingest_issues").fetchone() == (2,)


def test_not_an_otlp_document(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["ingest", write(tmp_path / "t.json", {"traces": []}), "--db", db_path]) == 1
    assert "not a trace file toolmeter reads" in capsys.readouterr().err
    # an empty to_json() wrapper is a trace file with no spans
    assert main(["ingest", write(tmp_path / "t.json", {"spans": []}), "--db", db_path]) == 0


def test_missing_file_and_missing_store_are_one_line_errors(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["ingest", str(tmp_path / "nope.json"), "--db", db_path]) == 1
    assert "cannot read the file" in capsys.readouterr().err
    assert main(["top", "--db", str(tmp_path / "none.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "toolmeter demo" in err


# --- the sample traces -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("samples") / "samples.duckdb")
    assert main(["ingest", str(SAMPLE_TRACES), "--db", db, "--quiet"]) == 0
    return db


def test_sample_traces_rank_and_count(sample_db: str, capsys) -> None:  # type: ignore[no-untyped-def]
    ranked = top_json(sample_db, capsys)
    by_tool = {r["tool"]: r for r in ranked}
    assert {"search_orders", "get_customer_orders", "fetch_pod_logs", "fetch_webpage", "run_sql",
            "list_github_issues"} <= set(by_tool)  # fmt: skip
    assert all(set(r) >= TOP_KEYS for r in ranked)
    assert [r["view_tokens_p99"] for r in ranked] == sorted((r["view_tokens_p99"] for r in ranked), reverse=True)
    assert by_tool["fetch_pod_logs"]["truncated_rate"] > 0.9
    with read_connection(sample_db) as con:
        dialects = {r[0] for r in con.execute("SELECT DISTINCT dialect FROM tool_calls").fetchall()}
        assert {"gen_ai", "openinference", "traceloop"} <= dialects
        assert con.execute("SELECT count(*) FROM ingest_issues WHERE level = 'error'").fetchone() == (0,)


def test_sample_refund_row_is_a_retained_range(sample_db: str) -> None:
    with read_connection(sample_db) as con:
        rows = con.execute(
            """SELECT trace_id, span_id, retained_ranges FROM tool_calls
               WHERE tool_name = 'get_customer_orders' AND len(retained_ranges) = 2"""
        ).fetchall()
        assert rows
        for trace_id, span_id, ranges in rows:
            raw = load_payload(con, sample_db, trace_id, span_id, "raw")
            assert raw is not None and not raw.cut
            start, end = ranges[1]
            assert b"refund_pending" in raw.head[start:end]


def test_sample_schema_change_is_visible_in_fingerprints(sample_db: str) -> None:
    with read_connection(sample_db) as con:
        rows = con.execute(
            """SELECT schema_fingerprint, min(start_time)::DATE, bool_or(list_contains(schema_fields, '$[].raw_payload:string'))
               FROM tool_calls WHERE tool_name = 'search_orders' AND schema_fingerprint IS NOT NULL AND status <> 'error'
               GROUP BY 1 ORDER BY 2"""
        ).fetchall()
    assert len(rows) == 2
    assert str(rows[1][1]) == "2026-11-16" and rows[1][2] and not rows[0][2]


def test_demo_without_dashboard_loads_the_samples_and_prints_the_ranking(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    db = str(tmp_path / "demo.duckdb")
    assert main(["demo", "--db", db, "--no-dashboard"]) == 0
    out = capsys.readouterr().out
    assert "tool calls" in out and out.index("search_orders") < out.index("fetch_pod_logs")
    assert main(["demo", "--db", db, "--no-dashboard"]) == 0  # rebuilt, not doubled
    assert top_json(db, capsys)[0]["tool"] == "search_orders"


def test_otlp_protobuf_files_are_read(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "pb_tool",
        "gen_ai.tool.call.result": "from protobuf",
    }
    with provider.get_tracer("t").start_as_current_span("execute_tool pb_tool", attributes=attrs):
        pass
    (tmp_path / "spans.pb").write_bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())
    (tmp_path / "junk.pb").write_bytes(b"\x00\xff\x13 not protobuf")
    assert main(["ingest", str(tmp_path / "spans.pb"), str(tmp_path / "junk.pb"), "--db", db_path]) == 1
    assert "junk.pb: neither JSON nor an OTLP protobuf" in capsys.readouterr().err
    assert [r["tool"] for r in top_json(db_path, capsys)] == ["pb_tool"]


def test_console_exporter_output_is_read(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    import io

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = io.StringIO()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
    tracer = provider.get_tracer("t")
    for i in range(3):
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "console_tool",
            "gen_ai.tool.call.result": "x " * i,
        }
        with tracer.start_as_current_span("execute_tool console_tool", attributes=attrs):
            pass
    provider.shutdown()
    (tmp_path / "spans.txt").write_text(out.getvalue())
    assert main(["ingest", str(tmp_path / "spans.txt"), "--db", db_path]) == 0
    assert top_json(db_path, capsys)[0]["calls"] == 3


def test_ingest_evaluates_the_alert_rules(tmp_path: Path, db_path: str, capsys) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import SAMPLE_TRACES

    files = [str(p) for p in sorted(SAMPLE_TRACES.glob("traces-*.json.gz"))]
    assert main(["ingest", *files, "--db", db_path, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "alert: toolmeter: search_orders envelope grew" in out and "new alert(s)" in out
    assert main(["alerts", "--db", db_path, "--json"]) == 0
    assert any(a["tool_name"] == "search_orders" for a in json.loads(capsys.readouterr().out))
    # again: nothing new; and --no-alerts skips the evaluation
    assert main(["ingest", files[0], "--db", db_path, "--quiet"]) == 0
    assert "new alert" not in capsys.readouterr().out
    assert main(["ingest", files[0], "--db", str(tmp_path / "b.duckdb"), "--quiet", "--no-alerts"]) == 0
