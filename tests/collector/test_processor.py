"""ToolResultProcessor with real TracerProvider spans and a real DuckDB file."""

import json
import os

import pytest
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector import ToolResult, ToolResultProcessor, measured_tool, record_tool_result
from collector.errors import ConfigError
from collector.store.database import read_connection


def tool_span(tracer, name="search_orders", **attrs):  # type: ignore[no-untyped-def]
    base = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    base.update(attrs)
    return tracer.start_as_current_span(f"execute_tool {name}", attributes=base)


def rows(db: str, sql: str):  # type: ignore[no-untyped-def]
    with read_connection(db) as con:
        return con.execute(sql).fetchall()


def test_tool_and_llm_spans_are_recorded_with_exact_counts(provider_with, db_path, counter) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    tracer = provider.get_tracer("agent")
    raw = json.dumps([{"id": i, "status": "paid"} for i in range(500)])
    with tracer.start_as_current_span("invoke_agent"):
        with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
            pass
        with tool_span(tracer) as span:
            record_tool_result(span, raw=raw, budget_tokens=1000, shape="list")
        for _ in range(3):
            with tracer.start_as_current_span("chat gpt-4o", attributes={"gen_ai.operation.name": "chat"}):
                pass
    assert processor.force_flush()
    (row,) = rows(db_path, "SELECT tool_name, raw_bytes, raw_tokens, view_tokens, over_budget, shape FROM tool_calls")
    assert row == ("search_orders", len(raw), counter.count(raw).tokens, counter.count(raw).tokens, True, "list")
    assert rows(db_path, "SELECT count(*) FROM llm_calls") == [(4,)]
    from collector.query.ranking import ranking

    with read_connection(db_path) as con:
        (ranked,) = ranking(con)
    assert ranked["window_cost_tokens"] == 3 * counter.count(raw).tokens  # three later LLM calls


def test_payloads_travel_outside_the_span_and_survive_attribute_limits(db_path, counter) -> None:  # type: ignore[no-untyped-def]
    processor = ToolResultProcessor(db=db_path)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=128), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    log = "\n".join(f"2026-11-20T10:00:{i % 60:02d}Z INFO served request {i}" for i in range(20_000))
    with tool_span(provider.get_tracer("a"), "fetch_pod_logs") as span:
        record_tool_result(span, raw=log, view=log[:2000] + "\n[truncated]", truncated=True)
    provider.shutdown()
    (row,) = rows(db_path, "SELECT raw_bytes, raw_tokens, raw_tokens_exact, truncated, retained_ranges FROM tool_calls")
    assert row[0] == len(log) and row[1] == counter.count(log).tokens and row[2] is True
    assert row[3] is True and row[4] == [[0, 2000]]
    attrs = exporter.get_finished_spans()[0].attributes
    assert attrs["toolmeter.raw.bytes"] == len(log)
    assert all(len(str(v)) <= 128 for v in attrs.values()), "no megabytes in the span other exporters ship"


