"""Forwarding mode's helper process: spans reach the receiver whole, its death is counted, forks are safe."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.trace import Status, StatusCode

from collector import ToolResultProcessor, record_tool_result
from collector.agent.frames import record
from collector.agent.relay import Relay
from collector.store.database import read_connection
from tests.collector.conftest import TOKEN

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_orders"}


def _provider(processor: ToolResultProcessor, **kw: object) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False, resource=Resource.create({"service.name": "billing"}), **kw)  # type: ignore[arg-type]
    provider.add_span_processor(processor)
    return provider


def _helper(processor: ToolResultProcessor) -> object:
    relay = processor._relay
    assert relay is not None and relay._helper is not None
    return relay._helper.proc


def test_forwarded_spans_arrive_whole_through_the_helper(serve, db_path: str, counter, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                        monkeypatch) -> None:  # fmt: skip
    # the agent runs from a project with a package of the same name: the helper still imports
    # toolmeter's own (a script's folder comes first on its path)
    decoy = tmp_path / "project" / "collector"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the project\\'s own collector package')\n")
    monkeypatch.chdir(decoy.parent)
    r = serve(token=TOKEN)
    processor = ToolResultProcessor(forward_to=r.url, forward_token=TOKEN, flush_interval=0.05)
    # two attributes over the limit: the count the SDK dropped must reach the receiver too
    provider = _provider(processor, span_limits=SpanLimits(max_span_attributes=4))
    tracer = provider.get_tracer("agent", "1.2")
    raw = "\n".join(f'{{"id": {i}, "status": "paid"}}' for i in range(300))
    with (
        tracer.start_as_current_span("invoke_agent") as parent,
        tracer.start_as_current_span("execute_tool search_orders", attributes=TOOL) as span,
    ):
        record_tool_result(span, raw=raw, view=raw[:200])
        span.set_attribute("extra.one", 1)
        span.set_attribute("extra.two", 2)
        span.set_status(Status(StatusCode.ERROR, "upstream 502"))
    assert processor.force_flush(10_000)
    proc = _helper(processor)
    provider.shutdown()
    assert proc.poll() is not None, "the helper ends with the processor"  # type: ignore[attr-defined]
    assert processor.counters["forwarded"] == 1 and processor.counters["failed"] == 0
    assert r.receiver.flush()
    with read_connection(db_path) as con:
        row = con.execute(
            "SELECT tool_name, service_name, parent_span_id, status, error, raw_bytes, raw_tokens, view_bytes, warnings "
            "FROM tool_calls"
        ).fetchone()
    assert row is not None
    assert row[:8] == ("search_orders", "billing", f"{parent.get_span_context().span_id:016x}", "error",
                       "upstream 502", len(raw), counter.count(raw).tokens, 200)  # fmt: skip
    assert any("dropped" in w and "attributes" in w for w in row[8]), row[8]


def test_a_helper_that_dies_is_counted_and_the_next_batch_starts_a_new_one(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    processor = ToolResultProcessor(forward_to=r.url, flush_interval=0.05)
    provider = _provider(processor)
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span(
        "execute_tool search_orders", attributes={**TOOL, "gen_ai.tool.call.result": "a"}
    ):
        pass
    assert processor.force_flush(10_000)
    first = _helper(processor)
    first.kill()  # type: ignore[attr-defined]
    first.wait()  # type: ignore[attr-defined]
    with tracer.start_as_current_span(
        "execute_tool search_orders", attributes={**TOOL, "gen_ai.tool.call.result": "b"}
    ):
        pass
    assert processor.force_flush(10_000)
    assert _helper(processor) is not first
    provider.shutdown()
    assert processor.counters["forwarded"] == 2
    assert r.receiver.flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (2,)


@contextlib.contextmanager
def _silent_relay() -> Iterator[Relay]:
    """A relay to a receiver that accepts connections and never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        yield Relay(f"http://127.0.0.1:{silent.getsockname()[1]}")


def test_spans_a_helper_held_when_it_died_are_counted_as_failed() -> None:
    # a receiver that never answers: the helper holds the batch in its retries when it is killed
    with _silent_relay() as relay:
        provider = TracerProvider(shutdown_on_exit=False)
        with provider.get_tracer("t").start_as_current_span("execute_tool t", attributes=TOOL) as span:
            pass
        relay.send([record(span)] * 3)  # type: ignore[arg-type]
        assert relay._helper is not None
        proc = relay._helper.proc
        time.sleep(0.5)
        proc.kill()
        deadline = time.monotonic() + 10
        while relay.failed < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        relay.close(5)
    assert (relay.sent, relay.failed) == (0, 3) and relay.exits == [-signal.SIGKILL]


