"""``ToolResultProcessor``: an OpenTelemetry span processor that measures tool results.

The agent's thread pays for a filter and an append: ``on_end`` looks up a few
attributes to see whether the span is a tool or LLM call, takes the payloads that
:func:`collector.record_tool_result` handed over, and appends to a bounded deque. It
never blocks on I/O and never raises. A named daemon thread does the rest in batches:
reading the span, counting tokens, inferring truncation, fingerprinting, and writing one
DuckDB transaction per batch (:mod:`collector.store.database`).

When the deque is full (by count, or by the payload bytes held: queued or still being
measured and written) the span is dropped and counted; the count is stored with every
flush and shown by the dashboard.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode, format_span_id, format_trace_id

from collector.agent.forward import Forwarder, with_payloads
from collector.agent.handoff import register_processor, take_payloads
from collector.config import CollectorConfig
from collector.dialects import attributes as A
from collector.dialects.spans import RESULT_KEYS, classify
from collector.errors import StoreError
from collector.model import Item, SpanData, gen_ai_events

if TYPE_CHECKING:
    from collector.pipeline import Pipeline

logger = logging.getLogger("toolmeter")

_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
"""The SDK's own key (instrumentations check this one): a key made with ``create_key`` is a new,
random key that no instrumentation reads, and toolmeter's own sends would be traced."""
_STATUS = {StatusCode.OK: "ok", StatusCode.ERROR: "error", StatusCode.UNSET: "unset"}


def span_data(span: ReadableSpan, source: str = "process") -> SpanData:
    """Copy what toolmeter reads out of a finished SDK span."""
    ctx = span.context
    parent = span.parent
    status = span.status
    return SpanData(
        name=span.name,
        trace_id=format_trace_id(ctx.trace_id) if ctx else "0" * 32,
        span_id=format_span_id(ctx.span_id) if ctx else "0" * 16,
        parent_span_id=format_span_id(parent.span_id) if parent else None,
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        attributes=dict(span.attributes or {}),
        resource=dict(span.resource.attributes) if span.resource else {},
        status_code=_STATUS.get(status.status_code, "unset"),
        status_message=status.description,
        dropped_attributes=span.dropped_attributes,
        source=source,
        events=gen_ai_events((e.name, e.attributes or {}) for e in span.events) if span.events else (),
    )


_warned: set[str] = set()


def _local_pipeline(config: CollectorConfig, meter_provider: Any) -> Pipeline:
    """The in-process store's pipeline. Imported here, not at the top: forwarding mode, the light
    one, never loads DuckDB into the agent's process."""
    from collector.pipeline import Pipeline

    return Pipeline(config, meter_provider=meter_provider)


def _warn_once(key: str, message: str) -> None:
    """A failure on the agent's thread: logged at warning the first time, at debug after."""
    if key in _warned:
        logger.debug(message, exc_info=True)
    else:
        _warned.add(key)
        logger.warning(message, exc_info=True)


