"""The measurement pipeline shared by the in-process processor and file ingest.

spans -> (:mod:`collector.dialects`) tool and LLM calls -> (:mod:`collector.measure`)
rows -> (:mod:`collector.store`) one transaction per batch.

One bad span never costs the rest of its batch: it becomes an ``ingest_issues`` row
(naming the source, span and field) and is counted in ``failed``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from collector.config import CollectorConfig
from collector.dialects import LLM, TOOL, SpanData, extract_llm_call, extract_tool_call
from collector.measure import measure
from collector.messages import tool_responses
from collector.metrics import ToolMetrics
from collector.model import Issue, ToolCall
from collector.payload_store import PayloadStore, payload_dir
from collector.redact import Redactor
from collector.store import Batch, Store, WriteResult
from collector.tokens import TokenCounter

logger = logging.getLogger("toolmeter")


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


LOG = "log"


class Item(NamedTuple):
    """One span waiting to be measured, with payloads handed over in-process.

    A NamedTuple, not a dataclass: the processor builds one per span on the agent's
    thread, and a tuple is the cheapest record Python has.
    """

    kind: str
    span: SpanData  # a LogData when kind is "log"
    raw: str | bytes | None = None
    view: str | bytes | None = None


INLINE_MAX_BYTES = 16 * 1024
"""Payloads up to this size are kept in DuckDB itself: a file per small payload costs more
than the payload (most tool results are small); large ones go to the payload store."""


def payload_row(
    payloads: PayloadStore | None, trace_id: str, span_id: str, kind: str, data: bytes, cap: int
) -> dict[str, Any]:
    """Store a payload (whole up to ``cap`` bytes, else head and tail) and return its row.

    With no payload store (a DuckLake store keeps no files beside it), every payload is inline.
    """
    cut = len(data) > cap
    head = cap // 2 if cut else len(data)
    tail = cap - head if cut else 0
    stored = data[:head] + data[len(data) - tail :] if cut else data
    inline = payloads is None or len(stored) <= INLINE_MAX_BYTES
    blob_id = None if inline or payloads is None else payloads.put(stored)
    return {
        "trace_id": trace_id,
        "span_id": span_id,
        "kind": kind,
        "total_bytes": len(data),
        "sha256": blob_id if blob_id and not cut else hashlib.sha256(data).hexdigest(),
        "cut": cut,
        "head_bytes": head,
        "tail_bytes": tail,
        "blob_id": blob_id,
        "inline": stored if inline else None,
    }


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
        self.counter = TokenCounter(config.encoding)
        self.counters = Counters()
        self.lock = threading.Lock()
        self.collector_id = collector_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.started_at = datetime.now(UTC)

    def build_batch(self, items: list[Item], extra_issues: list[Issue] | None = None) -> Batch:
        """Measure ``items`` into a batch (CPU work; no I/O)."""
        batch = Batch()
        issues = list(extra_issues or [])
        failed = 0
        seen_views = self._message_views(items, batch)
        for item in items:
            try:
                if item.kind == TOOL:
                    call, found = extract_tool_call(item.span, item.raw, item.view)
                    issues += found
                    if call.view is None and call.tool_call_id is not None:
                        text = seen_views.get((call.trace_id, call.tool_call_id))
                        if text is not None:  # the model's input in this batch says what it saw
                            call = replace(call, view=text, view_origin="message", view_join="call_id")
                    row, payloads = measure(call, self.counter)
                    self._store_payloads(row, payloads, batch)
                    batch.tool_rows.append(row)
                    del payloads  # UTF-8 copies as large as the result: not alive while the next is measured
                elif item.kind == LLM:
                    llm, found = extract_llm_call(item.span)
                    issues += found
                    batch.llm_rows.append(asdict(llm))
                elif item.kind == LOG:
                    self._log_item(item, batch, issues)
            except Exception as e:  # one bad span must not cost the batch
                failed += 1
                logger.warning("toolmeter could not measure span %s: %s", item.span.span_id, e, exc_info=True)
                issues.append(
                    Issue(
                        item.span.source,
                        f"could not be measured ({type(e).__name__}: {e}); the span was skipped",
                        item.span.trace_id,
                        item.span.span_id,
                        level="error",
                    )
                )
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
        if self.config.store_payloads:
            cap = self.config.payload_cap_bytes
            stored = []
            for kind, data in payloads.items():
                clean, n = self.redactor.redact_bytes_same_length(data)
                redactions += n
                stored.append(payload_row(self.payloads, row["trace_id"], row["span_id"], kind, clean, cap))
            batch.payload_rows += stored
            if any(p["cut"] for p in stored):
                row["warnings"].append(
                    f"payload stored as head and tail only (over {cap:,} bytes); figures are from the whole payload"
                )
        row["redactions"] = redactions
        if redactions:
            row["warnings"].append(f"{redactions} secret(s) redacted before storing; counts are of the original")

    def _message_views(self, items: list[Item], batch: Batch) -> dict[tuple[str, str], str]:
        """Record the tool responses that LLM calls' inputs carried; return them by (trace, call id)."""
        views: dict[tuple[str, str], str] = {}
        for item in items:
            if item.kind != LLM:
                continue
            span = item.span
            for call_id, text in tool_responses(span.attributes):
                key = (span.trace_id, call_id)
                if key in views:
                    continue
                views[key] = text
                data, _ = self.redactor.redact_bytes_same_length(text.encode("utf-8", errors="surrogatepass"))
                row: dict[str, Any] = {"trace_id": span.trace_id, "tool_call_id": call_id,
                                       "llm_span_id": span.span_id, "bytes": len(data), "tokens": None,
                                       "blob_id": None, "inline": None}  # fmt: skip
                if self.config.store_payloads:
                    if self.payloads is None:
                        row["inline"] = data
                    else:
                        row["blob_id"] = self.payloads.put(data)
                else:
                    row["tokens"] = self.counter.count(text).tokens
                batch.message_rows.append(row)
        return views

    def join_late_views(self, pending: list[dict[str, Any]]) -> int:
        """Measure the view of tool calls whose response reached the model in a later batch.

        The tool span and the LLM call that read its result often end in different batches
        (the LLM call takes seconds); ``pending`` comes from the write of the traces it touched.
        Returns how many tool calls got their view.
        """
        rows: list[dict[str, Any]] = []
        late = Batch()
        for old in pending:
            raw = self._stored_raw(old)
            view: str | None = None
            if old.get("message_inline") is not None:
                view = bytes(old["message_inline"]).decode("utf-8", errors="replace")
            elif old["message_blob_id"] is not None and self.payloads is not None:
                view = self.payloads.get(old["message_blob_id"]).decode("utf-8", errors="replace")
            call = ToolCall(
                trace_id=old["trace_id"], span_id=old["span_id"], parent_span_id=old["parent_span_id"],
                tool_name=old["tool_name"], dialect=old["dialect"], start_ns=old["start_ns"], end_ns=old["end_ns"],
                tool_call_id=old["tool_call_id"], service_name=old["service_name"], agent_name=old["agent_name"],
                status=old["status"], error=old["error"], arguments=old["arguments"], raw=raw, view=view,
                view_origin="message", view_join="call_id", origin=old["origin"] or "span",
                raw_bytes_declared=old["raw_bytes"] if raw is None else None,
                raw_tokens_declared=old["raw_tokens"] if raw is None else None,
                view_bytes_declared=old["message_bytes"] if view is None else None,
                view_tokens_declared=old["message_tokens"] if view is None else None,
                budget_tokens=old["budget_tokens"],
                truncated=old["truncated"] if old["truncation_source"] == "declared" else None,
                retained=tuple(tuple(r) for r in old["retained_ranges"]) if old["retained_source"] == "declared" else None,  # type: ignore[misc]
                shape=old["shape"] if old["shape_source"] == "declared" else None,
                source=old["source"],
                warnings=tuple(w for w in old["warnings"] or [] if "payload stored as head and tail" not in w),
            )  # fmt: skip
            row, payloads = measure(call, self.counter)
            # raw figures were measured on the original; the stored raw is redacted
            for column in ("raw_bytes", "raw_tokens", "raw_tokens_exact", "over_budget", "schema_fingerprint",
                           "schema_fields", "shape", "shape_source", "raw_wrapper", "wrapper_bytes",
                           "wrapper_tokens"):  # fmt: skip
                row[column] = old[column]
            # the same redaction as any payload; the raw is already stored (and redacted)
            self._store_payloads(row, {k: v for k, v in payloads.items() if k == "view"}, late)
            rows.append(row)
        self.store.replace_tool_rows(rows, late.payload_rows)
        return len(rows)

    def _stored_raw(self, row: dict[str, Any]) -> bytes | None:
        """The raw payload of a stored call (as stored: redacted, same length), when kept whole."""
        if row["raw_cut"] is None or row["raw_cut"]:
            return None
        if row["raw_inline"] is not None:
            return bytes(row["raw_inline"])
        if self.payloads is None:
            return None
        return self.payloads.get(row["raw_blob_id"])

    def _log_item(self, item: Item, batch: Batch, issues: list[Issue]) -> None:
        """An OTLP log event: Claude Code's tool results and API requests."""
        from collector import claude_code  # only receivers and ingest of logs need it

        log = item.span
        call, found = claude_code.tool_call_from_log(log)  # type: ignore[arg-type]
        issues += found
        if call is not None:
            row, payloads = measure(call, self.counter)
            self._store_payloads(row, payloads, batch)
            batch.tool_rows.append(row)
            return
        llm, found = claude_code.llm_call_from_log_with_issues(log)  # type: ignore[arg-type]
        issues += found
        if llm is not None:
            batch.llm_rows.append(asdict(llm))

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
        touched |= {r["trace_id"] for r in batch.tool_rows if r["tool_call_id"] and r["view_source"] == "raw"}
        batch.join_traces = sorted(touched)
        result = self.store.write(batch)
        self.metrics.record_rows(batch.tool_rows)
        self.metrics.record_dropped_total(stats["dropped"])
        if result.pending_joins:
            self.join_late_views(result.pending_joins)
        with self.lock:
            self.counters.tool_calls_written += result.tool_calls
            self.counters.llm_calls_written += result.llm_calls
            self.counters.duplicates += result.duplicates
        return result
