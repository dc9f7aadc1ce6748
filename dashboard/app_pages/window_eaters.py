"""Window eaters: which tool puts the most into the context window."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from collector.query.ranking import Filters
from dashboard import charts, queries
from dashboard.connection import run_query
from dashboard.format import human_tokens, percent
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]

BY_LABELS = {"view": "p99 view tokens", "raw": "p99 raw tokens", "bytes": "p99 bytes", "cost": "window cost"}


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _load(path: str, f: Filters, by: str, exact: bool | None) -> tuple[pd.DataFrame, dict[str, Any]]:
    def q(con: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
        table = queries.tool_ranking(con, f, by, exact)
        kpi = queries.kpis(con, table)
        kpi["open_alerts"] = [a["summary"] for a in queries.alerts(con, ("open",), f) or []]
        return table, kpi

    return run_query(path, q)


st.title("Window eaters")
st.caption("Which tool puts the most into the model's context window. Click a bar or a row to open the tool.")
left, right = st.columns([3, 1])
by = left.radio("rank by", list(BY_LABELS), format_func=BY_LABELS.__getitem__, horizontal=True, key="rank_by")
exact = right.toggle("exact percentiles", key="exact_percentiles",
                     help="over every call; off: days with a daily rollup are read from it (within 1 %) "
                          "when they stand for over a million calls")  # fmt: skip
table, kpi = _load(DB, filters, by, True if exact else None)
if not table.empty:
    st.caption("Percentiles over every call, not a sample." if table["percentiles"].iloc[0] == "exact" else
               "Percentiles from daily rollups, within 1 % of exact; counts, maxima, rates and window cost are "
               "exact. Switch on *exact percentiles* for the exact figures.")  # fmt: skip

c1, c2, c3, c4 = st.columns(4)
c1.metric("tool calls", f"{kpi['calls']:,}")
c2.metric("window cost", f"{human_tokens(kpi['window_cost_tokens'])} tokens")
c3.metric("top tool's share of window cost", percent(kpi["top_tool_share"]), delta=kpi["top_tool"] or None,
          delta_color="off", delta_arrow="off", help="the tool with the largest window cost, named below")  # fmt: skip
c4.metric("truncated results", f"{kpi['truncated']:,}")
if kpi["dropped"] or kpi["failed"]:
    st.warning(
        f"Collectors dropped {kpi['dropped']:,} span(s) (queue full) and failed on {kpi['failed']:,}: "
        "these calls are missing from the figures below."
    )
if kpi["refused"]:
    st.info(
        f"The receiver answered {kpi['refused']:,} request(s) with 503 because its queue was full: it could not "
        "keep up with what was sent. OTLP exporters send such requests again, so their calls are counted unless "
        "a client gave up; the receiver's log says when its queue filled."
    )

if kpi["open_alerts"]:
    st.warning(
        f"**{len(kpi['open_alerts'])} open alert(s)**: " + "; ".join(kpi["open_alerts"][:3])
        + (" …" if len(kpi["open_alerts"]) > 3 else "") + ". See the Alerts page.",
        icon=":material/notifications:",
    )  # fmt: skip
if table.empty:
    st.info("No tool calls match the filters.")
    st.stop()

# a click on a bar (or a table row, below) opens that tool's detail
bar = st.plotly_chart(charts.ranking_bar(table, by), width="stretch", key="ranking_bar", on_select="rerun",
                      selection_mode="points")  # fmt: skip
clicked = [p.get("y") for p in (bar.selection.points if bar else []) if p.get("y")]  # type: ignore[union-attr]
if clicked:
    st.switch_page("app_pages/tool_detail.py", query_params={"tool": str(clicked[0])})

# numbers stay numbers (so the columns sort as numbers); only their display is formatted.
# Eleven columns fit beside the sidebar at 1440 px; the maxima and p95 are on Tool detail.
shown = pd.DataFrame(
    {
        "tool": table["tool"],
        "calls": table["calls"],
        "view p50": table["view_tokens_p50"],
        "view p99": table["view_tokens_p99"],
        "raw p99": table["raw_tokens_p99"],
        "bytes p99": table["raw_bytes_p99"],
        "budget": table["budget_tokens"],
        "truncated": table["truncated_rate"],
        "raw > budget": table["raw_over_budget_rate"],
        "view > budget": table["view_over_budget_rate"],
        "window cost": table["window_cost_tokens"],
    }
)


def _number(help: str, format: str = "compact", width: int = 74) -> Any:
    return st.column_config.NumberColumn(format=format, help=help, width=width)


picked = st.dataframe(
    shown,
    key="ranking_table",
    on_select="rerun",
    selection_mode="single-row",
    hide_index=True,
    width="stretch",
    height=35 * (len(shown) + 1) + 3,  # every row, no inner scroll
    column_config={
        "tool": st.column_config.TextColumn(width=156),
        "calls": _number("tool calls in the filtered range", "localized"),
        "view p50": _number("median tokens shown to the model"),
        "view p99": _number("p99 tokens shown to the model (exact or from rollups: the caption above says which)"),
        "raw p99": _number("p99 tokens the tool produced"),
        "bytes p99": _number("p99 bytes the tool produced", "bytes"),
        "budget": _number("the tool's declared budget (tokens); empty: none declared"),
        "truncated": _number("share of calls whose view was cut", "percent"),
        "raw > budget": _number("raw over budget: share of calls whose raw result was over the tool's budget "
                                "(the tool produced more)", "percent", 84),
        "view > budget": _number("view over budget: share of calls whose view was still over the budget "
                                 "(the budget did not hold)", "percent", 90),
        "window cost": _number("tokens of this tool's results re-read by later LLM calls", width=80),
    },
)  # fmt: skip
st.download_button("Download the ranking (CSV)", table.to_csv(index=False), file_name="toolmeter-ranking.csv",
                   mime="text/csv", key="ranking_csv", icon=":material/download:")  # fmt: skip
if picked.selection.rows:  # type: ignore[union-attr]
    st.switch_page("app_pages/tool_detail.py", query_params={"tool": str(shown.iloc[picked.selection.rows[0]]["tool"])})  # type: ignore[union-attr]