def test_a_forked_child_does_not_hold_the_parents_helper_open(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the child inherits the pipe to the parent's helper; if it kept it, the helper would never
    # see the end of its input and the parent's shutdown would wait out its timeout
    r = serve()
    processor = ToolResultProcessor(forward_to=r.url, flush_interval=0.05)
    provider = _provider(processor)
    with provider.get_tracer("agent").start_as_current_span("execute_tool search_orders", attributes=TOOL):
        pass
    assert processor.force_flush(10_000)
    pid = os.fork()
    if pid == 0:  # the child outlives the parent's shutdown, doing nothing
        time.sleep(20)
        os._exit(0)
    try:
        started = time.monotonic()
        provider.shutdown()
        took = time.monotonic() - started
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert took < 10, f"shutdown took {took:.1f} s"
    assert processor.counters["forwarded"] == 1


def test_the_helpers_encoding_equals_the_sdks_field_for_field() -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, TraceFlags, TraceState, set_span_in_context
    from opentelemetry.trace import SpanContext as Ctx

    from collector.agent.frames import HEADER, MSGPACK, _read, _read_sdk, encode, flatten, frame, unframe

    class Keep(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[object] = []

        def on_end(self, span: object) -> None:
            self.spans.append(span)

    keep = Keep()
    spans: list[tuple[object, object, object]] = []
    remote = Ctx(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED),
                 trace_state=TraceState([("vendor", "v1"), ("k", "2")]))  # fmt: skip
    for service, schema in (("billing", "https://opentelemetry.io/schemas/1.21.0"), ("search", None)):
        provider = TracerProvider(shutdown_on_exit=False, resource=Resource({"service.name": service, "n": 3}, schema),
                                  span_limits=SpanLimits(max_span_attributes=6, max_events=1, max_links=1))  # fmt: skip
        provider.add_span_processor(keep)
        for scope in ("agent", "tools"):
            tracer = provider.get_tracer(scope, "0.3", schema_url="https://example.com/s", attributes={"lib": scope})
            with tracer.start_as_current_span(
                "execute_tool search_orders", context=set_span_in_context(NonRecordingSpan(remote)),
                kind=SpanKind.CLIENT, links=[Link(remote, {"why": "retry"}), Link(remote)],
                attributes={**TOOL, "b": True, "i": 7, "f": 0.5, "arr": ("a", "b"), "ints": (1, 2), "gen_ai.tool.call.result": '{"x": 1}'},
            ) as span:  # fmt: skip
                span.add_event("gen_ai.tool.message", {"content": "hi", "n": 1})
                span.add_event("dropped by the limit")
                span.set_attribute("over.limit", 1)
                span.set_status(Status(StatusCode.ERROR, "boom"))
            with tracer.start_as_current_span("chat gpt-5", kind=SpanKind.SERVER):
                pass
    spans = [(s, None, None) for s in keep.spans]
    tool = next(i for i, (s, _, _) in enumerate(spans) if s.name.startswith("execute_tool"))  # type: ignore[attr-defined]
    spans[tool] = (spans[tool][0], "the raw result", b"the view")
    resources, scopes, flat = flatten(record(span, raw, view) for span, raw, view in spans)  # type: ignore[arg-type]
    # the SDK's spans are read from their instance dict; any other span through its properties:
    # the two readings agree field for field (events and links as sequences)
    for span, _, _ in spans:
        fast, public = _read_sdk(span), _read(span)  # type: ignore[arg-type]
        assert [list(v) if i in (12, 14) else v for i, v in enumerate(fast)] == [
            list(v) if i in (12, 14) else v for i, v in enumerate(public)
        ]
    assert any(_read_sdk(s)[13] for s, _, _ in spans) and any(_read_sdk(s)[3] for s, _, _ in spans)  # type: ignore[arg-type]
    # through the pipe's framing and back, as the helper reads it
    header, body = frame(("spans", 1, resources, scopes, flat))
    size, kind = HEADER.unpack(header)
    assert (size, kind) == (len(body), MSGPACK)
    _, _, resources, scopes, flat = unframe(kind, body)
    ours = ExportTraceServiceRequest.FromString(encode(resources, scopes, flat))
    sdk = encode_spans([_with_payloads(span, raw, view) for span, raw, view in spans])  # type: ignore[arg-type]
    assert ours == sdk
    assert len(ours.resource_spans) == 2 and all(len(r.scope_spans) == 2 for r in ours.resource_spans)
    sent = [s for r in ours.resource_spans for ss in r.scope_spans for s in ss.spans]
    first = next(s for s in sent if s.name.startswith("execute_tool"))
    attrs = {kv.key: kv.value for kv in first.attributes}
    assert (
        attrs["toolmeter.raw"].string_value == "the raw result" and attrs["toolmeter.view"].string_value == "the view"
    )
    assert first.dropped_attributes_count == 3 and first.dropped_events_count == 1 and first.dropped_links_count == 1
    assert first.trace_state == "vendor=v1,k=2" and first.parent_span_id == (0xDEF).to_bytes(8, "big")
    assert first.flags == 0x300  # the parent is remote, and the flags say that they say so


def test_a_batch_messagepack_cannot_carry_goes_as_marshal_and_reads_back_the_same() -> None:
    from collector.agent.frames import HEADER, MARSHAL, MSGPACK, frame, unframe

    class Custom:
        def __str__(self) -> str:
            return "custom value"

    def read(message: tuple[object, ...]) -> tuple[int, object]:
        header, body = frame(message)
        size, kind = HEADER.unpack(header)
        assert size == len(body)
        return kind, unframe(kind, body)

    class Score(float):  # numpy.float64 is one: the SDK keeps it as a float attribute
        pass

    plain = ("spans", 1, [({"service.name": "billing"}, "")], [None],
             [("t", b"\x01" * 16, 2**64 - 1, {"b": b"x", "score": Score(0.25)})])  # fmt: skip
    assert read(plain) == (MSGPACK, ["spans", 1, [[{"service.name": "billing"}, ""]], [None],
                                     [["t", b"\x01" * 16, 2**64 - 1, {"b": b"x", "score": 0.25}]]])  # fmt: skip
    # an integer beyond 64 bits, a lone surrogate: marshal keeps them exactly
    for odd in (2**70, -(2**63) - 1, "half a pair \ud800"):
        message = ("spans", 2, [], [], [("t", {"v": odd})])
        assert read(message) == (MARSHAL, message)
    # a type neither knows travels as its text
    assert read(("spans", 3, [], [], [("t", {"v": Custom(), "big": 2**70})])) == (
        MARSHAL, ("spans", 3, [], [], [("t", {"v": "custom value", "big": 2**70})]))  # fmt: skip


def test_values_otlp_cannot_carry_are_sent_changed_and_said_not_lost_with_their_batch(caplog) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from collector.agent.frames import HEADER, encode, flatten, frame, unframe

    provider = TracerProvider(shutdown_on_exit=False)
    kept: list[object] = []

    class Keep(SpanProcessor):
        def on_end(self, span: object) -> None:
            kept.append(span)

    provider.add_span_processor(Keep())
    tracer = provider.get_tracer("t")
    for i, odd in enumerate(({"n": 2**70}, {"text": "half a pair \ud800 here"}, {"ok": "fine"})):
        with tracer.start_as_current_span(f"execute_tool t{i}", attributes={**TOOL, **odd}):
            pass
    header, body = frame(("spans", 1, *flatten(record(span) for span in kept)))  # type: ignore[arg-type]
    _, _, resources, scopes, flat = unframe(HEADER.unpack(header)[1], body)
    with caplog.at_level("WARNING", logger="toolmeter"):
        sent = ExportTraceServiceRequest.FromString(encode(resources, scopes, flat))
    spans = {s.name: {kv.key: kv.value for kv in s.attributes} for s in sent.resource_spans[0].scope_spans[0].spans}
    assert len(spans) == 3, "the other spans of the batch go too"
    assert spans["execute_tool t0"]["n"].string_value == str(2**70)
    assert spans["execute_tool t1"]["text"].string_value == "half a pair \ufffd here"
    assert spans["execute_tool t2"]["ok"].string_value == "fine"
    said = caplog.text
    assert "beyond 64 bits" in said and "lone surrogate" in said
    # each span says what was changed in it, for the stored row to say
    assert (
        spans["execute_tool t0"]["toolmeter.relay.changed"].string_value
        == "n: an integer beyond 64 bits sent as its decimal text"
    )
    assert spans["execute_tool t1"]["toolmeter.relay.changed"].string_value == (
        "text: 1 lone surrogate(s) (not valid Unicode) sent as U+FFFD"
    )
    assert "toolmeter.relay.changed" not in spans["execute_tool t2"]


def test_a_result_forwarding_had_to_change_is_stored_saying_so(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    r = serve()
    processor = ToolResultProcessor(forward_to=r.url)
    provider = _provider(processor)
    with provider.get_tracer("t").start_as_current_span("execute_tool t", attributes=TOOL) as span:
        record_tool_result(span, raw="rows: 3 \ud800 (a lone surrogate from a bad decode)")
    provider.shutdown()
    assert processor.counters["forwarded"] == 1 and r.receiver.flush()
    with read_connection(db_path) as con:
        row = con.execute("SELECT raw_bytes, warnings FROM tool_calls").fetchone()
    assert row is not None and row[0] == len("rows: 3 \ufffd (a lone surrogate from a bad decode)".encode())
    assert any(w.startswith("toolmeter.relay.changed: forwarding changed values OTLP cannot carry: toolmeter.raw: 1 lone")
               for w in row[1]), row[1]  # fmt: skip


def _with_payloads(span: Any, raw: str | bytes | None, view: str | bytes | None) -> Any:
    """A copy of ``span`` carrying the payloads as attributes, as the SDK's own span type: what the
    SDK's encoder is given to compare with the helper's encoding of the same span."""
    from opentelemetry.attributes import BoundedAttributes
    from opentelemetry.sdk.trace import ReadableSpan

    from collector.agent.forward import with_payload_attributes

    if raw is None and view is None:
        return span
    attrs = BoundedAttributes(attributes=with_payload_attributes(span.attributes, raw, view), immutable=True)
    attrs.dropped = span.dropped_attributes
    return ReadableSpan(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                        attributes=attrs, events=span._events, links=span._links, kind=span.kind, status=span.status,
                        start_time=span.start_time, end_time=span.end_time,
                        instrumentation_scope=span.instrumentation_scope)  # fmt: skip


def test_payloads_added_in_this_thread_keep_the_count_of_attributes_the_sdk_dropped() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from collector.agent.frames import encode, flatten

    captured: list = []  # type: ignore[type-arg]

    class Keep(SpanProcessor):
        def on_end(self, span):  # type: ignore[no-untyped-def]
            captured.append(span)

    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=3), shutdown_on_exit=False)
    provider.add_span_processor(Keep())
    with provider.get_tracer("t").start_as_current_span("execute_tool t") as span:
        for i in range(5):
            span.set_attribute(f"a{i}", i)
    provider.shutdown()
    (finished,) = captured
    assert finished.dropped_attributes == 2
    sent = ExportTraceServiceRequest.FromString(encode(*flatten([record(finished, "raw text", None)])))
    (encoded,) = sent.resource_spans[0].scope_spans[0].spans
    attrs = {kv.key: kv.value for kv in encoded.attributes}
    assert attrs["toolmeter.raw"].string_value == "raw text" and encoded.dropped_attributes_count == 2
    assert "toolmeter.raw" not in finished.attributes, "the span other exporters ship is unchanged"


