"""Views that reach the store after their tool call: joined late, or by the conversation.

The tool span and the LLM call that read its result often end in different batches (the
LLM call takes seconds): the store hands back, with each write, the stored tool calls of
the traces it touched whose view has now arrived (``pending_joins``), and the model's tool
responses no call id claims (``unclaimed_views``). :class:`ViewJoins` measures those views
and replaces the rows, inside the write's own transaction; responses that no tool span stands
for become tool calls of their own (``origin = 'messages'``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from collector.dialects import matching
from collector.measure.measurement import infer_retained, measure, merge_ranges, truncation_kind
from collector.model import ToolCall
from collector.store.database import Batch, WriteResult
from collector.store.payloads import inline_bytes

if TYPE_CHECKING:
    from collector.pipeline import Pipeline

NO_VIEW_WARNING = "no view joined (the tool span has no call id): "

ORDER_WARNING = (
    "view joined by the conversation (the only call and response of this tool around that model call), "
    "not by a call id; the span carried no result to confirm it",
)


class ViewJoins:
    """Late and conversation joins for one :class:`~collector.pipeline.Pipeline` (its store and counter)."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def of_write(self, result: WriteResult) -> int:
        """Write the joins a write found (``result``; called inside its transaction); returns the tool
        calls added (derived from the messages), counted by the caller once the write commits."""
        if result.pending_joins:
            self.late_views(result.pending_joins)
        return self.conversation(result)[1] if result.unclaimed_views else 0

    def late_views(self, pending: list[dict[str, Any]], drop: list[tuple[str, str]] | None = None) -> int:
        """Measure the view of tool calls whose response reached the model in a later batch.

        The tool span and the LLM call that read its result often end in different batches
        (the LLM call takes seconds); ``pending`` comes from the write of the traces it touched:
        stored tool rows with the ``message_*`` columns of their view (and ``view_join``).
        Returns how many tool calls got their view.
        """
        rows: list[dict[str, Any]] = []
        late = Batch()
        for old in pending:
            stored = self._stored_raw(old)
            raw = stored if stored is not None and not old["raw_cut"] else None
            view: str | None = None
            if old.get("message_inline") is not None:
                view = bytes(old["message_inline"]).decode("utf-8", errors="replace")
            elif old["message_blob_id"] is not None and self.pipeline.payloads is not None:
                view = self.pipeline.payloads.get(old["message_blob_id"]).decode("utf-8", errors="replace")
            how = old.get("view_join") or "call_id"
            warnings = tuple(w for w in old["warnings"] or [] if "payload stored as head and tail" not in w)
            if how == "order" and raw is None and stored is None and old["raw_bytes"] is None and view is not None:
                raw = view.encode("utf-8")  # the span carried no result: the model's copy is the only one
            call = ToolCall(
                trace_id=old["trace_id"], span_id=old["span_id"], parent_span_id=old["parent_span_id"],
                tool_name=old["tool_name"], dialect=old["dialect"], start_ns=old["start_ns"], end_ns=old["end_ns"],
                tool_call_id=old["tool_call_id"], service_name=old["service_name"], agent_name=old["agent_name"],
                status=old["status"], error=old["error"], arguments=old["arguments"], raw=raw, view=view,
                view_origin="message", view_join=how, origin=old["origin"] or "span",
                raw_bytes_declared=old["raw_bytes"] if raw is None else None,
                raw_tokens_declared=old["raw_tokens"] if raw is None else None,
                view_bytes_declared=old["message_bytes"] if view is None else None,
                view_tokens_declared=old["message_tokens"] if view is None else None,
                budget_tokens=old["budget_tokens"],
                truncated=old["truncated"] if old["truncation_source"] == "declared" else None,
                retained=tuple(tuple(r) for r in old["retained_ranges"]) if old["retained_source"] == "declared" else None,  # type: ignore[misc]
                shape=old["shape"] if old["shape_source"] == "declared" else None,
                source=old["source"],
                warnings=warnings + (ORDER_WARNING if how == "order" else ()),
            )  # fmt: skip
            measured = measure(call, self.pipeline.counter)
            row, payloads = measured.row(), measured.payloads
            if old["raw_bytes"] is not None or old["raw_tokens"] is not None:
                # raw figures were measured on the original; the stored raw is redacted
                for column in ("raw_bytes", "raw_tokens", "raw_tokens_exact", "over_budget", "schema_fingerprint",
                               "schema_fields", "shape", "shape_source", "raw_wrapper", "wrapper_bytes",
                               "wrapper_tokens"):  # fmt: skip
                    row[column] = old[column]
            if raw is None and stored is not None and view is not None and row["truncation_source"] != "declared":
                _retained_in_head_and_tail(row, stored, old, view.encode("utf-8", errors="surrogatepass"))
            # the same redaction as any payload; the raw is already stored (and redacted)
            kept = {k: v for k, v in payloads.items() if k == "view" or (k == "raw" and stored is None)}
            self.pipeline._store_payloads(row, kept, late)
            rows.append(row)
        self.pipeline.store.replace_tool_rows(rows, late.payload_rows, drop or [])
        return len(rows)

    def conversation(self, result: WriteResult) -> tuple[int, int]:
        """Join id-less tool calls to the model's input by the conversation, and record as tool calls the
        tool responses that no tool span stands for (``origin = 'messages'``). Returns (rows changed,
        of which tool calls added), counted by the caller once the write's transaction commits."""
        views = result.unclaimed_views
        if not views:
            return 0, 0
        offered = [matching.Offered(v["trace_id"], v["tool_call_id"], v["tool_name"], v["llm_start_ns"] or 0,
                                    v["position"] or 0, self._view_bytes(v) or b"") for v in views]  # fmt: skip
        calls = [matching.Call(i, r["trace_id"], r["tool_name"], r["start_ns"], r["end_ns"], self._stored_raw(r))
                 for i, r in enumerate(result.idless_calls)]  # fmt: skip
        pending = []
        claimed: set[tuple[str, str]] = set()
        drop: list[tuple[str, str]] = []
        pairs = matching.match(calls, offered)
        for i, (o, how) in pairs.items():
            old = dict(result.idless_calls[i])
            v = next(v for v in views if (v["trace_id"], v["tool_call_id"]) == (o.trace_id, o.call_id))
            if v.get("derived_span_id"):  # recorded from the messages before its tool span arrived
                drop.append((v["trace_id"], v["derived_span_id"]))
            old.update(tool_call_id=o.call_id, view_join=how, message_bytes=v["bytes"], message_tokens=v["tokens"],
                       message_blob_id=v["blob_id"], message_inline=v["inline"])  # fmt: skip
            pending.append(old)
            claimed.add((o.trace_id, o.call_id))
        changed = self.late_views(pending, drop) if pending else 0
        unjoined = []
        for i, r in enumerate(result.idless_calls):
            later = [o for o in offered if o.trace_id == r["trace_id"] and o.llm_start_ns >= r["end_ns"]]
            if i in pairs or not later or any(NO_VIEW_WARNING in w for w in r["warnings"] or []):
                continue
            row = dict(r)
            row["warnings"] = [*(r["warnings"] or []), NO_VIEW_WARNING + (
                "its span carries no result to compare, and more than one call or response of this tool meet there"
                if r["raw_bytes"] is None else "no response of this tool there matches its result")]  # fmt: skip
            unjoined.append(row)
        if unjoined:
            self.pipeline.store.replace_tool_rows(unjoined, [])
        # responses no tool span claims, in traces with no id-less call of that tool left to claim them
        waiting = {(r["trace_id"], r["tool_name"]) for i, r in enumerate(result.idless_calls) if i not in pairs}
        derived = [v for v in views if (v["trace_id"], v["tool_call_id"]) not in claimed
                   and (v["trace_id"], v["tool_name"]) not in waiting and v["llm_start_ns"] is not None
                   and not v.get("derived_span_id")]  # fmt: skip
        added = self._derive(derived) if derived else 0
        return changed + added, added

    def _derive(self, views: list[dict[str, Any]]) -> int:
        """Tool calls recorded from the messages alone: raw and view are what the application passed back."""
        batch = Batch()
        for v in views:
            text = self._view_bytes(v)
            at = int(v["llm_start_ns"]) - 1  # ended just before the model call that read it
            call = ToolCall(
                trace_id=v["trace_id"], tool_call_id=v["tool_call_id"], tool_name=v["tool_name"] or "(unnamed)",
                span_id=hashlib.sha256(f"messages:{v['trace_id']}:{v['tool_call_id']}".encode()).hexdigest()[:16],
                dialect=v["dialect"] or "messages", start_ns=at, end_ns=at, service_name=v["service_name"],
                raw=text, view=text, view_origin="message", view_join="call_id", origin="messages",
                raw_tokens_declared=v["tokens"] if text is None else None,
                raw_bytes_declared=v["bytes"] if text is None else None, source="messages",
                warnings=("no tool span for this call: recorded from the tool message the application sent the model "
                          "(raw is that message; the tool itself may have returned more)",),
            )  # fmt: skip
            measured = measure(call, self.pipeline.counter)
            row, payloads = measured.row(), measured.payloads
            row["view_source"] = "message"
            self.pipeline._store_payloads(row, payloads, batch)
            batch.tool_rows.append(row)
        return self.pipeline.store.write(batch).tool_calls

    def _view_bytes(self, v: dict[str, Any]) -> bytes | None:
        if v.get("inline") is not None:
            return bytes(v["inline"])
        if v.get("blob_id") is not None and self.pipeline.payloads is not None:
            return self.pipeline.payloads.get(v["blob_id"])
        return None

    def _stored_raw(self, row: dict[str, Any]) -> bytes | None:
        """The raw payload of a stored call as stored (redacted, same length; head and tail when cut)."""
        if row["raw_cut"] is None:
            return None
        if row["raw_inline"] is not None:
            return inline_bytes(row["raw_inline"], row["raw_inline_codec"])
        if self.pipeline.payloads is None or row["raw_blob_id"] is None:
            return None
        return self.pipeline.payloads.get(row["raw_blob_id"])


