"""Alerts: envelope growth after schema changes."""

from __future__ import annotations

import streamlit as st

from dashboard import queries
from dashboard.connection import run_query

DB: str = st.session_state["db"]

st.title("Alerts")
table = run_query(DB, queries.alerts)
if table is None:
    st.info(
        "Alert evaluation is not set up for this store yet, so there is nothing to show. "
        "Meanwhile, the Tool detail page marks the days a tool's schema changed and how its envelope moved."
    )
elif table.empty:
    st.success("No open alerts.")
else:
    st.dataframe(table, hide_index=True, width="stretch")