class ToolResultProcessor(SpanProcessor):
    """Records every tool call (and, lightly, every LLM call) into a DuckDB store.

    Args:
        db: path of the DuckDB file (created on first use).
        encoding: tiktoken encoding for counts, ``o200k_base`` or ``cl100k_base``.
        store_payloads: keep payloads for replay; False keeps numbers only.
        payload_cap_bytes: larger payloads are stored as head and tail, said explicitly.
        max_queue_size: spans waiting for the worker, at most.
        max_queued_bytes: payload bytes queued or being measured, at most (one larger
            payload goes through when nothing else is held).
        max_batch_size: spans per batch.
        flush_interval: seconds between writes.
        forward_to: OTLP/HTTP endpoint of a ``toolmeter serve`` (e.g. ``http://127.0.0.1:4318``):
            forward spans with their payloads there instead of measuring in this process.
        forward_token: bearer token for that receiver.
        meter_provider: where per-tool metrics go (:mod:`collector.metrics`); the global one by default.

    Unset arguments come from ``TOOLMETER_*`` variables (:mod:`collector.config`).
    """

    def __init__(
        self,
        db: str | os.PathLike[str] | None = None,
        *,
        encoding: str | None = None,
        store_payloads: bool | None = None,
        payload_cap_bytes: int | None = None,
        max_queue_size: int | None = None,
        max_queued_bytes: int | None = None,
        max_batch_size: int | None = None,
        flush_interval: float | None = None,
        forward_to: str | None = None,
        forward_token: str | None = None,
        meter_provider: Any = None,
    ) -> None:
        self.config = CollectorConfig.resolve(
            db=os.fspath(db) if db is not None else None,
            encoding=encoding,
            store_payloads=store_payloads,
            payload_cap_bytes=payload_cap_bytes,
            max_queue_size=max_queue_size,
            max_queued_bytes=max_queued_bytes,
            max_batch_size=max_batch_size,
            flush_interval=flush_interval,
        )
        self._forward_to = forward_to
        self._forward_token = forward_token
        self._forwarder = Forwarder(forward_to, forward_token) if forward_to else None
        self._meter_provider = meter_provider
        self._pipeline = _local_pipeline(self.config, meter_provider) if self._forwarder is None else None
        if self._pipeline is not None:
            self._pipeline.store.ensure_schema()  # fail here, in the user's set-up code, not later
        self._init_state()
        register_processor(self)
        # A forked child inherits the deque and counters but not the worker thread:
        # start afresh there. WeakMethod, so the hook does not keep us alive.
        if hasattr(os, "register_at_fork"):
            weak_reinit = weakref.WeakMethod(self._at_fork_reinit)
            os.register_at_fork(after_in_child=lambda: (m := weak_reinit()) and m())
        weak_shutdown = weakref.WeakMethod(self.shutdown)
        atexit.register(lambda: (m := weak_shutdown()) and m())

    # --- state -------------------------------------------------------------------------

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        """Set by shutdown: a retry's wait ends at once, so exit is not held by a backoff."""
        self._idle = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[Item, int]] = collections.deque()
        self._max_queue = self.config.max_queue_size
        self._max_bytes = self.config.max_queued_bytes
        self._max_batch = self.config.max_batch_size
        self._seen = 0  # tool/LLM spans offered (guarded by _lock, like _dropped)
        self._dropped = 0
        self._queued_bytes = 0  # payload bytes held: queued, or popped and not yet written
        self._enqueued = 0  # items accepted so far
        self._done = 0  # items accepted and then written or given up on
        self._shutdown = False
        self._dropped_warned = False
        self._dropped_reported = 0
        self._pid = os.getpid()
        self._worker = threading.Thread(target=self._run, name="toolmeter-worker", daemon=True)
        self._worker.start()

    def _at_fork_reinit(self) -> None:
        if self._forwarder is not None:
            self._forwarder = Forwarder(self._forward_to or "", self._forward_token)
        else:
            self._pipeline = _local_pipeline(self.config, self._meter_provider)
        self._init_state()

    @property
    def counters(self) -> dict[str, int]:
        """A snapshot of the collector's counters (seen, dropped, written, ...)."""
        if self._pipeline is not None:
            with self._pipeline.lock:
                snap = dict(vars(self._pipeline.counters))
        else:
            fw = self._forwarder
            snap = {"forwarded": fw.sent if fw else 0, "failed": fw.failed if fw else 0}
        with self._lock:
            snap.update(spans_seen=self._seen, dropped=self._dropped, queued=len(self._queue))
        return snap

    # --- the agent's thread ------------------------------------------------------------

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        # The agent's thread: a filter and an append, nothing that grows with the payload.
        try:
            attrs = _plain_attributes(span)
            kind = classify(span.name, attrs)
            if kind is None or self._shutdown:
                return
            raw, view = take_payloads(span)
            size = _attribute_payload_size(attrs)
            if raw is not None:
                size += len(raw)
            if view is not None:
                size += len(view)
            with self._lock:
                self._seen += 1
                queue = self._queue
                held = self._queued_bytes  # one payload over the limit goes through when nothing is held
                if len(queue) >= self._max_queue or (held and held + size > self._max_bytes):
                    self._dropped += 1
                    if not self._dropped_warned:
                        self._dropped_warned = True
                        logger.warning(
                            "toolmeter queue is full (%d spans); dropping tool spans and counting them. "
                            "Raise max_queue_size / max_queued_bytes if this persists.",
                            len(queue),
                        )
                    return
                # the span is immutable once ended; the worker reads it
                queue.append((Item(kind, span, raw, view), size))  # type: ignore[arg-type]
                self._queued_bytes += size
                self._enqueued += 1
                full = len(queue) >= self._max_batch
            if full:
                self._wake.set()
        except Exception:  # never into the agent
            _warn_once(
                "on_end", "toolmeter could not queue a span (it is dropped; further failures are logged at debug)"
            )

    # --- the worker ----------------------------------------------------------------------

    def _report_drops(self) -> None:
        """Once the queue has emptied after drops, say how many (holding ``_lock``), and warn
        again on the next episode: not once per process lifetime."""
        if self._dropped > self._dropped_reported:
            logger.warning(
                "toolmeter dropped %d span(s) while its queue was full (%d in all); the queue has room again",
                self._dropped - self._dropped_reported, self._dropped,
            )  # fmt: skip
            self._dropped_reported = self._dropped
            self._dropped_warned = False

    def _run(self) -> None:
        # Anything instrumented that we call (none today) must not trace itself.
        otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
        interval = self.config.flush_interval
        while True:
            self._wake.wait(interval)
            self._wake.clear()
            self._drain()
            if self._shutdown:
                with self._lock:
                    if not self._queue:
                        return

    def _drain(self) -> None:
        """Write everything queued now, batch by batch."""
        while True:
            with self._lock:
                if not self._queue:
                    self._report_drops()
                    return
                n = min(len(self._queue), self._max_batch)
                entries = [self._queue.popleft() for _ in range(n)]
            items = [item for item, _ in entries]
            self._write_items(items)
            # the payloads stay counted until written: the batch in hand and the queue
            # behind it together hold at most max_queued_bytes
            size = sum(size for _, size in entries)
            n = len(items)
            del entries, items
            with self._lock:
                self._queued_bytes -= size
                self._done += n
                self._idle.notify_all()

    def _write_items(self, items: list[Item]) -> None:
        if self._forwarder is not None:
            spans = [with_payloads(i.span, i.raw, i.view) for i in items]  # type: ignore[arg-type]
            self._forwarder.send(spans, stopping=self._shutdown)
            return
        pipeline = self._pipeline
        assert pipeline is not None
        converted = []
        for item in items:
            span = item.span
            if isinstance(span, ReadableSpan):
                span = span_data(span)
            converted.append(Item(item.kind, span, item.raw, item.view))
        batch = pipeline.build_batch(converted)
        with self._lock:
            seen, dropped = self._seen, self._dropped
        with pipeline.lock:
            pipeline.counters.spans_seen = seen
            pipeline.counters.dropped = dropped
        delay = 0.5
        while True:
            try:
                pipeline.write(batch, queued=len(self._queue))
                return
            except StoreError as e:
                # keep the batch and try again: the file may be held by a reader
                # for longer than the store's own retry, or the disk may be full.
                if self._shutdown and delay > 8:
                    logger.error("toolmeter gave up writing %d spans at shutdown: %s", len(items), e)
                    with pipeline.lock:
                        pipeline.counters.failed += len(items)
                    return
                logger.warning("toolmeter could not write a batch, retrying in %.1f s: %s", delay, e)
                self._stopping.wait(delay)
                delay = min(delay * 2, 30)
            except Exception:
                logger.exception("toolmeter failed to write a batch of %d spans", len(items))
                with pipeline.lock:
                    pipeline.counters.failed += len(items)
                return

    # --- flush and shutdown ----------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write everything accepted so far; True when done within the timeout."""
        if os.getpid() != self._pid:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        with self._lock:
            target = self._enqueued
        self._wake.set()
        with self._lock:
            while self._done < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._worker.is_alive():
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def shutdown(self) -> None:
        """Write what is queued, stop the worker; idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        self._stopping.set()
        self._wake.set()
        if self._worker.is_alive() and threading.current_thread() is not self._worker:
            self._worker.join(timeout=60)
            if self._worker.is_alive():
                logger.error("toolmeter worker did not stop within 60 s; %d spans not written", len(self._queue))


def _plain_attributes(span: Any) -> Any:
    """The span's attributes as a plain dict when the SDK allows it.

    ``ReadableSpan.attributes`` is a proxy over ``BoundedAttributes``, whose lookups run
    Python code under a lock; on_end makes about ten of them. Once a span has ended its
    attributes are immutable, so reading the backing dict is safe, and it is several
    times cheaper. Any other implementation falls back to the public mapping.
    """
    backing = getattr(getattr(span, "_attributes", None), "_dict", None)
    if isinstance(backing, dict):
        return backing
    return span.attributes or {}


_PAYLOAD_KEYS = (A.VIEW, *RESULT_KEYS)


def _attribute_payload_size(attrs: Any) -> int:
    """Characters of payloads carried as attributes: five O(1) look-ups (on the hot path)."""
    size = 0
    for key in _PAYLOAD_KEYS:
        value = attrs.get(key)
        if value is not None and value.__class__ in (str, bytes):
            size += len(value)
    return size
