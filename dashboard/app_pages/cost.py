"""Tokens as billed: window cost in each model's own tokens (calibrated from the traces' usage),
with the prompt cache, in money; and how many tool-result tokens a run puts in its context.

The same figures as ``toolmeter cost`` (both call :func:`collector.query.cost.window_costs`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pandas as pd
import streamlit as st

from collector.errors import ConfigError
from collector.query import prices
from collector.query.cost import window_costs
from collector.query.ranking import Filters
from collector.query.runs import run_distribution, runs_sql
from dashboard import charts
from dashboard.connection import run_query
from dashboard.format import human_tokens
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Counting reads, cache hits and calibrations...")
def _costs(path: str, f: Filters) -> dict[str, Any]:
    table = prices.load()
    costs = run_query(path, lambda con: window_costs(con, table, f))
    return {**costs, "calibrations": [asdict(c) for c in costs["calibrations"]]}


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _runs(path: str, f: Filters) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    def q(con: Any) -> tuple[list[dict[str, Any]], pd.DataFrame]:
        sql, params = runs_sql(f)
        return run_distribution(con, f), con.execute(sql, params).df()

    return run_query(path, q)


st.title("Tokens as billed")
st.caption("Window cost is toolmeter's count (OpenAI's encodings) of every re-read of a tool result. Here it is "
           "converted to the reading model's own tokens where the traces' reported usage calibrates it, split by "
           "what the prompt cache served, and priced.")  # fmt: skip
try:
    costs = _costs(DB, filters)
except ConfigError as e:
    st.error(str(e))
    st.stop()

st.subheader("Calibration")
cal = pd.DataFrame(costs["calibrations"])
if cal.empty:
    st.info("No model calls in this range: nothing to calibrate against.")
else:
    cal["shape"] = cal["shape"].fillna("all")
    cal["ratio"] = [f"{r:.3f} ({lo:.3f}-{hi:.3f})" if r == r and r is not None else "uncalibrated"
                    for r, lo, hi in zip(cal["ratio"], cal["low"], cal["high"], strict=True)]  # fmt: skip
    cal["why"] = cal["reason"].fillna("")
    st.dataframe(cal[["model", "shape", "turns", "ratio", "why"]], hide_index=True, width="stretch",
                 column_config={"ratio": st.column_config.TextColumn(
                     "provider tokens per toolmeter token (95% interval)")})  # fmt: skip

tools = pd.DataFrame(costs["tools"])
st.subheader("Window cost per tool")
if tools.empty:
    st.info("No tool calls in this range.")
    st.stop()
cur = costs["prices"]["currency"]
cols = st.columns(4)
cols[0].metric("window cost (toolmeter tokens)", human_tokens(int(tools["window_cost_tokens"].sum())))
calibrated = (tools["provider_tokens"] * tools["calibrated_share"].fillna(0)).sum()
cols[1].metric("in the models' tokens", human_tokens(int(tools["provider_tokens"].sum())),
               help=f"{calibrated / max(tools['provider_tokens'].sum(), 1):.0%} calibrated; the rest uncalibrated")  # fmt: skip
cols[2].metric("served by the prompt cache", human_tokens(int(tools["cached_tokens"].sum())))
without, with_cache = tools["cost_without_cache"].sum(), tools["cost_with_cache"].sum()
cols[3].metric(f"{cur} with the cache", f"{with_cache:,.2f}",
               delta=f"{without:,.2f} without" if without else None, delta_color="off")  # fmt: skip
shown = pd.DataFrame({
    "tool": tools["tool"], "calls": tools["calls"], "window cost": tools["window_cost_tokens"],
    "model tokens": tools["provider_tokens"], "calibrated": tools["calibrated_share"],
    "from cache": tools["cached_tokens"], "cache figures": tools["cache_known_share"],
    f"{cur} without cache": tools["cost_without_cache"], f"{cur} with cache": tools["cost_with_cache"],
    "priced": tools["priced_share"], "cleared": tools["cleared_calls"],
})  # fmt: skip
st.dataframe(shown, hide_index=True, width="stretch", column_config={
    "calibrated": st.column_config.NumberColumn(format="percent", help="share of its cost in calibrated tokens"),
    "cache figures": st.column_config.NumberColumn(format="percent", help="share whose reads reported cache figures"),
    "priced": st.column_config.NumberColumn(format="percent", help="share read by a model the price table has"),
    f"{cur} without cache": st.column_config.NumberColumn(format="%.4f"),
    f"{cur} with cache": st.column_config.NumberColumn(format="%.4f"),
    "cleared": st.column_config.NumberColumn(help="calls cleared by context editing or compaction before the end"),
})  # fmt: skip
st.caption(f"Prices taken {costs['prices']['taken']}: {costs['prices']['source']} "
           "Set `TOOLMETER_PRICES` to a JSON file of your own to replace them.")  # fmt: skip
if costs["no_cache_figures"]:
    st.caption(f"No cache figures from {', '.join(costs['no_cache_figures'])}: {costs['no_cache_figures_why']}.")
if costs["unpriced_models"]:
    st.warning(f"No price for {', '.join(costs['unpriced_models'])}: their reads have no money figure. "
               "Add them to a price table (`TOOLMETER_PRICES`).")  # fmt: skip

st.subheader("Tool-result tokens per run")
spread, runs = _runs(DB, filters)
if spread:
    st.dataframe(pd.DataFrame(spread), hide_index=True, width="stretch")
    st.plotly_chart(charts.run_sizes(runs), width="stretch")
