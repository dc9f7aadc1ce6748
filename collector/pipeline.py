"""The measurement pipeline shared by the in-process processor and file ingest.

spans -> (:mod:`collector.dialects.spans`) tool and LLM calls -> (:mod:`collector.measure.measurement`)
rows -> (:mod:`collector.store.database`) one transaction per batch.

One bad span never costs the rest of its batch: it becomes an ``ingest_issues`` row
(naming the source, span and field) and is counted in ``failed``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

from collector.config import CollectorConfig
from collector.dialects import matching
from collector.dialects.messages import (
    MESSAGE_EVENTS,
    OPERATION_DETAILS,
    ToolResponse,
    responses_from_logs,
    tool_responses,
)
from collector.dialects.spans import LLM, TOOL, attribute_value_limit, extract_llm_call, extract_tool_call
from collector.errors import RejectedRows, StoreError
from collector.joins import ORDER_WARNING, ViewJoins
from collector.measure.measurement import measure, without_surrogates
from collector.measure.redaction import Redactor
from collector.measure.tokens import TokenCounter
from collector.metrics import METRIC_COLUMNS, ToolMetrics
from collector.model import LOG, Issue, Item, ToolCall
from collector.store.database import Batch, Store, WriteResult
from collector.store.payloads import INLINE_MAX_BYTES, PayloadStore, payload_dir, payload_row, same_as_row

logger = logging.getLogger("toolmeter")
P = TypeVar("P")


@dataclass
class Counters:
    """The collector's own counters; stored with every flush."""

    spans_seen: int = 0
    queued: int = 0
    tool_calls_written: int = 0
    llm_calls_written: int = 0
    dropped: int = 0
    failed: int = 0
    duplicates: int = 0
    refused: int = 0
    """Requests a receiver answered 503 because its queue was full (the client retries)."""
    metric_requests: int = 0
    """OTLP metrics requests a receiver answered and discarded (``/v1/metrics``)."""