def test_a_result_cut_by_the_attribute_limit_is_flagged(db_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "128")
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ToolResultProcessor(db=db_path)
    provider.add_span_processor(processor)
    with tool_span(provider.get_tracer("a"), **{"gen_ai.tool.call.result": "x " * 5000}):
        pass
    provider.shutdown()
    (warnings,) = rows(db_path, "SELECT warnings FROM tool_calls")[0]
    assert any("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in w for w in warnings)


def test_full_queue_drops_are_counted_and_stored_never_raised(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(max_queue_size=5, max_batch_size=1000, flush_interval=3600)
    tracer = provider.get_tracer("a")
    for i in range(12):
        with tool_span(tracer, **{"gen_ai.tool.call.result": f"result {i}"}):
            pass
    assert processor.counters["dropped"] == 7
    assert processor.force_flush()
    assert rows(db_path, "SELECT count(*) FROM tool_calls") == [(5,)]
    assert rows(db_path, "SELECT spans_seen, dropped, tool_calls_written FROM collector_stats") == [(12, 7, 5)]


def test_batches_are_written_whole_by_the_worker(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with(max_batch_size=50)
    tracer = provider.get_tracer("a")
    for i in range(520):
        with tool_span(tracer, f"tool_{i % 4}", **{"gen_ai.tool.call.result": "ok " * i}):
            pass
    assert processor.force_flush()
    assert rows(db_path, "SELECT count(*), count(DISTINCT tool_name) FROM tool_calls") == [(520, 4)]


def test_shutdown_drains_and_is_idempotent(db_path) -> None:  # type: ignore[no-untyped-def]
    provider = TracerProvider(shutdown_on_exit=False)
    processor = ToolResultProcessor(db=db_path, flush_interval=3600)
    provider.add_span_processor(processor)
    with tool_span(provider.get_tracer("a"), **{"gen_ai.tool.call.result": "done"}):
        pass
    processor.shutdown()
    processor.shutdown()
    assert rows(db_path, "SELECT count(*) FROM tool_calls") == [(1,)]
    with tool_span(provider.get_tracer("a")):  # after shutdown: ignored, not raised
        pass


def test_unreadable_attributes_become_issues_not_exceptions(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    with tool_span(provider.get_tracer("a"), **{"toolmeter.budget.tokens": "lots", "toolmeter.retained": "0-x"}):
        pass
    assert processor.force_flush()
    issues = rows(db_path, "SELECT field, message FROM ingest_issues ORDER BY field")
    assert issues[0][0] == "toolmeter.budget.tokens" and "non-negative integer" in issues[0][1]
    assert issues[1][0] == "toolmeter.retained"
    assert rows(db_path, "SELECT budget_tokens FROM tool_calls") == [(None,)]


def test_decorator_records_declared_views(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()

    @measured_tool("list_issues", budget_tokens=500, shape="list", tracer=provider.get_tracer("a"))
    def list_issues() -> ToolResult:
        raw = json.dumps([{"number": n, "title": f"issue {n}"} for n in range(300)])
        return ToolResult(raw=raw, view=raw[:400] + "\n[truncated: 12 of 300 issues]", truncated=True)

    assert isinstance(list_issues(), ToolResult)
    assert processor.force_flush()
    (row,) = rows(
        db_path, "SELECT tool_name, budget_tokens, truncated, truncation_kind, retained_ranges FROM tool_calls"
    )
    assert row == ("list_issues", 500, True, "head", [[0, 400]])


def test_bad_configuration_names_the_setting(db_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="max_queue_size=0"):
        ToolResultProcessor(db=db_path, max_queue_size=0)
    monkeypatch.setenv("TOOLMETER_FLUSH_INTERVAL", "soon")
    with pytest.raises(ConfigError, match="TOOLMETER_FLUSH_INTERVAL='soon'"):
        ToolResultProcessor(db=db_path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_records_its_own_spans(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    provider, processor = provider_with()
    tracer = provider.get_tracer("a")
    with tool_span(tracer, "parent_tool", **{"gen_ai.tool.call.result": "from parent"}):
        pass
    pid = os.fork()
    if pid == 0:  # child: its own worker thread must exist and write
        code = 1
        try:
            with tool_span(tracer, "child_tool", **{"gen_ai.tool.call.result": "from child"}):
                pass
            code = 0 if processor.force_flush(20_000) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert processor.force_flush()
    names = [r[0] for r in rows(db_path, "SELECT tool_name FROM tool_calls ORDER BY tool_name")]
    assert names == ["child_tool", "parent_tool"]


def test_each_episode_of_drops_is_warned_and_reported(provider_with, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    provider, processor = provider_with(max_queue_size=2, max_batch_size=1000, flush_interval=3600)
    tracer = provider.get_tracer("a")
    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        for episode in range(2):
            for i in range(5):
                with tool_span(tracer, **{"gen_ai.tool.call.result": f"result {episode} {i}"}):
                    pass
            assert processor.force_flush()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("queue is full" in m for m in messages) == 2  # once per episode, not once per process
    assert [m for m in messages if "dropped" in m and "room again" in m] == [
        "toolmeter dropped 3 span(s) while its queue was full (3 in all); the queue has room again",
        "toolmeter dropped 3 span(s) while its queue was full (6 in all); the queue has room again",
    ]


def test_a_span_the_store_refuses_is_counted_and_said_and_the_rest_are_written(provider_with, db_path) -> None:  # type: ignore[no-untyped-def]
    from tests.collector.test_receiver import poisoned

    provider, processor = provider_with()
    poisoned(processor._pipeline, "execute_tool bad")
    tracer = provider.get_tracer("t")
    for name, result in (("ok", "a" * 10), ("bad", "b" * 20), ("ok", "c" * 30)):  # one batch
        with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.result": result}):  # fmt: skip
            pass
    assert processor.force_flush()
    assert processor.counters["failed"] == 1
    with read_connection(db_path) as con:
        assert con.execute("SELECT tool_name, raw_bytes FROM tool_calls ORDER BY raw_bytes").fetchall() == [
            ("ok", 10), ("ok", 30)]  # fmt: skip
        issues = con.execute("SELECT level, source, message FROM ingest_issues").fetchall()
    assert len(issues) == 1 and issues[0][:2] == ("error", "store")
    assert "(execute_tool bad) could not be stored and was set aside (1 call(s) not stored)" in issues[0][2]
