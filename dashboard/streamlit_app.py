"""toolmeter dashboard: entry point (page config, shared sidebar filters, navigation).

Run with ``toolmeter dashboard --db PATH`` (binds 127.0.0.1) or
``streamlit run dashboard/streamlit_app.py -- --db PATH``.
"""

from __future__ import annotations

import os
import sys

import duckdb
import streamlit as st
from PIL import Image, ImageDraw

from collector.errors import StoreError
from collector.query.coverage import check_store
from collector.query.ranking import Filters
from collector.store.lake import is_lake, redact
from collector.store.payloads import payload_files
from dashboard import links, queries
from dashboard.connection import db_path, run_query
from dashboard.state import CACHE_TTL_S


def _icon() -> Image.Image:
    """The favicon, drawn here: an emoji or icon name would be fetched from a CDN, and the
    dashboard runs on hosts without internet access."""
    icon = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    draw = ImageDraw.Draw(icon)
    draw.rounded_rectangle((1, 9, 30, 22), radius=3, fill=(214, 39, 40, 255))
    for x in range(5, 28, 5):  # the ticks of a ruler
        draw.line((x, 9, x, 14 if x % 10 else 17), fill=(255, 255, 255, 255), width=2)
    return icon


st.set_page_config(page_title="toolmeter", page_icon=_icon(), layout="wide")

DB = db_path(sys.argv[1:])
st.session_state["db"] = DB


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _options(path: str) -> tuple[dict[str, list[str]], tuple[object, object]]:
    def q(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, list[str]], tuple[object, object]]:
        check_store(con, redact(path))  # a DuckDB file that is not a toolmeter store: say so, not a traceback
        return queries.filter_options(con), queries.time_bounds(con)

    return run_query(path, q)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _size(path: str) -> str:
    """The store's size on disk (the file and its payload files), or what a lake is; cached:
    a store's payload folder can hold many thousands of files."""
    if is_lake(path):
        return "a DuckLake (size: its catalog and data path)"
    total = os.path.getsize(path) if os.path.exists(path) else 0
    return f"{(total + sum(size for _, size, _ in payload_files(path))) / 1e6:,.1f} MB on disk"


def _sidebar() -> Filters | None:
    st.sidebar.caption(f"store: `{redact(DB)}`")
    try:
        options, (first, last) = _options(DB)
    except StoreError as e:
        st.error(str(e))
        st.info("Run `toolmeter demo` to load the sample traces, or `toolmeter ingest FILE --db PATH`.")
        return None
    if first is None:
        st.info(
            "No tool calls recorded yet. Add `ToolResultProcessor(db=...)` to your agent's TracerProvider, "
            "or load trace files with `toolmeter ingest FILE --db " + redact(DB) + "`."
        )
        return None
    st.sidebar.caption(f"{_size(DB)} · calls from {first:%Y-%m-%d} to {last:%Y-%m-%d}")
    d0, d1 = first.date(), last.date()  # type: ignore[attr-defined]
    # a shared link's filters are the widgets' starting values (later reruns keep the widgets')
    start = links.initial_filters(st.query_params, d0, d1, options["services"], options["tools"], options["encodings"])
    encodings: list[str | None] = [None, *options["encodings"]]
    picked = st.sidebar.date_input("time range (UTC)", value=start.dates, min_value=d0, max_value=d1, key="f_dates")
    services = st.sidebar.multiselect("service / agent", options["services"], default=start.services,
                                      key="f_services")  # fmt: skip
    tools = st.sidebar.multiselect("tool", options["tools"], default=start.tools, key="f_tools")
    encoding = st.sidebar.selectbox("model encoding", encodings, index=encodings.index(start.encoding),
                                    key="f_encoding", format_func=lambda e: "all" if e is None else e)  # fmt: skip
    since = until = None
    if isinstance(picked, tuple) and len(picked) == 2:
        since, until = links.day_range(picked[0], picked[1])
    filters = Filters(since=since, until=until, services=tuple(services), tools=tuple(tools), encoding=encoding)
    # the URL follows the view: copying it shares what is on screen
    wanted = links.filter_params(filters, d0, d1)
    for key in links.FILTER_KEYS:
        if key in wanted and st.query_params.get(key) != wanted[key]:
            st.query_params[key] = wanted[key]
        elif key not in wanted and key in st.query_params:
            del st.query_params[key]
    return filters


filters = _sidebar()
st.session_state["filters"] = filters
if filters is not None:
    st.session_state["tool_names"] = list(filters.tools) or _options(DB)[0]["tools"]

pages = [
    st.Page(
        "app_pages/window_eaters.py",
        title="Window eaters",
        icon=":material/leaderboard:",
        default=True,
        url_path="eaters",
    ),
    st.Page("app_pages/tool_detail.py", title="Tool detail", icon=":material/query_stats:", url_path="tool"),
    st.Page("app_pages/replay.py", title="Trace replay", icon=":material/replay:", url_path="replay"),
    st.Page("app_pages/alerts.py", title="Alerts", icon=":material/notifications:", url_path="alerts"),
    st.Page("app_pages/coverage.py", title="Coverage", icon=":material/fact_check:", url_path="coverage"),
    st.Page("app_pages/whatif.py", title="What-if budgets", icon=":material/tune:", url_path="whatif"),
    st.Page("app_pages/cost.py", title="Tokens as billed", icon=":material/payments:", url_path="cost"),
]
nav = st.navigation(pages)
if filters is None:
    st.stop()
nav.run()
