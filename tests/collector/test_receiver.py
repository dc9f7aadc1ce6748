"""`toolmeter serve` with real OTLP clients on loopback: the OTel Python HTTP and gRPC exporters."""

from __future__ import annotations

import gzip
import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from collector.config import CollectorConfig
from collector.errors import StoreError
from collector.serve.receiver import Receiver, ReceiverConfig, slice_records
from collector.store.database import read_connection
from tests.collector.conftest import TOKEN
from tests.collector.test_ingest_cli import llm, otlp, tool


def agent_spans(exporter: object, n_tools: int = 3) -> list[str]:
    provider = TracerProvider(resource=Resource.create({"service.name": "py-agent"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # type: ignore[arg-type]
    tracer = provider.get_tracer("agent")
    results = []
    with tracer.start_as_current_span("invoke_agent"):
        for i in range(n_tools):
            with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                pass
            result = json.dumps([{"order": k, "status": "paid"} for k in range(50 * (i + 1))])
            results.append(result)
            attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders",
                     "gen_ai.tool.call.result": result}  # fmt: skip
            with tracer.start_as_current_span("execute_tool search_orders", attributes=attrs):
                pass
        with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
            pass
    provider.shutdown()
    return results


def stored(db: str) -> list[tuple]:  # type: ignore[type-arg]
    with read_connection(db) as con:
        return con.execute(
            "SELECT raw_bytes, raw_tokens, later_llm_calls, service_name FROM tool_calls ORDER BY raw_bytes"
        ).fetchall()


def test_python_http_protobuf_exporter(serve, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    results = agent_spans(HttpSpanExporter(endpoint=f"{r.url}/v1/traces"))
    assert r.receiver.flush()
    rows = stored(db_path)
    assert [(b, t, later) for b, t, later, _ in rows] == [
        (len(x), counter.count(x).tokens, 3 - i) for i, x in enumerate(results)
    ]
    assert {s for *_, s in rows} == {"py-agent"}


def test_python_http_exporter_with_gzip_and_token(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http import Compression

    r = serve(token=TOKEN)
    agent_spans(HttpSpanExporter(endpoint=f"{r.url}/v1/traces", compression=Compression.Gzip,
                                 headers={"Authorization": f"Bearer {TOKEN}"}))  # fmt: skip
    assert r.receiver.flush()
    assert len(stored(db_path)) == 3


def test_python_grpc_exporter(serve, db_path: str, counter) -> None:  # type: ignore[no-untyped-def]
    r = serve(token=TOKEN)
    results = agent_spans(GrpcSpanExporter(endpoint=f"127.0.0.1:{r.grpc_port}", insecure=True,
                                           headers=(("authorization", f"Bearer {TOKEN}"),)))  # fmt: skip
    assert r.receiver.flush()
    assert [t for _, t, _, _ in stored(db_path)] == [counter.count(x).tokens for x in results]


def post(url: str, body: bytes, content_type: str = "application/json", **headers: str) -> tuple[int, bytes, dict]:  # type: ignore[type-arg]
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_json_bodies_plain_and_gzip(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    doc = otlp(llm(1), tool(2, "hello world"), llm(3))
    status, body, headers = post(f"{r.url}/v1/traces", json.dumps(doc).encode())
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == {}
    doc2 = otlp(tool(5, "zipped result", trace="cd" * 16))
    status, _, _ = post(f"{r.url}/v1/traces", gzip.compress(json.dumps(doc2).encode()), **{"Content-Encoding": "gzip"})
    assert status == 200
    assert r.receiver.flush()
    assert [row[2] for row in stored(db_path)] == [1, 0]  # one LLM call after "hello world"; none in the second trace


def test_partial_success_keeps_the_good_spans(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    bad = tool(2, "x")
    bad["traceId"] = "nothex"
    status, body, _ = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "good"), bad)).encode())
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "traceId" in partial["errorMessage"]
    assert r.receiver.flush()
    assert len(stored(db_path)) == 1


def test_protobuf_response_in_the_requests_content_type(serve) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    r = serve()
    status, body, headers = post(f"{r.url}/v1/traces", ExportTraceServiceRequest().SerializeToString(),
                                 "application/x-protobuf")  # fmt: skip
    assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
    ExportTraceServiceResponse.FromString(body)


@pytest.mark.parametrize(
    ("content_type", "body", "headers", "status", "words"),
    [
        ("application/x-protobuf", b"\xff\xff\xff garbage", {}, 400, "not a protobuf"),
        ("application/json", b'{"resourceSpans": [', {}, 400, "not valid JSON"),
        ("application/json", b"\xff\xfe{}", {}, 400, "not valid UTF-8"),
        ("text/plain", b"hello", {}, 415, "unsupported content type 'text/plain'"),
        ("application/json", b"{}", {"Content-Encoding": "br"}, 415, "unsupported Content-Encoding 'br'"),
        ("application/json", b"not gzip", {"Content-Encoding": "gzip"}, 400, "body is not"),
    ],
)
def test_bad_requests_get_a_specific_status(serve, content_type, body, headers, status, words) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    got, text, _ = post(f"{r.url}/v1/traces", body, content_type, **headers)
    assert got == status
    assert words in text.decode("utf-8", "replace")
    ok, _, _ = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "still serving"))).encode())
    assert ok == 200