class Pipeline:
    """Measures items and writes them; owns the store and the counters."""

    def __init__(self, config: CollectorConfig, collector_id: str | None = None, meter_provider: Any = None) -> None:
        self.config = config
        self.store = Store(config.db)
        # a lake keeps payloads inline (Parquet is written once, so large values cost no rewrite)
        self.payloads = None if self.store.lake is not None else PayloadStore(payload_dir(config.db))
        # per-tool histograms and counters through the OpenTelemetry metrics API: a no-op
        # unless the process (or meter_provider) has a metrics SDK configured
        self.metrics = ToolMetrics(meter_provider)
        self.redactor = Redactor.from_env()
        self.counter = TokenCounter(config.encoding, config.counter)
        self.counters = Counters()
        self.lock = threading.Lock()
        self.collector_id = collector_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.started_at = datetime.now(UTC)
        self._rollups_due = 0.0
        self.joins = ViewJoins(self)

    def build_batch(self, items: list[Item], extra_issues: list[Issue] | None = None) -> Batch:
        """Measure ``items`` into a batch (CPU work; no I/O)."""
        batch = Batch()
        issues = list(extra_issues or [])
        failed = 0
        seen_views = self._message_views(items, batch, issues)
        calls = self._tool_calls(items, seen_views, issues)
        for item in items:
            try:
                if item.kind == TOOL:
                    call = calls.get(id(item))
                    if isinstance(call, Exception):
                        raise call  # reported below, with the span
                    assert call is not None
                    measured = measure(call, self.counter)
                    row, payloads = measured.row(), measured.payloads
                    self._store_payloads(row, payloads, batch)
                    batch.tool_rows.append(row)
                    del measured, payloads  # UTF-8 copies as large as the result: not alive while the next is measured
                elif item.kind == LLM:
                    llm, found = extract_llm_call(item.span)
                    issues += found
                    batch.llm_rows.append(llm.row())
                elif item.kind == LOG and not is_message_event(item.span):  # type: ignore[arg-type]
                    self._log_item(item, batch, issues)
            except Exception as e:  # one bad span must not cost the batch
                failed += 1
                logger.warning("toolmeter could not measure span %s: %s", item.span.span_id, e, exc_info=True)
                issues.append(Issue(item.span.source, f"could not be measured ({type(e).__name__}: {e}); the span was skipped",
                                    item.span.trace_id, item.span.span_id, level="error"))  # fmt: skip
        batch.issue_rows = [
            {
                "collector_id": self.collector_id,
                "level": i.level,
                "source": i.source,
                "trace_id": i.trace_id,
                "span_id": i.span_id,
                "field": i.field,
                "message": i.message,
            }
            for i in issues
        ]
        with self.lock:
            self.counters.failed += failed
        return batch

    def _store_payloads(self, row: dict[str, Any], payloads: dict[str, bytes], batch: Batch) -> None:
        """Redact secrets, then queue the payloads for storage (figures were measured on the originals).

        Payloads are masked with same-length placeholders, so the retained ranges (byte
        offsets of the original) still point at the right bytes of what is stored.
        """
        redactions = 0
        for column in ("arguments", "error"):
            if row.get(column):
                row[column], n = self.redactor.redact_text(row[column])
                redactions += n
        row["redactions"] = redactions
        cut = False
        if self.config.store_payloads:
            kept: dict[str, dict[str, Any]] = {}
            for kind, data in payloads.items():
                if kind == "view" and "raw" in kept and data == payloads["raw"]:  # the model read all of it: kept once
                    batch.payload_rows.append(same_as_row(kept["raw"], "view"))
                    continue
                clean, n = self.redactor.redact_bytes_same_length(data)
                stored = kept[kind] = payload_row(
                    self.payloads, row["trace_id"], row["span_id"], kind, clean, self.config.payload_cap_bytes
                )
                stored["start_ns"] = row["start_ns"]
                batch.payload_rows.append(stored)
                row["redactions"] += n
                cut = cut or stored["cut"]
        if cut:
            row["warnings"].append(
                f"payload stored as head and tail only (over {self.config.payload_cap_bytes:,} bytes); "
                "figures are from the whole payload"
            )
        if row["redactions"]:
            row["warnings"].append(f"{row['redactions']} secret(s) redacted before storing; counts are of the original")

    def _tool_calls(
        self, items: list[Item], views: dict[tuple[str, str], tuple[ToolResponse, SpanLike]], issues: list[Issue]
    ) -> dict[int, ToolCall | Exception]:
        """Read the batch's tool spans and join the views its LLM calls carried (by id, else by the conversation).

        A span that cannot be read maps to its exception, raised where the batch reports failures.
        """
        calls: dict[int, ToolCall] = {}
        failed: dict[int, Exception] = {}
        limit = attribute_value_limit()
        for item in items:
            if item.kind != TOOL:
                continue
            try:
                call, found = extract_tool_call(item.span, item.raw, item.view, value_limit=limit)
            except Exception as e:  # reported per item in build_batch
                failed[id(item)] = e
                continue
            issues += found
            if call.view is None and call.tool_call_id is not None:
                seen = views.get((call.trace_id, call.tool_call_id))
                if seen is not None:  # the model's input in this batch says what it saw
                    # made just above and not handed on yet: completed in place (a replace of its
                    # 37 fields cost ~5 us, a twentieth of measuring a call with its model span)
                    call.view, call.view_origin, call.view_join = seen[0].text, "message", "call_id"
            calls[id(item)] = call
        idless = [
            matching.Call(key, c.trace_id, c.tool_name, c.start_ns, c.end_ns, c.raw)
            for key, c in calls.items()
            if c.view is None and c.tool_call_id is None
        ] if views else []  # fmt: skip
        if idless:
            offered = [_offered(r, span) for r, span in views.values()]
            for key, (o, how) in matching.match(idless, offered).items():
                c = calls[key]
                calls[key] = replace(c, view=o.text, view_origin="message", view_join=how, tool_call_id=o.call_id,
                                     raw=c.raw if c.raw is not None else (o.text if how == "order" else None),
                                     warnings=c.warnings + _order_warning(how, c))  # fmt: skip
        return {**calls, **failed}

    def _message_views(
        self, items: list[Item], batch: Batch, issues: list[Issue]
    ) -> dict[tuple[str, str], tuple[ToolResponse, SpanLike]]:
        """Record the tool responses that LLM calls' inputs carried; return them by (trace, call id).

        Inputs come from LLM spans (attributes or events) and from log records of the GenAI
        conventions (grouped by the span they belong to, in the order they were emitted).
        """
        views: dict[tuple[str, str], tuple[ToolResponse, SpanLike]] = {}
        found: list[tuple[ToolResponse, SpanLike]] = []
        groups: dict[tuple[str, str], list[Any]] = {}
        # the names of the tool calls the messages asked for, by (trace, call id); with log records
        # a tool's response and the assistant message naming it can arrive in different batches
        asked: dict[tuple[str, str], tuple[str, int]] = {}
        untraced = 0
        read: dict[str, set[str]] = {}  # each trace's call ids read already: the first carrier is kept
        for item in items:
            if item.kind == LLM:
                sp = item.span
                names: dict[str, str] = {}
                found += [(r, SpanLike(sp.trace_id, sp.span_id, sp.start_ns, sp.resource, sp.attributes))
                          for r in tool_responses(sp.attributes, sp.events, names, read.setdefault(sp.trace_id, set()))]  # fmt: skip
                asked.update(((sp.trace_id, cid), (name, sp.start_ns)) for cid, name in names.items())
            elif item.kind == LOG and is_message_event(item.span):  # type: ignore[arg-type]
                log: Any = item.span
                if log.trace_id:
                    groups.setdefault((log.trace_id, log.span_id or ""), []).append(log)
                else:
                    untraced += 1
        if untraced:
            issues.append(Issue("logs", (
                f"{untraced} GenAI message log record(s) carry no trace id, so the tool responses in them "
                "cannot be tied to a model call or a tool call and were skipped; emit them inside the model "
                "call's span (the logger provider and the tracer provider of one process share the context)"),
                field="traceId"))  # fmt: skip
        for (trace_id, span_id), logs in groups.items():
            logs.sort(key=lambda rec: rec.time_ns)
            events = [(_log_event_name(rec), rec.attributes, rec.body) for rec in logs]
            like = SpanLike(trace_id, span_id, logs[0].time_ns, logs[0].resource, logs[0].attributes)
            names = {}
            found += [(r, like) for r in responses_from_logs(events, names)]
            asked.update(((trace_id, cid), (name, like.start_ns)) for cid, name in names.items())
        for response, like in found:
            key = (like.trace_id, response.call_id)
            if key in views:
                continue
            if response.name is None and key in asked:
                response = replace(response, name=asked[key][0])
            views[key] = (response, like)
            span = like
            text = response.text
            data, _ = self.redactor.redact_bytes_same_length(text.encode("utf-8", errors="surrogatepass"))
            row: dict[str, Any] = {"trace_id": span.trace_id, "tool_call_id": response.call_id,
                                   "llm_span_id": span.span_id, "bytes": len(data), "tokens": None,
                                   "blob_id": None, "inline": None, "tool_name": response.name,
                                   "position": response.position, "llm_start_ns": span.start_ns,
                                   "service_name": _str(span.resource.get("service.name")),
                                   "dialect": _llm_dialect(span.attributes)}  # fmt: skip
            if self.config.store_payloads:
                if self.payloads is None or len(data) <= INLINE_MAX_BYTES:
                    row["inline"] = data
                else:
                    row["blob_id"] = self.payloads.put(data)
            else:
                row["tokens"] = self.counter.count(text).tokens
            batch.message_rows.append(row)
        # names whose response is not in this batch: the store names its views with them, whichever comes first
        batch.name_rows = [{"trace_id": trace_id, "tool_call_id": cid, "tool_name": name, "asked_ns": at}
                           for (trace_id, cid), (name, at) in asked.items()
                           if (trace_id, cid) not in views]  # fmt: skip
        return views

    def _log_item(self, item: Item, batch: Batch, issues: list[Issue]) -> None:
        """An OTLP log event: Claude Code's tool results and API requests."""
        from collector.dialects import claude_code  # only receivers and ingest of logs need it

        log = item.span
        call, found = claude_code.tool_call_from_log(log)  # type: ignore[arg-type]
        issues += found
        if call is not None:
            measured = measure(call, self.counter)
            row, payloads = measured.row(), measured.payloads
            self._store_payloads(row, payloads, batch)
            batch.tool_rows.append(row)
            return
        llm, found = claude_code.llm_call_from_log_with_issues(log)  # type: ignore[arg-type]
        issues += found
        if llm is not None:
            batch.llm_rows.append(llm.row())

    def refresh_rollups(self, force: bool = True) -> None:
        """Roll the days that closed (at most every :data:`ROLLUP_EVERY_S` unless ``force``), on
        the writer's thread; a failure is logged and tried again later: the rows stay the truth."""
        now = time.monotonic()
        if not force and now < self._rollups_due:
            return
        self._rollups_due = now + ROLLUP_EVERY_S
        try:
            self.store.refresh_rollups()
        except StoreError as e:
            logger.warning("toolmeter: rolling up closed days failed (tried again in %.0f s): %s", ROLLUP_EVERY_S, e)

    def write(self, batch: Batch, queued: int = 0) -> WriteResult:
        """Write ``batch`` with the counters as of now; updates the counters on success."""
        with self.lock:
            self.counters.queued = queued
            stats = asdict(self.counters)
        stats.update(
            collector_id=self.collector_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
        )
        batch.stats = stats
        # the view of a call may sit in another batch: an earlier LLM call's input, or a later one
        touched = {r["trace_id"] for r in batch.message_rows}
        touched |= batch.tool_traces("view_source", "raw")
        batch.join_traces = sorted(touched)
        added: list[int] = []  # the last try's: a write tried again joins again
        # the joins the batch made possible are written in its own transaction: both are stored or
        # neither, with one commit and one checkpoint (bench_flush.py --views: ~5 % less a call)
        result = self.store.write(batch, then=lambda found: added.append(self.joins.of_write(found)))
        self.refresh_rollups(force=False)
        if self.metrics.recording:
            self.metrics.record_rows(batch.tool_dicts(*METRIC_COLUMNS))
        self.metrics.record_dropped_total(stats["dropped"])
        with self.lock:
            self.counters.tool_calls_written += result.tool_calls + (added[-1] if added else 0)
            self.counters.llm_calls_written += result.llm_calls
            self.counters.duplicates += result.duplicates
        return result

    def set_aside(self, batch: Batch, what: str, reason: RejectedRows, kept: str = "", queued: int = 0) -> None:
        """Record that the store refused ``batch`` (``what`` names it): its tool and model calls
        count as failed, and an error-level ingest issue says why, written with the batch's spool
        position so that the writer goes on past it instead of retrying it for ever."""
        lost = batch.tool_count + len(batch.llm_rows)
        logger.error("toolmeter: the store refused %s (%d call(s) not stored): %s%s", what, lost, reason,
                     f"; {kept}" if kept else "")  # fmt: skip
        with self.lock:
            self.counters.failed += lost
        message = (f"{what} could not be stored and was set aside ({lost} call(s) not stored): {reason}"
                   + (f"; {kept}" if kept else "") + ". Please report it with the toolmeter version.")  # fmt: skip
        issue = {"collector_id": self.collector_id, "level": "error", "source": "store", "trace_id": None,
                 "span_id": None, "field": None, "message": message}  # fmt: skip
        self.write(Batch(issue_rows=[issue], progress=batch.progress), queued)

    def write_each(self, parts: Sequence[P], measure: Callable[[P], Batch], name: Callable[[P], str],
                   keep: Callable[[P], str] | None = None, queued: int = 0) -> None:  # fmt: skip
        """After the store refused a batch: write its ``parts`` (requests, spans) one at a time,
        each measured into a batch of its own, and set aside each one refused again (``name``
        says which; ``keep`` keeps it and says where), so one bad part does not stop the rest."""
        for part in parts:
            one = measure(part)
            try:
                self.write(one, queued=queued)
            except RejectedRows as e:
                self.set_aside(one, name(part), e, keep(part) if keep else "", queued)


