"""Tool detail: the distribution of one tool's result sizes, and its envelope over time."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from collector.query.ranking import Filters
from dashboard import charts, queries
from dashboard.connection import run_query
from dashboard.format import human_bytes, human_tokens
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]
tools: list[str] = st.session_state["tool_names"]


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _load(path: str, f: Filters, tool: str, metric: str) -> dict[str, Any]:
    def q(con):  # type: ignore[no-untyped-def]
        return {
            "hist": queries.size_histogram(con, f, tool, metric),
            "pcts": queries.size_percentiles(con, f, tool, metric),
            "daily": queries.daily_envelope(con, f, tool),
            "changes": queries.schema_changes(con, f, tool),
            "largest": queries.largest_calls(con, f, tool),
            "declared_budget": queries.declared_budget(con, tool),
        }

    return run_query(path, q)


st.title("Tool detail")
if not tools:
    st.info("No tools match the filters.")
    st.stop()


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _top_eater(path: str, f: Filters) -> str | None:
    """The tool the home page ranks first (p99 view tokens), to open on."""
    table = run_query(path, lambda con: queries.tool_ranking(con, f, "view"))
    return None if table.empty else str(table["tool"].iloc[0])


default = st.query_params.get("tool") or _top_eater(DB, filters)
index = tools.index(default) if default in tools else 0
tool = st.selectbox("tool", tools, index=index, key="detail_tool")
if st.query_params.get("tool") != tool:
    st.query_params["tool"] = tool  # a copied URL opens this tool
metric = st.radio("size", list(queries.SIZE_METRICS), format_func=queries.SIZE_METRICS.__getitem__,
                  horizontal=True, key="detail_metric")  # fmt: skip
data = _load(DB, filters, tool, metric)
pcts = data["pcts"]
if not pcts["calls"]:
    st.info(
        f"No call of `{tool}` matches the filters (service, time range, encoding in the sidebar). "
        "Widen them, or pick another tool."
    )
    st.stop()
fmt = human_bytes if metric == "raw_bytes" else human_tokens
# the budget the selected calls declared, else the one the tool declared on its other calls
budget_tokens = pcts["budget_tokens"] if pcts["budget_tokens"] is not None else data["declared_budget"]
c1, c2, c3, c4, c5 = st.columns(5)
c1.metric("calls", f"{pcts['calls']:,}")
c2.metric("p50", fmt(pcts["p50"]))
c3.metric("p95", fmt(pcts["p95"]))
c4.metric("p99", fmt(pcts["p99"]))
c5.metric(
    "budget (tokens)",
    human_tokens(budget_tokens) if budget_tokens is not None else "not declared",
    help="the largest budget_tokens the tool declared"
    + ("" if pcts["budget_tokens"] is not None or budget_tokens is None else " (on calls outside the filters)"),
)

budget = budget_tokens if metric != "raw_bytes" else None
st.subheader("Distribution of result sizes")
st.plotly_chart(charts.size_histogram(data["hist"], pcts, queries.SIZE_METRICS[metric], budget), width="stretch",
                key="detail_histogram")  # fmt: skip
off_axis = [f"{pcts['empty']:,} returned nothing ({pcts['empty_errors']:,} of them failed)" if pcts["empty"] else "",
            f"{pcts['unknown']:,} have no measured size" if pcts["unknown"] else ""]  # fmt: skip
if any(off_axis):
    st.caption("Not on the log axis: " + "; ".join(p for p in off_axis if p) + ".")

st.subheader("Envelope over time")
changes: list[queries.SchemaChange] = data["changes"]
st.plotly_chart(charts.envelope_over_time(data["daily"], [c.day for c in changes], budget_tokens),
                width="stretch", key="detail_envelope")  # fmt: skip
for change in changes:
    with st.container(border=True):
        st.markdown(f"**Schema changed on {change.day}**: fingerprint `{change.before}` → `{change.after}`")
        if change.added:
            st.markdown("fields added: " + ", ".join(f"`{f}`" for f in change.added))
        if change.removed:
            st.markdown("fields removed: " + ", ".join(f"`{f}`" for f in change.removed))
        if change.changed:
            st.markdown("types changed: " + ", ".join(f"`{f}`" for f in change.changed))
if not changes:
    st.caption("No schema change: the dominant fingerprint stayed the same (or results are not JSON).")

st.subheader("Largest calls")
largest = data["largest"]
if largest.empty:
    st.info("No calls.")
else:
    st.caption("Select a row to replay its trace (same tab, filters kept).")
    table = pd.DataFrame(
        {
            "when": largest["start_time"],
            "service": largest["service_name"],
            "view tokens": largest["view_tokens"],
            "raw tokens": largest["raw_tokens"],
            "raw bytes": largest["raw_bytes"],
            "truncated": largest["truncated"].astype("boolean"),
            "raw over budget": largest["over_budget"].astype("boolean"),
            "view over budget": largest["view_over_budget"].astype("boolean"),
            "status": largest["status"],
        }
    )
    TOKENS = st.column_config.NumberColumn(format="compact", help="tokens")
    picked = st.dataframe(
        table, hide_index=True, width="stretch", key="largest_calls", on_select="rerun", selection_mode="single-row",
        height=35 * (len(table) + 1) + 3,
        column_config={"view tokens": TOKENS, "raw tokens": TOKENS, "raw bytes": st.column_config.NumberColumn(format="bytes"),
                       "when": st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm:ss")},
    )  # fmt: skip
    if picked.selection.rows:  # type: ignore[union-attr]
        row = largest.iloc[picked.selection.rows[0]]  # type: ignore[union-attr]
        # switch_page, not a link: a link opens a new session, which starts from default filters
        st.switch_page("app_pages/replay.py", query_params={"trace": str(row["trace_id"]), "span": str(row["span_id"])})