def test_oversized_body_gets_413_with_the_limit(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve(max_body_bytes=10_000)
    status, text, _ = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "x" * 20_000))).encode())
    assert status == 413
    assert "10,000 bytes" in text.decode() and "--max-body-bytes" in text.decode()
    bomb = gzip.compress(json.dumps(otlp(tool(1, "y" * 200_000))).encode())
    status, text, _ = post(f"{r.url}/v1/traces", bomb, **{"Content-Encoding": "gzip"})
    assert status == 413 and "inflated" in text.decode()


def test_missing_token_is_401_and_nothing_is_stored(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve(token=TOKEN)
    status, _, headers = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "secret"))).encode())
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
    status, _, _ = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "secret"))).encode(), Authorization="Bearer nope")
    assert status == 401
    assert r.receiver.flush()
    assert stored(db_path) == []


def test_full_queue_answers_503_with_retry_after(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve(max_queued_bytes=1)
    r.receiver.paused = True
    first, _, _ = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "first"))).encode())
    second, text, headers = post(f"{r.url}/v1/traces", json.dumps(otlp(tool(2, "second", trace="ee" * 16))).encode())
    assert (first, second) == (200, 503)
    assert headers["Retry-After"] == "2" and "retry" in text.decode()
    assert r.receiver.refused == 1
    r.receiver.paused = False
    assert r.receiver.flush()
    assert len(stored(db_path)) == 1
    with read_connection(db_path) as con:
        assert con.execute("SELECT sum(refused) FROM collector_stats").fetchone() == (1,)


