"""Trace replay: each LLM call and tool call in order; raw results beside what the model saw."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from collector.query.ranking import Filters
from collector.store.payloads import Payload, load_payload
from collector.store.retention import payloads_removed_before
from dashboard import charts, queries
from dashboard.connection import run_query
from dashboard.excerpt import VIEW_HEAD_CHARS, VIEW_TAIL_CHARS, excerpt, preview, stored_text, to_html
from dashboard.format import human_bytes, human_tokens
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]
tools: list[str] = st.session_state["tool_names"]

# (comments, not docstrings: Streamlit would print a bare string on the page)
BOX_HEIGHT_PX = 600  # raw and view scroll in boxes of the same height, so they stay side by side
ORDER_LABELS = {"largest": "largest result first", "truncated": "with truncated results", "newest": "newest first"}


def _yes(value: Any) -> bool:
    """True for a true boolean of a nullable column (``np.True_``), False for false and NA."""
    return value is not None and value is not pd.NA and bool(value)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _traces(path: str, f: Filters, order: str, prefix: str, tool: str | None) -> pd.DataFrame:
    return run_query(path, lambda con: queries.find_traces(con, f, order, prefix, tool))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _trace(path: str, trace_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return run_query(path, lambda con: (queries.trace_steps(con, trace_id), queries.context_occupancy(con, trace_id),
                                        queries.context_events(con, trace_id)))  # fmt: skip


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _call(path: str, trace_id: str, span_id: str) -> tuple[dict[str, Any] | None, Payload | None, Payload | None]:
    def q(con: Any) -> tuple[dict[str, Any] | None, Payload | None, Payload | None]:
        call = queries.tool_call(con, trace_id, span_id)
        if call is not None:
            call["payloads_pruned_before"] = payloads_removed_before(con)
        return (
            call,
            load_payload(con, path, trace_id, span_id, "raw"),
            load_payload(con, path, trace_id, span_id, "view"),
        )

    return run_query(path, q)


st.title("Trace replay")
wanted_trace = st.query_params.get("trace", "")
wanted_span = st.query_params.get("span", "")

c1, c2, c3 = st.columns([2, 2, 2])
prefix = c1.text_input("trace id", value=wanted_trace, placeholder="paste a trace id or its first characters",
                       key="replay_prefix")  # fmt: skip
tool_filter = c2.selectbox("containing tool", [None, *tools], format_func=lambda t: "any tool" if t is None else t)
order = c3.radio("order", list(ORDER_LABELS), format_func=ORDER_LABELS.__getitem__, horizontal=True)
found = _traces(DB, filters, order, prefix, tool_filter)
if found.empty:
    st.info("No trace matches. Clear the trace id or pick another tool.")
    st.stop()


def _label(i: int) -> str:
    r = found.iloc[i]
    return (f"{r['trace_id'][:12]}… · {r['service']} · {pd.Timestamp(r['started']):%Y-%m-%d %H:%M} · "
            f"{r['tool_calls']} tool calls · largest {human_tokens(r['max_view_tokens'])} tokens"
            + (f" · {r['truncated_calls']} truncated" if r["truncated_calls"] else ""))  # fmt: skip


pick = st.selectbox("trace", range(len(found)), format_func=_label, key=f"trace_pick_{order}_{prefix}_{tool_filter}")
trace_id = str(found.iloc[pick]["trace_id"])
if st.query_params.get("trace") != trace_id:  # a copied URL opens this trace (the call is added below)
    st.query_params["trace"] = trace_id
    if "span" in st.query_params and wanted_trace != trace_id:
        del st.query_params["span"]
steps, occupancy, events = _trace(DB, trace_id)

st.subheader("Context window, call by call")
st.plotly_chart(charts.context_occupancy(occupancy, events), width="stretch", key="replay_occupancy")
for e in events.to_dict("records"):
    if e["kind"] == "compaction":
        what = "the conversation before it was compacted"
    else:
        tokens = e["cleared_input_tokens"]
        what = f"context editing cleared {e['cleared_tool_uses']} tool result(s)" + (
            f" ({int(tokens):,} input tokens)" if tokens == tokens and tokens is not None else "")  # fmt: skip
    st.caption(f"LLM call {e['step']}: {what}; {e['results_left']} result(s) leave the window there and cost "
               "nothing after it.")  # fmt: skip

st.subheader("Steps")
tool_steps = steps[steps["kind"] == "tool"].reset_index(drop=True)
shown = pd.DataFrame(
    {
        "#": range(1, len(steps) + 1),
        "kind": steps["kind"].map({"llm": "LLM call", "tool": "tool call"}),
        "name": steps["name"],
        "input tokens": steps["input_tokens"],
        "view tokens": steps["view_tokens"],
        "raw tokens": steps["raw_tokens"],
        "truncated": steps["truncated"].astype("boolean"),
        "view > budget": steps["view_over_budget"].astype("boolean"),
        "status": steps["status"].fillna(""),
    }
)
TOKENS = st.column_config.NumberColumn(format="localized", help="tokens")
st.dataframe(shown, hide_index=True, width="stretch", height=min(35 * (len(shown) + 1) + 3, 420), key="replay_steps",
             column_config={"input tokens": TOKENS, "view tokens": TOKENS, "raw tokens": TOKENS})  # fmt: skip
st.download_button("Download the steps (CSV)", steps.to_csv(index=False), file_name=f"toolmeter-trace-{trace_id}.csv",
                   mime="text/csv", key="steps_csv", icon=":material/download:")  # fmt: skip

if tool_steps.empty:
    st.info("This trace has no tool calls.")
    st.stop()
spans = list(tool_steps["span_id"])
# the step numbers of the table above, so "step 7" means the same row in both
step_no = [int(n) + 1 for n in steps.index[steps["kind"] == "tool"]]


def _default_call() -> int:
    """The call the link or the order asked for: the linked span, else the first truncated call
    when the order is "with truncated results", else the largest."""
    if wanted_span in spans:
        return spans.index(wanted_span)
    if order == "truncated":
        truncated = [k for k, v in enumerate(tool_steps["truncated"]) if _yes(v)]
        if truncated:
            return truncated[0]
    return int(tool_steps["view_tokens"].fillna(-1).idxmax())


def _call_label(k: int) -> str:
    r = tool_steps.iloc[k]
    marks = (" · truncated" if _yes(r["truncated"]) else "") + (
        " · view over budget" if _yes(r["view_over_budget"]) else ""
    )
    return f"step {step_no[k]}: {r['name']} ({human_tokens(r['view_tokens'])} tokens{marks})"


i = st.select_slider("tool call", options=list(range(len(spans))), value=_default_call(), format_func=_call_label)
if st.query_params.get("span") != spans[i]:
    st.query_params["span"] = str(spans[i])
call, raw, view = _call(DB, trace_id, spans[i])
if call is None:
    st.error("This tool call is no longer in the store.")
    st.stop()

st.subheader(f"{call['tool_name']}  ·  step {step_no[i]} of {len(steps)} (tool call {i + 1} of {len(spans)})")
if call["truncated"]:
    ranges = call["retained_ranges"] or []
    source = call["truncation_source"] or "unknown"
    st.warning(
        f"**Truncated** ({call['truncation_kind'] or 'unknown'}; {source}). "
        f"The tool produced **{human_bytes(call['raw_bytes'])} / {human_tokens(call['raw_tokens'])} tokens**; "
        f"the model was shown **{human_bytes(call['view_bytes'])} / {human_tokens(call['view_tokens'])} tokens**. "
        f"Retained byte ranges ({call['retained_source'] or 'none'}): "
        + (", ".join(f"{s:,}–{e:,}" for s, e in ranges[:12]) + (" …" if len(ranges) > 12 else "") if ranges else "none")
        + (f". Omitted: {human_bytes(call['omitted_bytes'])}." if call["omitted_bytes"] is not None else ".")
    )  # fmt: skip
cols = st.columns(4)
cols[0].metric("raw tokens", human_tokens(call["raw_tokens"]))
cols[1].metric("view tokens", human_tokens(call["view_tokens"]))
cols[2].metric("raw bytes", human_bytes(call["raw_bytes"]))
cols[3].metric(
    "budget (tokens)", human_tokens(call["budget_tokens"]) if call["budget_tokens"] is not None else "not declared"
)
# words, not metrics: a metric's large type cuts "diagnostic" to "diagno…"
st.markdown(f"shape **{call['shape'] or 'unknown'}** ({call['shape_source'] or 'no source'}) · "
            f"status **{call['status']}** · view from **{call['view_source'] or 'unknown'}**")  # fmt: skip
declared = []
if call.get("items_total") is not None:
    shown_items = call.get("retained_items") or []
    declared.append(
        f"list items shown **{call.get('items_shown') or 0:,} of {call['items_total']:,}** (declared"
        + ("; items " + ", ".join(f"{a:,}–{b - 1:,}" for a, b in shown_items[:8]) + (" …" if len(shown_items) > 8 else "")
           if shown_items else "") + ")"
    )  # fmt: skip
if call.get("handle"):
    declared.append(f"the whole result is kept behind handle `{call['handle']}` (`read_result`, `filter_result`)")
if declared:
    st.markdown(" · ".join(declared))
for w in call["warnings"] or []:
    st.caption(f"⚠ {w}")

left, right = st.columns(2)
with left:
    st.markdown("**Raw result** (what the tool produced; retained ranges marked)")
    pruned = call["payloads_pruned_before"]
    if raw is None and pruned is not None and call["start_time"] < pruned:
        st.info(f"Payload removed by retention: payloads of calls before {pruned:%Y-%m-%d %H:%M} UTC were pruned "
                "(`--retain-payloads`, TOOLMETER_RETAIN_PAYLOADS). The figures above are kept.")  # fmt: skip
    elif raw is None:
        st.info("No raw payload stored for this call (numbers-only store, or the span carried none).")
    else:
        if raw.cut:
            st.caption(
                f"Stored as head and tail only: {human_bytes(raw.omitted_bytes)} in the middle were over the payload cap."
            )
        st.html(to_html(excerpt(raw, call["retained_ranges"])))
        if st.toggle("show the whole stored raw payload", key=f"full_{spans[i]}"):
            st.code(stored_text(raw), language=None, wrap_lines=True, height=BOX_HEIGHT_PX)
with right:
    st.markdown("**Model-facing view** (what the model was shown)")
    if view is not None:
        text = stored_text(view)
    elif call["view_source"] == "raw" and raw is not None:
        text = stored_text(raw)
        st.caption("No separate view: the model was shown the raw result.")
    else:
        text = ""
        st.info("No view payload stored.")
    if text:
        # never cut silently: the end of a view is where truncation notes and the last rows are
        st.code(preview(text), language=None, wrap_lines=True, height=BOX_HEIGHT_PX)
        if len(text) > VIEW_HEAD_CHARS + VIEW_TAIL_CHARS and st.toggle(
            "show the whole view", key=f"fullview_{spans[i]}"
        ):
            st.code(text, language=None, wrap_lines=True, height=BOX_HEIGHT_PX)