def _retained_in_head_and_tail(row: dict[str, Any], stored: bytes, old: dict[str, Any], view: bytes) -> None:
    """Truncation and retained ranges of a raw stored cut (head and tail only), from what was kept.

    The view's pieces are located in the stored head and tail and mapped back to offsets of
    the whole raw, so a 100 MB raw gives the ranges a 1 KB one does whenever the model saw
    parts of its first and last ``payload_cap_bytes / 2``; a part of the view that came from
    the middle is said in a warning.
    """
    total = int(old["raw_bytes"] or 0)
    head = int(old.get("raw_head_bytes") or 0)
    shift = total - len(stored)
    ret = infer_retained(stored, view)
    ranges = []
    for s, e in ret.ranges:
        if s >= head:
            s, e = s + shift, e + shift
        elif e > head:  # a piece across the join of head and tail is two pieces of the raw
            ranges.append((s, head))
            s, e = head + shift, e + shift
        ranges.append((s, e))
    union = sum(e - s for s, e in merge_ranges(ranges))
    share = ret.view_bytes_from_raw / max(len(view), 1)
    truncated = union < total
    row.update(truncated=truncated, truncation_source="inferred", retained_ranges=[list(r) for r in ranges],
               retained_source="inferred", retained_bytes=union,
               retained_coverage=min(ret.view_bytes_from_raw / len(view), 1.0) if view else None,
               truncation_kind=truncation_kind(ranges, total, share) if truncated else None,
               omitted_bytes=total - union if truncated else None)  # fmt: skip
    missing = len(view) - ret.view_bytes_from_raw
    if missing > 256 and share > 0.1:
        row["warnings"].append(
            f"{missing:,} bytes of the view were not found in the stored head and tail of the raw (it is over the "
            "payload cap): they came from its middle or are notes; raise TOOLMETER_PAYLOAD_CAP_BYTES to locate them"
        )