def test_a_batch_written_in_slices_is_tried_again_from_the_slice_that_failed(
    serve, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    import collector.serve.receiver as receiver_module

    monkeypatch.setattr(receiver_module, "SLICE_BYTES", 1)  # every request a slice of its own
    r = serve()
    real = r.receiver.pipeline.write
    written: list[int] = []

    def second_fails_once(batch, queued=0):  # type: ignore[no-untyped-def]
        written.append(len(batch.tool_rows))
        if len(written) == 2:
            raise OSError("disk full")
        return real(batch, queued)

    r.receiver.pipeline.write = second_fails_once
    r.receiver.paused = True  # the three requests queue up and are exported as one batch
    for i in range(3):
        body = json.dumps(otlp(tool(i + 1, f"result {i}", trace=f"{i + 1:032x}"))).encode()
        assert post(f"{r.url}/v1/traces", body)[0] == 200
    r.receiver.paused = False
    assert r.receiver.flush(timeout_s=30)
    assert written == [1, 1, 1, 1]  # slice 1, slice 2 (failed), then slices 2 and 3 only
    assert len(stored(db_path)) == 3
    with read_connection(db_path) as con:
        assert con.execute("SELECT max(duplicates) FROM collector_stats").fetchone() == (0,)


def test_acknowledged_requests_survive_a_crash_before_they_were_written(db_path: str, tmp_path: Path) -> None:
    config = CollectorConfig(db=db_path, flush_interval=0.1)
    rc = ReceiverConfig(spool_dir=str(tmp_path / "spool"))
    crashed = Receiver(config, rc)
    crashed.paused = True  # acknowledged (spooled) but never written, as if killed here
    for i in range(5):
        crashed.accept(2, json.dumps(otlp(tool(i + 1, f"result {i}", trace=f"{i + 1:032x}"))).encode())
    assert stored(db_path) == []
    restarted = Receiver(config, rc)  # replays the spool from the position stored in DuckDB
    assert restarted.flush()
    assert len(stored(db_path)) == 5
    restarted.close()
    again = Receiver(config, rc)  # nothing left to replay: counted once
    assert again.flush()
    assert len(stored(db_path)) == 5
    again.close()


def test_forwarding_mode_measures_in_the_receiver_not_the_agent(serve, db_path: str, tmp_path: Path, counter) -> None:  # type: ignore[no-untyped-def]
    from collector import ToolResultProcessor, record_tool_result

    r = serve(token=TOKEN)
    agent_db = tmp_path / "agent-side.duckdb"
    processor = ToolResultProcessor(db=str(agent_db), forward_to=r.url, forward_token=TOKEN, flush_interval=0.1)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent")
    raw = "\n".join(f"2026-11-20T10:00:00Z INFO line {i}" for i in range(5000))
    with tracer.start_as_current_span(
        "execute_tool fetch_pod_logs", attributes={"gen_ai.operation.name": "execute_tool"}
    ) as span:
        record_tool_result(span, raw=raw, view=raw[:1000] + "\n[truncated]", truncated=True, budget_tokens=500)
    assert processor.force_flush()
    provider.shutdown()
    assert not agent_db.exists(), "no DuckDB file and no token counting in the agent's process"
    assert processor.counters["forwarded"] == 1
    assert r.receiver.flush()
    with read_connection(db_path) as con:
        row = con.execute(
            "SELECT tool_name, raw_bytes, raw_tokens, truncated, retained_ranges FROM tool_calls"
        ).fetchone()
    assert row == ("fetch_pod_logs", len(raw), counter.count(raw).tokens, True, [[0, 1000]])


def test_claude_code_log_events_over_otlp_logs(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    def record(name: str, attrs: dict[str, object], t: int) -> dict:  # type: ignore[type-arg]
        kv = [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}}
              for k, v in {"event.name": name, "session.id": "sess-1", **attrs}.items()]  # fmt: skip
        return {"timeUnixNano": str(1_764_000_000_000_000_000 + t * 1_000_000_000), "attributes": kv,
                "body": {"stringValue": f"claude_code.{name}"}}  # fmt: skip

    logs = [
        record("api_request", {"model": "claude-sonnet-4-5", "input_tokens": 1200, "output_tokens": 80, "request_id": "r1"}, 1),
        record("tool_result", {"tool_name": "Read", "success": "true", "duration_ms": 40, "tool_result_size_bytes": 48213,
                               "tool_use_id": "toolu_01"}, 2),
        record("api_request", {"model": "claude-sonnet-4-5", "input_tokens": 13200, "output_tokens": 60, "request_id": "r2"}, 3),
    ]  # fmt: skip
    doc = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "claude-code"}}]},
                             "scopeLogs": [{"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": logs}]}]}  # fmt: skip
    r = serve()
    status, _, _ = post(f"{r.url}/v1/logs", json.dumps(doc).encode())
    assert status == 200
    assert r.receiver.flush()
    with read_connection(db_path) as con:
        row = con.execute(
            "SELECT tool_name, tool_call_id, raw_bytes, raw_tokens, dialect, later_llm_calls FROM tool_calls"
        ).fetchone()
        assert con.execute("SELECT count(*) FROM llm_calls").fetchone() == (2,)
    assert row == ("Read", "toolu_01", 48213, None, "claude_code", 1)