def test_forwarding_queues_each_spans_values_not_the_span(serve, db_path: str) -> None:  # type: ignore[no-untyped-def]
    # spans waiting for the worker are what the agent's garbage collector would walk again and
    # again: on_end reads what is sent and lets the span go
    import gc
    import weakref

    r = serve()
    processor = ToolResultProcessor(forward_to=r.url)
    processor._worker.paused = True  # nothing leaves the queue
    refs: list[weakref.ref[object]] = []

    class Watch(SpanProcessor):
        def on_end(self, span: object) -> None:
            refs.append(weakref.ref(span))

    provider = _provider(processor)
    provider.add_span_processor(Watch())
    for i in range(20):
        with provider.get_tracer("t").start_as_current_span("execute_tool t", attributes=TOOL) as span:
            record_tool_result(span, raw=f"result {i}")
    del span
    gc.collect()
    assert processor.counters["queued"] == 20 and len(refs) == 20
    assert all(ref() is None for ref in refs)
    processor._worker.paused = False
    provider.shutdown()
    assert processor.counters["forwarded"] == 20 and r.receiver.flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*), count(DISTINCT raw_bytes) FROM tool_calls").fetchone() == (20, 2)


def test_a_batch_handed_on_holds_no_span_while_the_helper_is_behind() -> None:
    # the helper stuck on a receiver that never answers: the batch waits as bytes, and the
    # spans themselves (what the agent's garbage collector would walk) are released at once
    import gc
    import weakref

    with _silent_relay() as relay:
        provider = TracerProvider(shutdown_on_exit=False)
        refs = []
        for batch in range(3):
            spans = []
            for i in range(50):
                attrs = {**TOOL, "gen_ai.tool.call.result": f"{batch}-{i} " + "x" * 2000}
                with provider.get_tracer("t").start_as_current_span("execute_tool t", attributes=attrs) as span:
                    pass
                spans.append(span)
            refs += [weakref.ref(s) for s in spans]
            relay.send([record(s) for s in spans])  # type: ignore[arg-type]
            del spans, span
        gc.collect()
        assert all(r() is None for r in refs)
        assert relay.sent == 0 and not relay.flush(0.5)  # nothing answered yet
        relay.close(3)
    assert (relay.sent, relay.failed) == (0, 150)
    assert relay._helper is None
