"""Every page of the Streamlit app, run with AppTest on the sample store."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "streamlit_app.py")


def run_app(mp: pytest.MonkeyPatch, db: str, page: str | None = None, **query: str) -> AppTest:
    """Run the app on ``db`` (through $TOOLMETER_DB, which stays set for later reruns)."""
    mp.setenv("TOOLMETER_DB", db)
    at = AppTest.from_file(APP, default_timeout=90)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_window_eaters_ranks_the_sample_tools(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store)
    assert at.title[0].value == "Window eaters"
    assert {m.label for m in at.metric} >= {"tool calls", "window cost", "truncated results"}
    share = next(m for m in at.metric if m.label == "top tool's share of window cost")
    assert share.delta == "search_orders"  # the share names its tool
    table = at.dataframe[0].value
    assert table["tool"].iloc[0] == "search_orders"
    assert {"fetch_pod_logs", "list_github_issues", "get_customer_orders"} <= set(table["tool"])


def test_drops_and_refusals_are_shown_with_what_they_mean(
    monkeypatch: pytest.MonkeyPatch, sample_store: str, tmp_path: Path
) -> None:
    import shutil

    import duckdb

    quiet = run_app(monkeypatch, sample_store)
    said = [w.value for w in quiet.warning] + [i.value for i in quiet.info]
    assert not any("dropped" in text or "503" in text for text in said)  # the samples lost nothing
    db = str(tmp_path / "store.duckdb")  # a path of its own: the app caches what it read per store
    shutil.copy(sample_store, db)
    with duckdb.connect(db) as con:
        con.execute(
            "INSERT INTO collector_stats (collector_id, updated_at, dropped, failed, refused) "
            "VALUES ('receiver-a', now()::TIMESTAMP, 2, 1, 7)"
        )
    at = run_app(monkeypatch, db)
    assert any("dropped 2 span(s) (queue full) and failed on 1" in w.value for w in at.warning)
    assert any("answered 7 request(s) with 503" in i.value for i in at.info)


def test_rank_by_window_cost_and_filters_change_the_table(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store)
    all_calls = at.metric[0].value
    at.radio(key="rank_by").set_value("cost").run()
    assert at.dataframe[0].value["tool"].iloc[0] == "search_orders"
    at.multiselect(key="f_services").set_value(["sre-agent"]).run()
    assert not at.exception
    assert at.metric[0].value != all_calls
    assert "search_orders" not in set(at.dataframe[0].value["tool"])


def test_tool_detail_marks_the_schema_change(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/tool_detail.py", tool="search_orders")
    assert at.title[0].value == "Tool detail"
    assert at.selectbox(key="detail_tool").value == "search_orders"
    text = " ".join(m.value for m in at.markdown)
    assert "Schema changed on 2026-11-16" in text and "raw_payload" in text
    assert {m.label for m in at.metric} >= {"p50", "p95", "p99", "budget (tokens)"}


def test_replay_shows_the_refund_row_as_a_retained_range(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    trace_id, span_id = con.execute(
        "SELECT trace_id, span_id FROM tool_calls WHERE tool_name = 'get_customer_orders' AND len(retained_ranges) = 2 LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    con.close()
    at = run_app(monkeypatch, sample_store, "app_pages/replay.py", trace=trace_id, span=span_id)
    assert at.title[0].value == "Trace replay"
    banner = at.warning[0].value
    assert "Truncated" in banner and "declared" in banner and "Retained byte ranges" in banner
    html = " ".join(h.proto.body for h in at.get("html"))
    assert "<mark" in html and "refund_pending" in html


def test_alerts_page_shows_the_schema_change_alert_with_evidence(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/alerts.py")
    text = " ".join(m.value for m in at.markdown)
    assert "search_orders · schema change · 2026-11-16" in text
    assert "$[].raw_payload:string" in text
    links = [link.proto for link in at.get("page_link")]  # in-app links: same tab, filters kept
    assert links and all(p.page == "replay" and p.query_string.startswith("trace=") for p in links)
    assert {p.label.split(":")[0] for p in links} == {"before", "after"}
    table = at.dataframe[0].value
    assert list(table["metric"])[:3] == ["view tokens p50", "view tokens p95", "view tokens p99"]
    assert "runs of support-agent · runs grew · 2026-11-16" in text
    grew = next(d.value for d in at.dataframe if "growth" in d.value.columns)
    assert grew["tool"].iloc[0] == "search_orders"
    at.multiselect(key="alert_states").set_value(["resolved"]).run()
    assert not at.exception and "No alerts" in at.success[0].value


def test_missing_store_says_what_to_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    at = run_app(monkeypatch, str(tmp_path / "nothing.duckdb"))
    assert any("toolmeter demo" in e.value for e in at.error)


def test_empty_store_says_how_to_send_traces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from collector.store.database import Store

    db = str(tmp_path / "empty.duckdb")
    Store(db).ensure_schema()
    at = run_app(monkeypatch, db)
    assert any("ToolResultProcessor" in i.value for i in at.info)


def test_a_duckdb_file_that_is_not_a_toolmeter_store_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import duckdb

    db = str(tmp_path / "someone_elses.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE TABLE orders (id INTEGER)")
    con.close()
    at = run_app(monkeypatch, db)  # no exception: a message instead
    assert any("is not a toolmeter store" in e.value and "tool_calls" in e.value for e in at.error)


def test_tool_detail_with_no_matching_call_says_so_instead_of_failing(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    service, tool = con.execute(
        """SELECT s.service_name, t.tool_name FROM (SELECT DISTINCT service_name FROM tool_calls) s,
                  (SELECT DISTINCT tool_name FROM tool_calls) t
           WHERE NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.service_name = s.service_name
                             AND c.tool_name = t.tool_name) LIMIT 1"""
    ).fetchone()  # type: ignore[misc]
    con.close()
    at = run_app(monkeypatch, sample_store)
    at.multiselect(key="f_services").set_value([service]).run()
    at.switch_page("app_pages/tool_detail.py").run()
    at.selectbox(key="detail_tool").set_value(tool).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(f"No call of `{tool}` matches the filters" in i.value for i in at.info)


def test_tool_detail_names_the_budget_the_tool_declared(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    import duckdb

    con = duckdb.connect(sample_store, read_only=True)
    tool, budget = con.execute(
        "SELECT tool_name, max(budget_tokens) FROM tool_calls WHERE budget_tokens IS NOT NULL GROUP BY 1 LIMIT 1"
    ).fetchone()  # type: ignore[misc]
    con.close()
    at = run_app(monkeypatch, sample_store, "app_pages/tool_detail.py", tool=tool)
    from dashboard.format import human_tokens

    assert {m.label: m.value for m in at.metric}["budget (tokens)"] == human_tokens(budget)


def test_the_ranking_table_keeps_numbers_numeric_so_it_sorts_as_numbers(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    at = run_app(monkeypatch, sample_store)
    table = at.dataframe[0].value
    for column in ("calls", "view p99", "raw p99", "bytes p99", "truncated", "window cost"):
        assert table[column].dtype.kind in "iuf", column
    ordered = table.sort_values("view p99", ascending=False)["view p99"].tolist()
    assert ordered == sorted(table["view p99"].tolist(), reverse=True)


def test_both_budget_rates_are_shown_raw_and_view(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    # fetch_pod_logs' raw results are all over its budget, and its adapter keeps every view under
    # it: "over budget" alone would read as a budget that never holds
    at = run_app(monkeypatch, sample_store)
    table = at.dataframe[0].value.set_index("tool")
    assert table.loc["fetch_pod_logs", "raw > budget"] == 1.0
    assert table.loc["fetch_pod_logs", "view > budget"] == 0.0
    assert table.loc["search_orders", "view > budget"] > 0  # its budget stopped holding after the schema change


def test_alerts_show_both_windows_dates_and_follow_the_sidebar(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/alerts.py")
    columns = list(at.dataframe[0].value.columns)
    assert columns[1].startswith("before: 2026-11-") and " – 2026-11-" in columns[1] and "calls" in columns[1]
    assert columns[2].startswith("after: 2026-11-16 – ")
    assert "00:00:00" not in " ".join(columns)
    at.multiselect(key="f_tools").set_value(["fetch_webpage"]).run()
    assert not at.exception and "No alerts" in at.success[0].value  # the tool filter applies here too


def test_the_home_page_mentions_open_alerts(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store)
    assert any("open alert" in w.value and "search_orders" in w.value for w in at.warning)


def test_replay_ordered_by_truncation_opens_a_truncated_call_and_numbers_steps_as_the_table(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/replay.py")
    at.radio[0].set_value("truncated").run()
    assert not at.exception, [e.value for e in at.exception]
    slider = at.select_slider[0]
    label = slider.format_func(slider.value)
    assert "truncated" in label  # the order said "with truncated results": the call shown is one
    steps = at.dataframe[0].value
    step = int(label.split(":")[0].removeprefix("step "))
    row = steps[steps["#"] == step].iloc[0]
    assert row["kind"] == "tool call" and bool(row["truncated"]) and row["name"] in label
    assert steps["truncated"].fillna(False).any()  # the steps table marks truncated calls
    assert steps["view tokens"].dtype.kind in "iuf"  # numbers, so the column sorts as numbers


def test_tool_detail_opens_on_the_top_eater(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/tool_detail.py")
    assert at.selectbox(key="detail_tool").value == "search_orders"  # not the alphabetically first tool


def test_replay_says_a_payload_was_removed_by_retention(
    monkeypatch: pytest.MonkeyPatch, sample_store: str, tmp_path: Path
) -> None:
    import shutil
    from datetime import datetime, timedelta

    import duckdb

    from collector.store.payloads import payload_dir
    from collector.store.retention import Retention, prune

    db = str(tmp_path / "pruned.duckdb")
    shutil.copy(sample_store, db)
    shutil.copytree(payload_dir(sample_store), payload_dir(db))
    prune(db, Retention(rows=None, payloads=timedelta(days=1)), now=datetime(2026, 11, 20))
    with duckdb.connect(db, read_only=True) as con:
        trace_id, span_id = con.execute(
            "SELECT trace_id, span_id FROM tool_calls WHERE start_time < '2026-11-12' ORDER BY raw_bytes DESC LIMIT 1"
        ).fetchone()  # type: ignore[misc]
    at = run_app(monkeypatch, db, "app_pages/replay.py", trace=trace_id, span=span_id)
    assert not at.exception
    assert any("removed by retention" in i.value and "2026-11-19" in i.value for i in at.info)
    assert any("MB on disk" in c.value and "calls from 2026-11-09" in c.value for c in at.sidebar.caption)


def test_the_home_page_says_whether_its_percentiles_are_exact(
    monkeypatch: pytest.MonkeyPatch, sample_store: str
) -> None:
    import streamlit as st

    from collector.query import ranking

    at = run_app(monkeypatch, sample_store)
    assert any("Percentiles over every call" in c.value for c in at.caption)  # a small store: exact
    monkeypatch.setattr(ranking, "ROLLUP_WHEN_CALLS", 0)  # as if the rolled days held millions of calls
    st.cache_data.clear()
    at = run_app(monkeypatch, sample_store)
    assert any("from daily rollups, within 1 %" in c.value for c in at.caption)
    at.toggle(key="exact_percentiles").set_value(True).run()
    assert any("Percentiles over every call" in c.value for c in at.caption)
    st.cache_data.clear()  # the pages' cache is process-wide: later tests must not read these figures