ROLLUP_EVERY_S = 600.0
"""How often a writer rolls the days that closed (one query when none did)."""


def interleaved(items: list[Item], n_chunks: int) -> list[list[Item]]:
    """Items dealt into ``n_chunks`` chunks in turn (large results spread over the measuring threads);
    log records stay together in the first, in order: one LLM call's input may be many records."""
    logs = [i for i in items if i.kind == LOG]
    spans = [i for i in items if i.kind != LOG] if logs else items
    chunks = [spans[i::n_chunks] for i in range(n_chunks)]
    chunks[0] = logs + chunks[0]
    return [c for c in chunks if c] or [[]]


class SpanLike(NamedTuple):
    """What a message view keeps of the LLM span (or log records) it came from."""

    trace_id: str
    span_id: str
    start_ns: int
    resource: Any
    attributes: Any


def _order_warning(how: str, call: ToolCall) -> tuple[str, ...]:
    return ORDER_WARNING if how == "order" else ()


def _offered(r: ToolResponse, span: SpanLike) -> matching.Offered:
    return matching.Offered(span.trace_id, r.call_id, r.name, span.start_ns, r.position, r.text)


def _str(value: Any) -> str | None:
    return None if value is None else without_surrogates(str(value))[0]


def _llm_dialect(attrs: Any) -> str:
    if "gen_ai.input.messages" in attrs or "gen_ai.operation.name" in attrs:
        return "gen_ai"
    if "openinference.span.kind" in attrs:
        return "openinference"
    if "gen_ai.prompt.0.role" in attrs or "llm.request.type" in attrs:
        return "traceloop"
    return "gen_ai"


def _log_event_name(log: Any) -> str:
    name = log.event_name or log.attributes.get("event.name")
    return str(name) if name else ""


def is_message_event(log: Any) -> bool:
    """A GenAI log record carrying an LLM call's input messages (not a Claude Code event)."""
    name = _log_event_name(log)
    return name in MESSAGE_EVENTS or name == OPERATION_DETAILS
