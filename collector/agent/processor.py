"""``ToolResultProcessor``: an OpenTelemetry span processor that measures tool results.

The agent's thread pays for a filter and an append: ``on_end`` looks up a few
attributes to see whether the span is a tool or LLM call, takes the payloads that
:func:`collector.record_tool_result` handed over, and appends to a bounded deque (in
forwarding mode, the span's values as :func:`collector.agent.frames.record` reads them, so
the span itself is released at once). It never blocks on I/O and never raises. A named
daemon thread does the rest in batches: reading the span, counting tokens, inferring
truncation, fingerprinting, and writing one DuckDB transaction per batch
(:mod:`collector.store.database`); in forwarding mode, handing the batch to the helper
process (:mod:`collector.agent.relay`).

When the deque is full (by count, or by the text its spans hold, queued or still being
measured and written: results, views, an LLM call's messages) the span is dropped and
counted; the count is stored with every flush and shown by the dashboard.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode, format_span_id, format_trace_id

from collector.agent.forward import Forwarder
from collector.agent.frames import encode, flatten, record
from collector.agent.guard import contain
from collector.agent.handoff import register_processor, take_payloads
from collector.agent.relay import Relay
from collector.config import CollectorConfig
from collector.dialects.spans import classify
from collector.errors import ConfigError, RejectedRows, StoreError
from collector.model import Item, SpanData, gen_ai_events
from collector.worker import BatchWorker

if TYPE_CHECKING:
    from collector.pipeline import Pipeline
    from collector.store.database import Batch

logger = logging.getLogger("toolmeter")

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


def _local_pipeline(config: CollectorConfig, meter_provider: Any) -> Pipeline:
    """The in-process store's pipeline. Imported here, not at the top: forwarding mode, the light
    one, never loads DuckDB into the agent's process."""
    from collector.pipeline import Pipeline

    return Pipeline(config, meter_provider=meter_provider)


SHUTDOWN_TIMEOUT_S = 60.0


