"""ConsoleSpanExporter output, produced by the real SDK, read back into SpanData."""

from __future__ import annotations

import io
import json

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from collector.decode.console import iso_to_ns, looks_like_console_json, read_console_spans
from collector.dialects.spans import TOOL, classify, extract_tool_call
from collector.model import Issue


class _Keep(SpanExporter):
    """Keeps the finished spans, to compare with what the console printed."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans):  # type: ignore[no-untyped-def]
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def console_output() -> tuple[str, list[ReadableSpan]]:
    """Three spans (an agent, a tool call that failed, a tool call) as ConsoleSpanExporter prints them."""
    out = io.StringIO()
    kept = _Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "orders-agent"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=out)))
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent orders", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span(
            "execute_tool lookup", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        ) as failed:
            failed.set_status(Status(StatusCode.ERROR, "timeout"))
        with tracer.start_as_current_span(
            "execute_tool search_orders",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "search_orders",
                "gen_ai.tool.call.result": '{"rows": ["a\\nb", "\u00e9"]}',
                "toolmeter.raw.bytes": 31,
                "tags": ("x", "y"),
            },
        ):
            pass
    provider.shutdown()
    return out.getvalue(), kept.spans


def test_real_console_output_round_trips() -> None:
    text, spans = console_output()
    assert not text.lstrip().startswith("[")  # a stream of objects, not a list...
    assert text.count("\n{") == 2  # ...and not one per line
    assert looks_like_console_json(text)
    issues: list[Issue] = []
    got = list(read_console_spans(text, "console.txt", issues))
    assert not issues
    assert [s.name for s in got] == [s.name for s in spans]
    for read, real in zip(got, spans, strict=True):
        ctx = real.get_span_context()
        assert ctx is not None
        assert read.trace_id == format(ctx.trace_id, "032x")
        assert read.span_id == format(ctx.span_id, "016x")
        assert read.parent_span_id == (format(real.parent.span_id, "016x") if real.parent else None)
        assert real.start_time is not None and real.end_time is not None
        # the SDK prints microseconds (rounded through a float)
        assert abs(read.start_ns - real.start_time) <= 1000 and read.start_ns % 1000 == 0
        assert abs(read.end_ns - real.end_time) <= 1000 and read.end_ns % 1000 == 0
        assert read.resource["service.name"] == "orders-agent"
        assert read.source == "console.txt"
        assert dict(read.attributes) == {k: list(v) if isinstance(v, tuple) else v for k, v in real.attributes.items()}
    failed, ok, agent = got
    assert (failed.status_code, failed.status_message) == ("error", "timeout")
    assert (ok.status_code, agent.parent_span_id) == ("unset", None)
    assert classify(ok.name, ok.attributes) == TOOL and classify(agent.name, agent.attributes) is None
    call, _ = extract_tool_call(ok)
    assert (call.tool_name, call.raw, call.raw_bytes_declared) == ("search_orders", '{"rows": ["a\\nb", "\u00e9"]}', 31)


def test_a_malformed_object_in_the_middle_is_an_issue_and_reading_resumes() -> None:
    text, spans = console_output()
    second = text.index("\n{") + 1
    broken = text[:second] + text[second:].replace('"status_code"', '"status_code" "ERROR",', 1)
    issues: list[Issue] = []
    got = list(read_console_spans(broken, "console.txt", issues))
    assert [s.name for s in got] == [spans[0].name, spans[2].name]
    assert len(issues) == 1
    assert issues[0].source == "console.txt"
    assert f"object 2 (character {second})" in issues[0].message and "not valid JSON" in issues[0].message


def test_an_object_with_a_bad_field_is_skipped_and_named() -> None:
    text, spans = console_output()
    objects = []
    decoder = json.JSONDecoder()
    pos = 0
    while pos < len(text.rstrip()):
        obj, pos = decoder.raw_decode(text, pos)
        objects.append(obj)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    objects[0]["start_time"] = "yesterday"
    text = "\n".join(json.dumps(o, indent=4) for o in objects) + "\n"
    issues: list[Issue] = []
    got = list(read_console_spans(text, "c.txt", issues))
    assert len(got) == 2
    assert issues[0].field == "start_time" and "object 1 (character 0)" in issues[0].message
    assert issues[0].span_id == format(spans[0].get_span_context().span_id, "016x")  # type: ignore[union-attr]


def test_a_truncated_last_object_ends_the_stream_with_an_issue() -> None:
    text, spans = console_output()
    issues: list[Issue] = []
    got = list(read_console_spans(text[:-40], "c.txt", issues))
    assert [s.name for s in got] == [s.name for s in spans[:2]]
    assert len(issues) == 1 and "object 3" in issues[0].message


def test_compact_one_per_line_output_is_read_too() -> None:
    out = io.StringIO()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(
        SimpleSpanProcessor(ConsoleSpanExporter(out=out, formatter=lambda s: s.to_json(indent=None) + "\n"))
    )
    with provider.get_tracer("t").start_as_current_span("execute_tool a"):
        pass
    with provider.get_tracer("t").start_as_current_span("execute_tool b"):
        pass
    provider.shutdown()
    issues: list[Issue] = []
    assert [s.name for s in read_console_spans(out.getvalue(), "c", issues)] == ["execute_tool a", "execute_tool b"]
    assert not issues


def test_otlp_json_and_other_text_do_not_look_like_console_output() -> None:
    assert not looks_like_console_json('{"resourceSpans": [{"scopeSpans": []}]}')
    assert not looks_like_console_json("[1, 2]")
    assert not looks_like_console_json("")


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1970-01-01T00:00:01Z", 1_000_000_000),
        ("1970-01-01T00:00:01.5Z", 1_500_000_000),
        ("1970-01-01T00:00:01.123456789Z", 1_123_456_789),
        ("1970-01-01T01:00:01.000001+01:00", 1_000_001_000),
        ("1970-01-01T00:00:01.25", 1_250_000_000),  # no zone: UTC
    ],
)
def test_iso_to_ns(text: str, ns: int) -> None:
    assert iso_to_ns(text) == ns
