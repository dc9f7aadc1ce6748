"""Memory follows the configuration (max_queued_bytes, payload cap), not the size or number of results.

Each test measures Python allocations with tracemalloc around one step and checks them
against a bound; none depends on timing.
"""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from collector import record_tool_result
from collector.config import CollectorConfig
from collector.dialects.spans import TOOL
from collector.model import Item, SpanData
from collector.pipeline import Pipeline
from collector.serve import spool as S
from collector.serve.receiver import QueueFull, Receiver, ReceiverConfig
from collector.store.database import read_connection

MiB = 1024 * 1024


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    yield
    tracemalloc.stop()


def peak_of(step: Callable[[], object]) -> int:
    """Bytes allocated at the peak of ``step`` beyond what was allocated before it."""
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    step()
    return tracemalloc.get_traced_memory()[1] - before


def log_text(n_bytes: int) -> str:
    line = "2026-03-01T10:00:00Z INFO api path=/v1/orders status=200 latency_ms=12\n"
    return (line * (n_bytes // len(line) + 1))[:n_bytes]


def tool_span(tracer: Any) -> Any:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
    return tracer.start_as_current_span("execute_tool search", attributes=attrs)


def test_recording_a_large_result_copies_none_of_it(provider_with: Any, traced: None) -> None:
    provider, _ = provider_with(flush_interval=3600)  # the worker stays idle
    tracer = provider.get_tracer("agent")
    for raw in (log_text(32 * MiB), "é" * (16 * MiB)):  # ASCII, and 32 MiB of two-byte UTF-8
        with tool_span(tracer) as span:
            view = raw[:1000]
            peak = peak_of(lambda: record_tool_result(span, raw=raw, view=view))  # noqa: B023 (called at once)
        assert peak < 4 * MiB, (
            f"record_tool_result allocated {peak / MiB:.1f} MiB for a {len(raw) / MiB:.0f} MiB result"
        )


def test_a_batch_being_measured_counts_against_max_queued_bytes(
    provider_with: Any, db_path: str, monkeypatch: pytest.MonkeyPatch, traced: None
) -> None:
    # eight 1 MiB results and their spans' other attributes (a few bytes each)
    provider, processor = provider_with(max_queued_bytes=8 * MiB + 4096, flush_interval=0.05)
    pipeline = processor._pipeline
    inside, release = threading.Event(), threading.Event()
    build_batch = pipeline.build_batch

    def held_back(items: list[Item], *args: Any, **kwargs: Any) -> Any:
        inside.set()
        release.wait(60)
        return build_batch(items, *args, **kwargs)

    monkeypatch.setattr(pipeline, "build_batch", held_back)
    tracer = provider.get_tracer("agent")

    def offer(tag: str) -> None:
        for i in range(8):  # 8 results of exactly 1 MiB, each dropped by the agent once recorded
            with tool_span(tracer) as span:
                record_tool_result(span, raw=f"{tag}{i:07d}" + "x" * (MiB - 8))

    try:
        before = tracemalloc.get_traced_memory()[0]
        offer("a")
        assert inside.wait(30), "the worker did not take the batch"
        offer("b")  # the first 8 MiB are queued or in the worker's hands: nothing more fits
        held = tracemalloc.get_traced_memory()[0] - before
        assert processor.counters["dropped"] == 8
        assert held < 9 * MiB, f"{held / MiB:.1f} MiB of payloads held with max_queued_bytes of 8 MiB"
    finally:
        release.set()
    assert processor.force_flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (8,)


def test_the_messages_an_llm_span_carries_count_against_max_queued_bytes(provider_with: Any, db_path: str) -> None:
    provider, processor = provider_with(max_queued_bytes=4 * MiB + 4096, flush_interval=3600)  # the worker stays idle
    processor._worker.paused = True
    tracer = provider.get_tracer("agent")
    messages = json.dumps([{"role": "tool", "content": "x" * MiB}])  # a conversation carried as an attribute
    for _ in range(8):
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.input.messages": messages}
        with tracer.start_as_current_span("chat m", attributes=attrs):
            pass
    counters = processor.counters
    assert (counters["queued"], counters["dropped"]) == (4, 4), "4 MiB of messages held: the rest dropped and counted"
    processor._worker.paused = False
    assert processor.force_flush()
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM llm_calls").fetchone() == (4,)


def test_a_batch_holds_one_payload_copy_at_a_time(db_path: str, traced: None) -> None:
    pipeline = Pipeline(CollectorConfig(db=db_path))
    pipeline.store.ensure_schema()
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "logs"}
    raws = [log_text(12 * MiB) + str(i) for i in range(2)]
    items = [
        Item(TOOL, SpanData("execute_tool logs", f"{i + 1:032x}", f"{i + 1:016x}", 1, 2, attrs), raw)
        for i, raw in enumerate(raws)
    ]
    peak = peak_of(lambda: pipeline.write(pipeline.build_batch(items)))
    # one UTF-8 copy of the payload being measured, plus the stored head and tail (the cap)
    assert peak < 12 * MiB + 4 * MiB, f"measuring two 12 MiB results took {peak / MiB:.1f} MiB at once"
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*), min(raw_bytes) FROM tool_calls").fetchone() == (2, 12 * MiB + 1)


def test_the_spool_writes_a_large_body_without_copying_it(tmp_path: Path, traced: None) -> None:
    spool = S.Spool(str(tmp_path / "spool"))
    body = b"x" * (32 * MiB)
    peak = peak_of(lambda: spool.append(S.TRACES_PROTOBUF, body))
    spool.close()
    assert peak < MiB
    assert [len(r[3]) for r in spool.replay(0, 0)] == [32 * MiB]


def _request(i: int, result: str) -> bytes:
    def kv(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "value": {"stringValue": value}}

    span = {"traceId": f"{i:032x}", "spanId": f"{i:016x}", "name": "execute_tool t", "startTimeUnixNano": "1",
            "endTimeUnixNano": "2", "attributes": [kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "t"), kv("gen_ai.tool.call.result", result)]}  # fmt: skip
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def test_the_receiver_queue_follows_toolmeter_max_queued_bytes(
    db_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLMETER_MAX_QUEUED_BYTES", "1000")  # what `toolmeter serve` reads
    config = CollectorConfig.resolve(db=db_path, flush_interval=0.1)
    receiver = Receiver(config, ReceiverConfig(spool_dir=str(tmp_path / "spool")))
    assert receiver.max_queued_bytes == 1000
    receiver.paused = True
    try:
        receiver.accept(S.TRACES_JSON, _request(1, "x" * 600))
        with pytest.raises(QueueFull):
            receiver.accept(S.TRACES_JSON, _request(2, "y" * 600))
        receiver.paused = False
        assert receiver.flush()
        receiver.accept(S.TRACES_JSON, _request(2, "y" * 600))  # room again once written
        assert receiver.flush()
    finally:
        receiver.close()
    explicit = Receiver(config, ReceiverConfig(spool_dir=str(tmp_path / "spool"), max_queued_bytes=5000))
    assert explicit.max_queued_bytes == 5000
    explicit.close()
