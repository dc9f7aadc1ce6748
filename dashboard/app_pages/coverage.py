"""Coverage: per service and dialect, how much of each tool call toolmeter could read, and the
setting of the framework that would give the rest (the same table as `toolmeter doctor`)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from collector.query.ranking import Filters
from dashboard import queries
from dashboard.connection import run_query
from dashboard.format import human_tokens, percent
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _load(path: str, f: Filters) -> list[dict[str, Any]]:
    return run_query(path, lambda con: queries.coverage(con, f))


def _envelopes(r: dict[str, Any]) -> str:
    return f"{r['envelopes_removed']} (+{human_tokens(r['wrapper_tokens'])} tokens)" if r["envelopes_removed"] else "0"


st.title("Coverage")
st.caption(
    "Per service and dialect, the share of tool calls with a measured raw result, a view the model was shown "
    "(joined from its input messages or declared; otherwise the model is assumed to have seen the raw), and a "
    "call id. The time range and service filters apply; tool and encoding do not (LLM calls have neither)."
)
rows = _load(DB, filters)
if not rows:
    st.info("No tool calls or LLM calls match the filters.")
    st.stop()

table = pd.DataFrame(
    {
        "service": [r["service"] or "–" for r in rows],
        "dialect": [r["dialect"] or "–" for r in rows],
        "calls": [r["calls"] for r in rows],
        "raw": [percent(r["raw_rate"]) for r in rows],
        "view": [percent(r["view_rate"]) for r in rows],
        "call id": [percent(r["call_id_rate"]) for r in rows],
        "joined by id": [r["joined_by_call_id"] for r in rows],
        "by order+content": [r["joined_by_order_content"] for r in rows],
        "by order": [r["joined_by_order"] for r in rows],
        "from messages": [r["from_messages"] for r in rows],
        "envelopes removed": [_envelopes(r) for r in rows],
        "LLM calls": [r["llm_calls"] for r in rows],
    }
)
st.dataframe(table, hide_index=True, width="stretch")

hinted = [r for r in rows if r["hints"]]
if not hinted:
    st.success("Every tool call had its raw result, its view and a call id: nothing to set.")
    st.stop()
st.subheader("Hints")
st.caption("Shown only where a gap exists.")
for r in hinted:
    with st.container(border=True):
        st.markdown(f"**{r['service'] or '–'} · {r['dialect'] or '–'}**")
        st.markdown("\n".join(f"- {h}" for h in r["hints"]))