@pytest.mark.slow
def test_a_span_with_a_100_mb_attribute(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    big = ("retry after timeout " * 5_000_000)[:100_000_000]
    body = json.dumps(otlp(tool(1, big), tool(2, "small neighbour", trace="dd" * 16))).encode()
    r = serve()
    status, text, _ = post(f"{r.url}/v1/traces", body)
    assert status == 413 and "64 MiB" not in text.decode() and "--max-body-bytes" in text.decode()
    r2 = serve(max_body_bytes=150_000_000)
    status, _, _ = post(f"{r2.url}/v1/traces", body)
    assert status == 200
    assert r2.receiver.flush(timeout_s=300)
    with read_connection(db_path) as con:
        rows = con.execute("SELECT raw_bytes, raw_tokens_exact FROM tool_calls ORDER BY raw_bytes").fetchall()
    assert rows == [(15, True), (100_000_000, True)]


def test_metrics_are_answered_counted_and_discarded(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    # the real OTLP/HTTP metric exporter, as MLflow's or an SDK's would send to the same endpoint
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    r = serve()
    exporter = OTLPMetricExporter(endpoint=f"{r.url}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("agent").create_counter("requests").add(3)
    provider.force_flush()
    provider.shutdown()
    req = urllib.request.Request(f"{r.url}/v1/metrics", data=b"{}", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    assert r.receiver.pipeline.counters.metric_requests >= 2  # flush, shutdown (may export again), ours
    with read_connection(db_path) as con:  # nothing of them is stored
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)


def test_grpc_metrics_are_answered_too(serve) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    r = serve()
    exporter = OTLPMetricExporter(endpoint=f"127.0.0.1:{r.grpc_port}", insecure=True)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("agent").create_counter("requests").add(1)
    assert provider.force_flush()
    provider.shutdown()
    assert r.receiver.pipeline.counters.metric_requests >= 1


def test_write_failures_are_logged_once_with_a_traceback_then_in_a_line(serve, db_path: str, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    r = serve()
    real = r.receiver.pipeline.write
    calls = {"n": 0}

    def flaky(batch, queued=0):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] <= 2:
            raise OSError("disk full")
        return real(batch, queued)

    r.receiver.pipeline.write = flaky
    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        assert post(f"{r.url}/v1/traces", json.dumps(otlp(tool(1, "x" * 100))).encode())[0] == 200
        assert r.receiver.flush(timeout_s=30)
    records = [rec for rec in caplog.records if "receiver" in rec.getMessage()]
    assert [bool(rec.exc_info) for rec in records] == [True, False, False]
    assert "still cannot write (2 tries)" in records[1].getMessage()
    assert "writes again after 2 failed tries" in records[2].getMessage()
    assert stored(db_path)[0][0] == 100


def test_the_receivers_check_rejects_what_decoding_rejects() -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    from collector.decode.request import PROTOBUF, check_logs, check_traces, decode_logs, decode_traces

    spans = [Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="ok"), Span(trace_id=b"t" * 3, span_id=b"s" * 8),
             Span(trace_id=b"t" * 16, span_id=b"u" * 8, start_time_unix_nano=2**64 - 1)]  # fmt: skip
    traces = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])])
    logs = ExportLogsServiceRequest(resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[
        LogRecord(time_unix_nano=1), LogRecord(time_unix_nano=2**64 - 1)])])])  # fmt: skip
    for check, decode, body in ((check_traces, decode_traces, traces), (check_logs, decode_logs, logs)):
        checked = check(body.SerializeToString(), PROTOBUF, "otlp")
        decoded = decode(body.SerializeToString(), PROTOBUF, "otlp")
        assert checked.rejected == decoded.rejected == (2 if body is traces else 1)
        assert checked.rejection_message() == decoded.rejection_message() != ""
        assert checked.spans == [] and checked.logs == []
    assert [s.name for s in decode_traces(traces.SerializeToString(), PROTOBUF, "otlp").spans] == ["ok"]


def test_a_batch_is_written_in_slices_of_about_equal_bytes_none_smaller_than_a_slice() -> None:
    records = [(0, i, 1, b"x" * 860_000) for i in range(49)]  # 42 MB of requests, 16 MB slices
    slices = slice_records(records, 16 * 1024 * 1024)
    assert [len(s) for s in slices] == [25, 24]  # not 19, 19, 11 nor 17, 17, 15: a smaller write costs more a span
    assert [r for s in slices for r in s] == records  # in order, each once
    assert slice_records(records[:3], 16 * 1024 * 1024) == [records[:3]] and slice_records([], 1) == []
    huge = [(0, 0, 1, b"x" * 100), (0, 1, 1, b"x" * 50_000_000), (0, 2, 1, b"x" * 100)]
    assert all(slice_records(huge, 16 * 1024 * 1024))  # a request larger than a slice is one of its own