class ToolResultProcessor(SpanProcessor):
    """Records every tool call (and, lightly, every LLM call) into a DuckDB store.

    Args:
        db: path of the DuckDB file (created on first use).
        config: a whole :class:`CollectorConfig` instead of the separate settings below (the
            two cannot be mixed).
        encoding: tiktoken encoding for counts, ``o200k_base`` or ``cl100k_base``.
        store_payloads: keep payloads for replay; False keeps numbers only.
        payload_cap_bytes: larger payloads are stored as head and tail, said explicitly.
        max_queue_size: spans waiting for the worker, at most.
        max_queued_bytes: characters of text (attribute values, handed-over payloads) the
            spans queued or being measured hold, at most (one larger span goes through when
            nothing else is held).
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
        config: CollectorConfig | None = None,
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
        settings = dict(
            db=os.fspath(db) if db is not None else None,
            encoding=encoding,
            store_payloads=store_payloads,
            payload_cap_bytes=payload_cap_bytes,
            max_queue_size=max_queue_size,
            max_queued_bytes=max_queued_bytes,
            max_batch_size=max_batch_size,
            flush_interval=flush_interval,
        )
        if config is not None:
            given = sorted(k for k, v in settings.items() if v is not None)
            if given:
                raise ConfigError(f"pass either config= or {', '.join(given)}, not both")
            self.config = config
        else:
            self.config = CollectorConfig.resolve(**settings)
        self._forward_to = forward_to
        self._forward_token = forward_token
        self._forwarder = Forwarder(forward_to, forward_token) if forward_to else None
        self._relay = Relay(forward_to, forward_token) if forward_to else None
        """Forwarding goes through the helper process; ``_forwarder`` sends from this process only
        when the helper cannot run (then the relay is dropped, see :meth:`_forward`). Set, it says
        forwarding mode: ``on_end`` queues each span's :func:`record`, not the span."""
        self._meter_provider = meter_provider
        self._pipeline = _local_pipeline(self.config, meter_provider) if self._forwarder is None else None
        if self._pipeline is not None:
            self._pipeline.store.ensure_schema()  # fail here, in the user's set-up code, not later
        self._init_state()
        register_processor(self)
        # A forked child inherits the queue and counters but not the worker thread:
        # start afresh there. WeakMethod, so the hook does not keep us alive.
        if hasattr(os, "register_at_fork"):
            weak_reinit = weakref.WeakMethod(self._at_fork_reinit)
            os.register_at_fork(after_in_child=lambda: (m := weak_reinit()) and m())
        weak_shutdown = weakref.WeakMethod(self.shutdown)
        atexit.register(lambda: (m := weak_shutdown()) and m())

    def _init_state(self) -> None:
        self._shutdown = False
        self._pending: tuple[list[Item], Batch] | None = None
        self._pid = os.getpid()
        # Items; in forwarding mode, records (see on_end)
        self._worker: BatchWorker[Any] = BatchWorker(
            "toolmeter-worker",
            self._write_items,
            give_up=self._give_up,
            max_items=self.config.max_queue_size,
            max_bytes=self.config.max_queued_bytes,
            batch_items=self.config.max_batch_size,
            interval=self.config.flush_interval,
            # a store error keeps the batch (the file may be held by a reader, the disk full);
            # anything else is a bug in measuring that retrying would not fix
            retry_on=(StoreError,),
            what="span",
            full_message="toolmeter queue is full; dropping tool spans and counting them. "
            "Raise max_queue_size / max_queued_bytes if this persists",
        )

    def _at_fork_reinit(self) -> None:
        if self._forwarder is not None:
            if self._relay is not None:
                self._relay.abandon()  # the parent's helper: let go of its pipe, or it never sees EOF
            self._forwarder = Forwarder(self._forward_to or "", self._forward_token)
            self._relay = Relay(self._forward_to or "", self._forward_token)
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
            fw, relay = self._forwarder, self._relay
            snap = {
                "forwarded": (fw.sent if fw else 0) + (relay.sent if relay else 0),
                "failed": (fw.failed if fw else 0) + (relay.failed if relay else 0),
            }
        w = self._worker
        snap.update(spans_seen=w.offered, dropped=w.dropped, queued=w.queued)
        return snap

    # --- the agent's thread ------------------------------------------------------------

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        # The agent's thread: a filter and an append, nothing that grows with the payload.
        # Written out rather than in helpers: each Python call here costs the agent ~60 ns.
        try:
            # the dict behind the SDK's attributes: its public mapping is a proxy over
            # BoundedAttributes whose lookups run Python under a lock, and an ended span's
            # attributes never change; any other implementation gets the public mapping
            backing = getattr(getattr(span, "_attributes", None), "_dict", None)
            attrs = backing if backing.__class__ is dict else (span.attributes or {})
            kind = classify(span.name, attrs)
            if kind is None or self._shutdown:
                return
            raw, view = take_payloads(span)
            size = 0
            # the text the queued span holds, whatever its key: a tool's result or view, an LLM
            # call's messages, flattened into an attribute each or not. ~30 ns an attribute,
            # never per byte: 3 us for a 101-attribute LLM span whose making cost the SDK ~48
            for value in attrs.values():
                if value.__class__ in _TEXT:
                    size += len(value)
            if raw is not None:
                size += len(raw)
            if view is not None:
                size += len(view)
            if self._forwarder is not None:  # forwarding mode
                # the span's values, read now while they are in the cache; the span goes at once
                self._worker.offer(record(span, raw, view), size)
                return
            # the span is immutable once ended; the worker reads it. tuple.__new__: the
            # NamedTuple's own constructor is Python code, twice the cost
            self._worker.offer(_new_tuple(Item, (kind, span, raw, view)), size)
        except Exception:  # never into the agent
            contain("queueing a span in on_end", "the span is not recorded")

    # --- the worker thread -----------------------------------------------------------------

    def _write_items(self, items: list[Item]) -> None:
        if self._forwarder is not None:
            self._forward(items)  # records (see on_end)
            return
        pipeline = self._pipeline
        assert pipeline is not None
        # a batch whose write failed is retried as built: measuring it again would only cost time
        pending = self._pending
        if pending is not None and pending[0] is items:
            batch = pending[1]
        else:
            batch = pipeline.build_batch([_as_span_data(item) for item in items])
            self._pending = (items, batch)
        w = self._worker
        with pipeline.lock:
            pipeline.counters.spans_seen = w.offered
            pipeline.counters.dropped = w.dropped
        try:
            pipeline.write(batch, queued=w.queued)
        except RejectedRows as e:
            # retrying would fail the same way: write the spans one at a time, setting aside
            # (counting and saying) each one the store refuses again
            logger.error("toolmeter: the store refused a batch of %d span(s) (%s); writing them one at a time",
                         len(items), e)  # fmt: skip
            pipeline.write_each([_as_span_data(item) for item in items], lambda data: pipeline.build_batch([data]),
                                lambda data: f"span {data.span.span_id} ({data.span.name})", queued=w.queued)  # fmt: skip
        self._pending = None

    def _forward(self, records: Sequence[tuple[Any, ...]]) -> None:
        relay = self._relay
        if relay is not None:
            try:
                relay.send(records)
                return
            except OSError as e:
                # no helper here (an embedded interpreter without a usable sys.executable, a
                # process limit): send from this process from now on, as before the helper
                logger.warning("toolmeter: %s; forwarding from the agent's process instead", e)
                self._relay = None
                relay.abandon()
        assert self._forwarder is not None
        self._forwarder.send_encoded(encode(*flatten(records)), len(records), stop=self._worker.stopping)

    def _give_up(self, items: list[Item], reason: BaseException) -> None:
        self._pending = None
        if self._pipeline is not None:
            with self._pipeline.lock:
                self._pipeline.counters.failed += len(items)
        elif self._forwarder is not None:
            self._forwarder.failed += len(items)

    # --- flush and shutdown ----------------------------------------------------------------

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Write everything accepted so far; True when done within the timeout."""
        if os.getpid() != self._pid:
            return True
        deadline = time.monotonic() + timeout_millis / 1000
        if not self._worker.flush(timeout_millis / 1000):
            return False
        relay = self._relay
        return relay is None or relay.flush(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Write what is queued, stop the worker; idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        started = time.monotonic()
        self._worker.shutdown(SHUTDOWN_TIMEOUT_S)
        if self._relay is not None:
            self._relay.close(max(5.0, SHUTDOWN_TIMEOUT_S - (time.monotonic() - started)))


def _as_span_data(item: Item) -> Item:
    span = item.span
    return Item(item.kind, span_data(span), item.raw, item.view) if isinstance(span, ReadableSpan) else item


_TEXT = (str, bytes)
_new_tuple = tuple.__new__
