"""Links people can share: the URL gives the filters and the picks, the page keeps the URL up to date,
and alert webhooks carry links into the dashboard."""

from __future__ import annotations

import json
from datetime import date

import pytest

from collector.alerts.message import alert_payload
from collector.query.ranking import Filters
from dashboard import links
from tests.dashboard.test_app import run_app


def test_initial_filters_from_a_link_leave_unknown_names_and_days_out() -> None:
    start = links.initial_filters({"from": "2026-11-12", "to": "2099-01-01", "service": "sre-agent,nobody",
                                   "encoding": "cl100k_base"}, date(2026, 11, 9), date(2026, 11, 22),
                                  ["sre-agent", "support-agent"], ["run_sql"], ["o200k_base"])  # fmt: skip
    assert start == links.Initial((date(2026, 11, 12), date(2026, 11, 22)), ["sre-agent"], [], None)
    since, until = links.day_range(date(2026, 11, 12), date(2026, 11, 14))
    params = links.filter_params(Filters(since=since, until=until, services=("sre-agent",)), date(2026, 11, 9),
                                 date(2026, 11, 22))  # fmt: skip
    assert params == {"from": "2026-11-12", "to": "2026-11-14", "service": "sre-agent"}


def test_the_tool_page_opens_on_the_linked_tool_and_filters(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store, "app_pages/tool_detail.py", tool="run_sql", service="sre-agent",
                 **{"from": "2026-11-12", "to": "2026-11-14"})  # fmt: skip
    assert at.selectbox(key="detail_tool").value == "run_sql"
    assert at.multiselect(key="f_services").value == ["sre-agent"]
    assert tuple(at.date_input(key="f_dates").value) == (date(2026, 11, 12), date(2026, 11, 14))
    assert at.query_params["tool"] == "run_sql" and at.query_params["service"] == "sre-agent"
    # picking another tool, and widening the range, moves the URL with the view
    at.selectbox(key="detail_tool").set_value("fetch_webpage").run()
    at.date_input(key="f_dates").set_value((date(2026, 11, 9), date(2026, 11, 22))).run()
    assert at.query_params["tool"] == "fetch_webpage"
    assert "from" not in at.query_params and "to" not in at.query_params  # the whole range is the default


def test_webhook_alerts_carry_links_into_the_dashboard() -> None:
    evidence = {"before": {"start": "2026-11-09T00:00:00", "end": "2026-11-16T00:00:00"},
                "after": {"start": "2026-11-16T00:00:00", "end": "2026-11-23T00:00:00"},
                "examples": {"before": [{"trace_id": "t1", "span_id": "s1"}], "after": [{"trace_id": "t2", "span_id": "s2"}]}}  # fmt: skip
    row = {"alert_id": "a", "tool_name": "search_orders", "kind": "schema_change", "summary": "grew",
           "evidence": json.dumps(evidence)}  # fmt: skip
    assert "links" not in alert_payload(row)  # no dashboard address configured: no links
    body = alert_payload(row, "https://toolmeter.example.com/")
    assert (
        body["links"]["view"] == "https://toolmeter.example.com/tool?tool=search_orders&from=2026-11-09&to=2026-11-22"
    )
    assert body["links"]["examples"] == ["https://toolmeter.example.com/replay?trace=t1&span=s1",
                                         "https://toolmeter.example.com/replay?trace=t2&span=s2"]  # fmt: skip
    assert (
        body["text"]
        == "grew <https://toolmeter.example.com/tool?tool=search_orders&from=2026-11-09&to=2026-11-22|open in toolmeter>"
    )
    runs = alert_payload({**row, "kind": "run_growth", "service_name": "support-agent"}, "http://h:8501")
    assert runs["links"]["view"] == "http://h:8501/eaters?service=support-agent&from=2026-11-09&to=2026-11-22"