def poisoned(pipeline, marker: str) -> None:  # type: ignore[no-untyped-def]
    """Fault injection: a batch holding a span named ``marker`` gets a row the store refuses (a
    message view with no call id), as a measuring bug would make."""
    real = pipeline.build_batch

    def build(items, extra_issues=None):  # type: ignore[no-untyped-def]
        batch = real(items, extra_issues)
        if any(item.span.name == marker for item in items):
            batch.message_rows.append({"trace_id": items[0].span.trace_id, "tool_call_id": None})
        return batch

    pipeline.build_batch = build


def test_a_request_the_store_refuses_is_set_aside_and_the_rest_are_written(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    poisoned(r.receiver.pipeline, "execute_tool bad")
    bodies = [otlp(tool(1, "a" * 10)), otlp(tool(2, "b" * 20, name="bad"), tool(3, "c" * 30)), otlp(tool(4, "d" * 40))]
    r.receiver.paused = True  # the three requests in one batch
    for body in bodies:
        assert post(f"{r.url}/v1/traces", json.dumps(body).encode())[0] == 200
    r.receiver.paused = False
    assert r.receiver.flush(timeout_s=30)
    assert [b for b, *_ in stored(db_path)] == [10, 40]  # the second request went whole
    assert post(f"{r.url}/v1/traces", json.dumps(otlp(tool(5, "e" * 50))).encode())[0] == 200
    assert r.receiver.flush(timeout_s=30)  # and the receiver goes on
    assert [b for b, *_ in stored(db_path)] == [10, 40, 50]
    kept = list((Path(r.receiver.spool.folder) / "rejected").iterdir())
    assert len(kept) == 1 and kept[0].name.endswith(".traces.json")
    assert json.loads(kept[0].read_bytes()) == bodies[1]  # the body as received, for a report
    with read_connection(db_path) as con:
        issues = con.execute("SELECT level, source, message FROM ingest_issues").fetchall()
        failed = con.execute("SELECT max(failed) FROM collector_stats").fetchone()
    assert len(issues) == 1 and issues[0][:2] == ("error", "store")
    assert "could not be stored and was set aside (2 call(s) not stored)" in issues[0][2]
    assert str(kept[0]) in issues[0][2] and "NOT NULL" in issues[0][2]
    assert failed == (2,)


def test_concurrent_requests_sharing_spool_syncs_are_all_written_and_progress_ends_at_the_last(
    serve, db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    import collector.serve.receiver as receiver_module
    from collector.store.database import read_progress
    from tests.collector.test_spool import slow_sync

    slow_sync(monkeypatch, 0.003)  # a disk that honours syncs: requests arrive while one runs
    monkeypatch.setattr(receiver_module, "SLICE_BYTES", 1)  # every request a slice: progress moves with each
    r = serve()

    def send(t: int) -> list[int]:
        return [
            post(
                f"{r.url}/v1/traces",
                json.dumps(otlp(tool(i + 1, f"result {t}.{i}", trace=f"{t:016x}{i:016x}"))).encode(),
            )[0]
            for i in range(10)
        ]

    with ThreadPoolExecutor(8) as pool:
        statuses = [s for part in pool.map(send, range(8)) for s in part]
    assert statuses == [200] * 80
    assert r.receiver.flush(timeout_s=60)
    assert len(stored(db_path)) == 80  # none skipped by a request queued behind a later one
    spool = r.receiver.spool
    assert spool.syncs < 80  # requests shared syncs
    assert read_progress(db_path, r.receiver.receiver_id) == list(spool.replay(0, 0))[-1][:2]


def test_serve_rewrites_its_file_when_the_load_allows_and_goes_on_receiving(serve, db_path: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import shutil
    import threading
    import time

    import collector.serve.inflow as inflow
    import collector.serve.receiver as receiver
    import collector.store.compaction as compaction
    import collector.store.connection as connection

    monkeypatch.setattr(connection, "ROW_GROUP_ROWS", 2048)  # small groups after a few thousand calls
    monkeypatch.setattr(compaction, "MIN_SMALL_GROUPS", 2)
    r = serve(measure_processes=1, max_queued_bytes=8 * 2**20)

    def post(first: int, n: int) -> None:
        spans = (tool(first + i, f"result {first + i}", trace=f"{first + i:032x}") for i in range(n))
        body = json.dumps(otlp(*spans)).encode()
        req = urllib.request.Request(f"{r.url}/v1/traces", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200

    def groups() -> int:
        with read_connection(db_path) as con:
            row = con.execute("SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('tool_calls')").fetchone()
            return int(row[0]) if row else 0

    for k in range(4):
        post(k * 2000, 2000)
        assert r.receiver.flush(60)
    assert groups() >= 3
    said = r.receiver.rewrite_when_light()
    assert said is not None and said.endswith("not yet: the load is measured over the first 60 s after start; "
                                              "tried again at the next retention run, or stop the receiver and run "
                                              "`toolmeter prune`")  # fmt: skip
    monkeypatch.setattr(inflow, "KNOWN_AFTER_S", 0.0)  # as if it had run a minute
    # a disk this slow would take the requests of the last minutes past half the queue meanwhile
    monkeypatch.setattr(receiver, "REWRITE_BYTES_PER_S", 1000.0)
    said = r.receiver.rewrite_when_light()
    assert said is not None and said.startswith("the file is worth rewriting (100% of its tool calls were in ")
    assert "not now: requests come at " in said and "over half the queue (8 MiB" in said and groups() >= 3
    monkeypatch.setattr(receiver, "REWRITE_BYTES_PER_S", 18e6)
    (Path(db_path + ".compact.tmp") / "x").mkdir(parents=True)  # not the file a killed rewrite leaves
    with pytest.raises(StoreError, match=r"compact.tmp is in the way .*; move it elsewhere"):
        r.receiver.rewrite_when_light()
    assert not r.receiver.paused, "the writer goes on after a rewrite that failed"
    shutil.rmtree(db_path + ".compact.tmp")
    room = compaction.ROOM_BYTES
    monkeypatch.setattr(compaction, "ROOM_BYTES", 2**62)  # a disk too full for the new file beside the old
    said = r.receiver.rewrite_when_light()
    assert said is not None and said.startswith("not rewritten (100% of its tool calls were in ") and groups() >= 3
    monkeypatch.setattr(compaction, "ROOM_BYTES", room)
    reads: list[object] = []
    done = threading.Event()

    def read_meanwhile() -> None:  # the dashboard's reads go on while the file is rewritten
        while not done.is_set():
            with read_connection(db_path) as con:
                reads.append(con.execute("SELECT count(*) FROM tool_calls").fetchone())
            time.sleep(0.005)

    reader = threading.Thread(target=read_meanwhile)
    reader.start()
    try:
        said = r.receiver.rewrite_when_light()
    finally:
        done.set()
        reader.join()
    assert said is not None and re.fullmatch(
        r"rewrote the file in \d+\.\d s: 100% of its tool calls were in \d+ small row groups", said
    )
    assert groups() == 1 and reads and set(reads) == {(8000,)}
    assert r.receiver.rewrite_when_light() is None, "nothing to say once rewritten"
    post(8000, 500)  # the writer goes on, into the new file
    assert r.receiver.flush(60)
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*), count(DISTINCT span_id) FROM tool_calls").fetchone() == (8500, 8500)


def test_the_inflow_is_the_rate_of_the_last_five_minutes_and_says_when_a_pause_fits() -> None:
    from collector.serve.inflow import BUCKET_S, WINDOW_S, Inflow

    inflow = Inflow(now=1000.0 - WINDOW_S)  # started five minutes before
    assert inflow.rate(now=1000.0) == 0
    for k in range(30):  # 3 MB a bucket for five minutes: 300 KB/s
        inflow.note(3_000_000, now=1000.0 + k * BUCKET_S)
    assert inflow.rate(now=1000.0 + 29 * BUCKET_S) == 90_000_000 / WINDOW_S
    assert inflow.rate(now=1000.0 + 39 * BUCKET_S) == 60_000_000 / WINDOW_S, (
        "the ten buckets before the window are gone"
    )
    inflow.note(5, now=1000.0 + 330 * BUCKET_S)  # a bucket used again starts from nothing
    assert inflow.rate(now=1000.0 + 330 * BUCKET_S) == 5 / WINDOW_S

    young = Inflow(now=0.0)  # a receiver started 30 s ago: the rate is over those 30 s
    young.note(6_000_000, now=20.0)
    assert young.rate(now=30.0) == 200_000
    assert (
        young.why_not_now(100, 0, 256 * 2**20, now=30.0)
        == "not yet: the load is measured over the first 60 s after start"
    )
    assert young.why_not_now(100, 0, 256 * 2**20, now=60.0) is None  # 10 MB in 100 s fits in 128 MiB
    assert young.why_not_now(100, 0, 16 * 2**20, now=60.0) == (
        "not now: requests come at 0.10 MB/s (last five minutes) and would queue ~10 MiB in the ~100 s a rewrite "
        "takes, over half the queue (16 MiB, TOOLMETER_MAX_QUEUED_BYTES)"
    )
    assert young.why_not_now(10, 8 * 2**20, 16 * 2**20, now=60.0) is not None, "what is queued counts too"


def test_a_periodic_job_of_serve_that_fails_in_any_way_is_said_and_run_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import threading

    from collector.services import _periodically

    stop = threading.Event()
    runs: list[int] = []

    def job() -> list[str]:
        runs.append(1)
        if len(runs) == 1:
            raise OSError("a folder in the way")
        stop.set()
        return ["ran"]

    # hourly, the second run soon after the first (serve's: once the load is known)
    runner = threading.Thread(target=_periodically, args=("retention", job, 3600, stop, True, 0.01))
    runner.start()
    runner.join(timeout=30)
    stop.set()
    assert not runner.is_alive(), "the second run came an hour later, not soon after the first"
    runner.join()
    said = capsys.readouterr()
    assert "toolmeter retention failed (will try again): OSError: a folder in the way" in said.err
    assert "toolmeter retention: ran" in said.out and len(runs) == 2


def test_periodic_jobs_told_to_stop_are_waited_for_up_to_a_bound() -> None:
    import threading

    from collector.services import stop_jobs

    stop, stuck = threading.Event(), threading.Event()
    ends_its_run = threading.Thread(target=lambda: stop.wait(60) and time.sleep(0.2), name="toolmeter-retention")
    never_ends = threading.Thread(target=stuck.wait, name="toolmeter-watch", daemon=True)
    for job in (ends_its_run, never_ends):
        job.start()
    stop.set()
    started = time.monotonic()
    assert stop_jobs([ends_its_run, never_ends], wait_s=1.0) == ["watch"]
    assert 1.0 <= time.monotonic() - started < 5, "one bound for all the jobs, not one each"
    assert not ends_its_run.is_alive(), "a run under way is waited for"
    stuck.set()


def test_serve_stopped_during_a_retention_run_lets_it_end_and_exits_cleanly(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    import duckdb

    from collector.store.database import Store

    db = str(tmp_path / "old.duckdb")
    Store(db).ensure_schema()
    with duckdb.connect(db) as con:  # its first retention run takes seconds: rounds of removing the oldest to fit
        con.execute("""
            INSERT INTO tool_calls BY NAME
            SELECT lpad(to_hex(i // 10), 32, '0') AS trace_id, lpad(to_hex(i), 16, '0') AS span_id,
                   'tool' || (i % 5) AS tool_name, 'gen_ai' AS dialect, 'test' AS source,
                   1763000000000000000 + i * 6000000000 AS start_ns, 1763000000000000000 + i * 6000000000 + 1 AS end_ns,
                   make_timestamp((1763000000000000000 + i * 6000000000) // 1000) AS start_time,
                   'ok' AS status, 'o200k_base' AS encoding, i % 977 AS view_tokens, i % 1999 AS raw_tokens
            FROM range(250000) t(i)""")
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "serve", "--db", db, "--port", "0", "--grpc-port", "0", "--retain",
         "forever", "--max-size", "1MB", "--no-compact"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line)
        if "receiving OTLP/HTTP" in line:  # the retention's first run has just started
            proc.send_signal(signal.SIGTERM)
            break
    try:
        said += proc.stdout.readlines()
        proc.wait(timeout=120)
    finally:
        proc.kill()
        proc.stdout.close()
    out = "".join(said)
    assert proc.returncode == 0, out
    assert "Fatal Python error" not in out and "terminate called" not in out, out
    assert out.index("stopping: writing what is queued") < out.index("toolmeter retention: removed rows before "), out
    assert "(and the oldest, to fit the size cap)" in out, out
    with read_connection(db) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone()[0] < 60_000  # type: ignore[index]
