"""Alerts: a tool's envelope grew, after a schema change or without one; a service's runs grew."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from collector.query.ranking import Filters
from collector.store.lake import redact
from dashboard import charts, queries
from dashboard.connection import run_query
from dashboard.format import human_tokens, percent
from dashboard.state import CACHE_TTL_S

DB: str = st.session_state["db"]
filters: Filters = st.session_state["filters"]
METRIC_ROWS = [("view_tokens_p50", "view tokens p50"), ("view_tokens_p95", "view tokens p95"),
               ("view_tokens_p99", "view tokens p99"), ("raw_tokens_p99", "raw tokens p99"),
               ("truncated_rate", "truncation rate"), ("over_budget_rate", "raw over-budget rate"),
               ("window_cost_per_call", "window cost per call")]  # fmt: skip
RUN_ROWS = [("view_tokens_p50", "tool-result tokens per run p50"), ("view_tokens_p95", "tool-result tokens per run p95"),
            ("view_tokens_p99", "tool-result tokens per run p99"), ("raw_tokens_p99", "raw tokens per run p99"),
            ("window_cost_per_call", "window cost per run")]  # fmt: skip
LABELS = {"schema_change": "schema change", "growth": "growth without a schema change", "run_growth": "runs grew"}


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _alerts(path: str, states: tuple[str, ...], f: Filters) -> list[dict[str, Any]] | None:
    return run_query(path, lambda con: queries.alerts(con, states, f))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _hist(path: str, tool: str, evidence_key: str, evidence: dict[str, Any]) -> pd.DataFrame:
    return run_query(path, lambda con: queries.before_after_histogram(con, tool, evidence))


def _window(side: dict[str, Any], unit: str = "calls") -> str:
    """The window's first and last day and its calls (its stored end is exclusive)."""
    start, end = str(side.get("start") or "")[:10], str(side.get("end") or "")[:10]
    if start and end:
        last = (pd.Timestamp(end) - pd.Timedelta(days=1)).strftime("%Y-%m-%d")
        return f"{start} – {last}, {side.get('calls', 0)} {unit}"
    return f"{side.get('calls', 0)} {unit}"


def _fmt(metric: str, value: Any) -> str:
    return percent(value) if metric.endswith("_rate") else human_tokens(value)


st.title("Alerts")
show = st.multiselect(
    "state", ["open", "acknowledged", "resolved"], default=["open", "acknowledged"], key="alert_states"
)
rows = _alerts(DB, tuple(show), filters)
if rows is None:
    st.info(
        "This store has no alerts table yet: run `toolmeter alerts --evaluate --db " + redact(DB) + "` or "
        "`toolmeter watch` to evaluate the rules."
    )
    st.stop()
if not rows:
    st.success(
        "No alerts. Rules are evaluated by `toolmeter watch` (and `toolmeter serve`); "
        "`toolmeter alerts --evaluate` runs them once."
    )
    st.stop()

st.caption(
    f"{len(rows)} alert(s) for the sidebar's tools and time range (alerts are per tool, across services). "
    "Acknowledge or resolve with `toolmeter alerts --ack ID` / `--resolve ID`."
)
for alert in rows:
    ev = alert["evidence"] or {}
    label = LABELS.get(alert["kind"], alert["kind"])
    runs = alert["kind"] == "run_growth"
    rows_, unit = (RUN_ROWS, "runs") if runs else (METRIC_ROWS, "calls")
    with st.container(border=True):
        subject = f"runs of {alert.get('service_name')}" if runs else alert["tool_name"]
        st.markdown(f"### {subject} · {label} · {alert['change_at']:%Y-%m-%d}")
        st.markdown(f"**{alert['summary']}**  \n`{alert['alert_id']}` · state **{alert['state']}**")
        if alert["delivery_error"] and not alert["delivered_at"]:
            st.error(f"Webhook delivery failed ({alert['delivery_attempts']} attempts): {alert['delivery_error']}")
        elif alert["delivered_at"]:
            st.caption(f"delivered to the webhook at {alert['delivered_at']}")
        before, after = ev.get("before", {}), ev.get("after", {})
        table = pd.DataFrame(
            {
                "metric": [label_ for _, label_ in rows_],
                f"before: {_window(before, unit)}": [_fmt(m, before.get(m)) for m, _ in rows_],
                f"after: {_window(after, unit)}": [_fmt(m, after.get(m)) for m, _ in rows_],
            }
        )
        # one above the other: side by side, the table's window dates were cut off
        st.dataframe(table, hide_index=True, width="stretch", key=f"evidence_{alert['alert_id']}")
        if runs:
            grew = pd.DataFrame(ev.get("tools_grew") or [])
            if not grew.empty:
                st.markdown("tools that grew, tokens per run:")
                st.dataframe(grew.rename(columns={"before_per_run": "before", "after_per_run": "after",
                                                  "growth_per_run": "growth"}),
                             hide_index=True, width="stretch", key=f"grew_{alert['alert_id']}")  # fmt: skip
        else:
            st.plotly_chart(charts.before_after(_hist(DB, alert["tool_name"], alert["alert_id"], ev)),
                            width="stretch", key=f"before_after_{alert['alert_id']}")  # fmt: skip
        schema = ev.get("schema") or {}
        for key, what in (("added", "fields added"), ("removed", "fields removed"), ("changed", "types changed")):
            if schema.get(key):
                st.markdown(f"{what}: " + ", ".join(f"`{f}`" for f in schema[key]))
        examples = [(side, ex) for side in ("before", "after") for ex in (ev.get("examples") or {}).get(side, [])]
        if examples:
            st.markdown("example calls (open in the replay, filters kept):")
            # page links, not markdown links: those open a new tab, whose new session drops the filters
            for col, (side, ex) in zip(st.columns(len(examples)), examples, strict=True):
                where = {"trace": ex["trace_id"], **({"span": ex["span_id"]} if ex.get("span_id") else {})}
                col.page_link("app_pages/replay.py", label=f"{side}: {human_tokens(ex['view_tokens'])} tokens",
                              query_params=where)  # fmt: skip
