"""What-if budgets: the stored raw results replayed through per-tool budgets, before beside after.

The same figures as ``toolmeter whatif`` (both call :func:`collector.query.whatif.whatif`).
"""

from __future__ import annotations

import math
from datetime import UTC
from typing import Any

import pandas as pd
import streamlit as st

from collector.adapter.policy import MIN_BUDGET_TOKENS, SHAPES, STRATEGIES
from collector.query.ranking import Filters
from collector.query.whatif import Budget, suggestions, whatif
from dashboard import charts
from dashboard.connection import run_query
from dashboard.format import human_tokens
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]


def _ns(moment: Any) -> int | None:
    if moment is None:
        return None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() * 1e9)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _suggested(path: str, share: float, window: int) -> list[dict[str, Any]]:
    return run_query(path, lambda con: suggestions(con, share, window))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Replaying the stored results through the budgets...")
def _replay(path: str, f: Filters, budgets: tuple[tuple[str, int, str | None, str | None], ...],
            keep_last: int | None) -> list[dict[str, Any]]:  # fmt: skip
    plan = {tool: Budget(tokens, shape, strategy) for tool, tokens, shape, strategy in budgets}
    return run_query(path, lambda con: [o.figures() for o in whatif(
        con, path, plan, since_ns=_ns(f.since), until_ns=_ns(f.until), keep_last=keep_last)])  # fmt: skip


st.title("What-if budgets")
st.caption("Each tool's stored raw results (in the sidebar's time range) are shaped again with the budget below, "
           "as `collector.adapter` would at the tool boundary: the views, their p99 and the window cost are set "
           "beside what was recorded for the same calls, with what the new views would leave out.")  # fmt: skip
left, mid, right = st.columns(3)
window = int(left.number_input("model window (tokens)", min_value=1000, value=128_000, step=1000))
share = mid.number_input("a tool's p99 may take (% of the window)", min_value=0.1, max_value=100.0, value=5.0) / 100
keep = int(right.number_input("compact after N later LLM calls (0: off)", min_value=0, value=0))

suggested = _suggested(DB, share, window)
if not suggested:
    st.info("No tool calls in the store yet.")
    st.stop()
over = [s for s in suggested if s["suggested_budget"]]
st.markdown(f"**Suggested budgets** (p99 within {share:.1%} of a {window:,}-token window, "
            f"{human_tokens(int(share * window))} tokens): " + (", ".join(
                f"`{s['tool']}` {s['suggested_budget']:,} (p99 now {human_tokens(s['p99'])})" for s in over)
            if over else "every tool's p99 is within it already."))  # fmt: skip

start = pd.DataFrame([{"tool": s["tool"], "budget": max(s["suggested_budget"] or s["p99"] // 2, MIN_BUDGET_TOKENS),
                       "shape": None, "strategy": None} for s in (over or suggested[:1])])  # fmt: skip
edited = st.data_editor(
    start, key="whatif_budgets", num_rows="dynamic", hide_index=True, width="stretch",
    column_config={
        "tool": st.column_config.SelectboxColumn("tool", options=[s["tool"] for s in suggested], required=True),
        "budget": st.column_config.NumberColumn("budget (tokens)", min_value=MIN_BUDGET_TOKENS, step=100, required=True),
        "shape": st.column_config.SelectboxColumn("shape (empty: as recorded)", options=list(SHAPES)),
        "strategy": st.column_config.SelectboxColumn("document strategy", options=list(STRATEGIES)),
    },
)  # fmt: skip


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


plan = tuple(
    (str(r["tool"]), int(r["budget"]), _text(r["shape"]), _text(r["strategy"]))
    for r in edited.to_dict("records")
    if isinstance(r.get("tool"), str) and r.get("budget") is not None and not math.isnan(float(r["budget"]))
)
if not plan:
    st.info("Add a tool and a budget above.")
    st.stop()
figures = _replay(DB, filters, plan, keep or None)
table = pd.DataFrame(figures)
saved = table["window_cost_saved"].sum()
before = table["window_cost_before"].sum()
cols = st.columns(3)
cols[0].metric("window cost, as recorded", human_tokens(int(before)))
cols[1].metric("with these budgets", human_tokens(int(table["window_cost_after"].sum())),
               delta=f"-{saved / before:.0%}" if before else None, delta_color="inverse")  # fmt: skip
cols[2].metric("calls replayed", f"{int(table['replayed'].sum()):,} of {int(table['calls'].sum()):,}")
st.plotly_chart(charts.whatif_bars(table), width="stretch")

shown = pd.DataFrame({
    "tool": table["tool"], "budget": table["budget_tokens"],
    "p99 before": table["p99_before"], "p99 after": table["p99_after"],
    "tokens before": table["tokens_before"], "tokens after": table["tokens_after"],
    "window cost before": table["window_cost_before"], "window cost after": table["window_cost_after"],
    "truncated before": table["truncated_rate_before"], "truncated after": table["truncated_rate_after"],
    "error lines left out": table["lost_error_lines"], "items left out": table["lost_items"],
    "lines left out": table["lost_lines"],
})  # fmt: skip
st.dataframe(shown, hide_index=True, width="stretch", column_config={
    "truncated before": st.column_config.NumberColumn(format="percent"),
    "truncated after": st.column_config.NumberColumn(format="percent"),
})  # fmt: skip
for f in figures:
    for reason, n in f["not_replayed"].items():
        st.caption(f"`{f['tool']}`: {n} call(s) not replayed: {reason}.")
