"""Dashboard queries, charts and excerpts on the sample store, without Streamlit."""

import duckdb
import pytest

from collector.query.ranking import Filters
from collector.store.database import read_connection
from collector.store.payloads import Payload
from dashboard import charts, queries
from dashboard.excerpt import excerpt, to_html
from dashboard.format import human_bytes, human_tokens, percent


@pytest.fixture
def con(sample_store: str):  # type: ignore[no-untyped-def]
    with read_connection(sample_store) as c:
        yield c


def test_ranking_and_kpis(con: duckdb.DuckDBPyConnection) -> None:
    table = queries.tool_ranking(con, Filters(), "view")
    assert list(table["view_tokens_p99"]) == sorted(table["view_tokens_p99"], reverse=True)
    k = queries.kpis(con, table)
    assert k["calls"] == int(table["calls"].sum())
    assert 0 < k["top_tool_share"] <= 1 and k["truncated"] > 0


def test_filters_change_results(con: duckdb.DuckDBPyConnection) -> None:
    everything = queries.tool_ranking(con, Filters(), "view")
    one_service = queries.tool_ranking(con, Filters(services=("sre-agent",)), "view")
    assert set(one_service["tool"]) < set(everything["tool"])
    assert "fetch_pod_logs" in set(one_service["tool"])
    only = queries.tool_ranking(con, Filters(tools=("run_sql",)), "view")
    assert list(only["tool"]) == ["run_sql"]
    import datetime as dt

    early = queries.tool_ranking(con, Filters(until=dt.datetime(2026, 11, 12)), "view")
    assert early["calls"].sum() < everything["calls"].sum()


def test_histogram_counts_every_call(con: duckdb.DuckDBPyConnection) -> None:
    hist = queries.size_histogram(con, Filters(), "search_orders", "view_tokens")
    pcts = queries.size_percentiles(con, Filters(), "search_orders", "view_tokens")
    # sizes above zero are binned; empty results (failed calls) are counted apart, never drawn as 1-token bars
    assert hist["calls"].sum() + pcts["empty"] + pcts["unknown"] == pcts["calls"]
    assert pcts["empty"] == pcts["empty_errors"] == 2 and (hist["lo"] >= 1).all()
    assert hist["errors"].sum() == 4  # the other failed calls said something, and are stacked in their own colour
    assert (hist["lo"] < hist["hi"]).all()
    assert pcts["budget_tokens"] == 25_000
    with pytest.raises(ValueError, match="metric='bogus'"):
        queries.size_histogram(con, Filters(), "search_orders", "bogus")


def test_schema_change_of_search_orders_is_found_with_the_added_field(con: duckdb.DuckDBPyConnection) -> None:
    changes = queries.schema_changes(con, Filters(), "search_orders")
    assert len(changes) == 1
    assert str(changes[0].day)[:10] == "2026-11-16"
    assert changes[0].added == ("$[].raw_payload:string",) and not changes[0].removed


def test_diff_fields() -> None:
    added, removed, changed = queries.diff_fields(["$.a:string", "$.b:integer"], ["$.a:integer", "$.c:string"])
    assert (added, removed, changed) == (("$.c:string",), ("$.b:integer",), ("$.a: string -> integer",))


def test_trace_replay_queries(con: duckdb.DuckDBPyConnection) -> None:
    traces = queries.find_traces(con, Filters(), "largest")
    assert list(traces["max_view_tokens"]) == sorted(traces["max_view_tokens"], reverse=True)
    truncated = queries.find_traces(con, Filters(), "truncated")
    assert (truncated["truncated_calls"] > 0).all()
    by_tool = queries.find_traces(con, Filters(), "largest", tool="fetch_pod_logs")
    assert by_tool["tools"].str.contains("fetch_pod_logs").all()
    trace_id = str(traces.iloc[0]["trace_id"])
    assert len(queries.find_traces(con, Filters(), "largest", trace_id=trace_id[:8])) >= 1
    steps = queries.trace_steps(con, trace_id)
    assert list(steps["start_ns"]) == sorted(steps["start_ns"])
    assert {"llm", "tool"} == set(steps["kind"])
    occ = queries.context_occupancy(con, trace_id)
    assert set(occ["step"]) == set(range(1, int((steps["kind"] == "llm").sum()) + 1))
    call = queries.tool_call(con, trace_id, str(steps[steps["kind"] == "tool"].iloc[0]["span_id"]))
    assert call is not None and call["trace_id"] == trace_id


def test_occupancy_counts_a_result_from_the_next_llm_call_on(con: duckdb.DuckDBPyConnection) -> None:
    trace_id = str(queries.find_traces(con, Filters(), "largest").iloc[0]["trace_id"])
    steps = queries.trace_steps(con, trace_id)
    occ = queries.context_occupancy(con, trace_id)
    tool_rows = steps[steps["kind"] == "tool"]
    first_tool = tool_rows.iloc[0]
    llm_before = int((steps[steps["start_ns"] < first_tool["start_ns"]]["kind"] == "llm").sum())
    per_tool = occ[occ["source"] == first_tool["name"]]
    assert per_tool["step"].min() == llm_before + 1


def test_charts_build_figures(con: duckdb.DuckDBPyConnection) -> None:
    table = queries.tool_ranking(con, Filters(), "view")
    fig = charts.ranking_bar(table, "view")
    assert fig.data[0].y[-1] == table["tool"].iloc[0]  # largest drawn on top
    assert any(t.name == "the tool's budget (tokens)" for t in fig.data)
    assert fig.data[0].text[-1].endswith(" tokens")  # the value labels carry their unit
    assert charts.ranking_bar(queries.tool_ranking(con, Filters(), "bytes"), "bytes").data[0].text[-1].endswith("B")
    pcts = queries.size_percentiles(con, Filters(), "search_orders", "view_tokens")
    hist = charts.size_histogram(
        queries.size_histogram(con, Filters(), "search_orders", "view_tokens"), pcts, "t", 25_000
    )
    assert hist.layout.xaxis.type == "log"
    # every line is a named trace in the legend (annotations would land off a log axis)
    names = [d.name for d in hist.data if d.type == "scatter"]
    assert [n.split()[0] for n in names] == ["p50", "p95", "p99", "budget"] and hist.layout.showlegend
    assert names[-1] == "budget 25.0k"
    daily = queries.daily_envelope(con, Filters(), "search_orders")
    env = charts.envelope_over_time(daily, ["2026-11-16"], 25_000)
    assert any(a.text == "schema changed" for a in env.layout.annotations)
    assert {d.name for d in env.data} >= {"view p99", "view p50", "raw p99", "budget 25.0k"}
    trace_id = str(queries.find_traces(con, Filters(), "largest").iloc[0]["trace_id"])
    occ = charts.context_occupancy(queries.context_occupancy(con, trace_id))
    assert occ.layout.barmode == "stack" and occ.data[-1].name == queries.REMAINDER


def test_empty_charts_say_so() -> None:
    import pandas as pd

    assert charts.ranking_bar(pd.DataFrame(), "view").layout.title.text == "No tool calls yet"
    assert charts.context_occupancy(pd.DataFrame()).layout.title.text.startswith("No LLM calls")


def test_excerpt_marks_retained_ranges_and_counts_gaps() -> None:
    raw = b"".join(b"row %05d payload\n" % i for i in range(5000))
    p = Payload(total_bytes=len(raw), cut=False, head=raw, tail=b"", sha256=None)
    pieces = excerpt(p, [[0, 100], [50_000, 50_060]])
    kinds = [x.kind for x in pieces]
    assert kinds[0] == "retained" and "gap" in kinds
    retained = [x for x in pieces if x.kind == "retained"]
    assert [(x.start, x.end) for x in retained] == [(0, 100), (50_000, 50_060)]
    assert retained[1].text == raw[50_000:50_060].decode()
    covered = sum(x.end - x.start for x in pieces)
    assert covered == len(raw)
    html_text = to_html(pieces)
    assert "<mark" in html_text and "bytes not retained" in html_text


def test_excerpt_of_a_payload_stored_as_head_and_tail() -> None:
    raw = bytes(range(97, 123)) * 40_000  # ~1 MB
    head, tail = raw[:1000], raw[-1000:]
    p = Payload(total_bytes=len(raw), cut=True, head=head, tail=tail, sha256="x")
    pieces = excerpt(p, [[0, 500], [len(raw) - 200, len(raw)]])
    assert [x.kind for x in pieces if x.kind != "context"][:2] == ["retained", "gap"]
    assert pieces[-1].kind in ("retained", "context")
    big = excerpt(p, [[500, 5000]])
    assert any(x.kind == "not_stored" for x in big)


def test_human_formats() -> None:
    assert human_tokens(12_400) == "12.4k" and human_tokens(None) == "–" and human_tokens(float("nan")) == "–"
    assert human_bytes(3_100_000) == "3.1 MB" and percent(0.071) == "7%"
    import pandas as pd

    assert human_tokens(pd.NA) == "–"


def test_alert_queries(con: duckdb.DuckDBPyConnection) -> None:
    alert, runs = queries.alerts(con) or []
    assert runs["kind"] == "run_growth"  # listed after the tool's own alert of the same day
    assert alert["tool_name"] == "search_orders" and alert["evidence"]["schema"]["added"] == ["$[].raw_payload:string"]
    hist = queries.before_after_histogram(con, "search_orders", alert["evidence"])
    calls = hist.groupby("side")["calls"].sum().to_dict()
    assert calls == {"before": alert["evidence"]["before"]["calls"], "after": alert["evidence"]["after"]["calls"]}
    fig = charts.before_after(hist)
    # search_orders failed with an empty result once in each window: named, not drawn as a 1-token bin
    assert [t.name for t in fig.data] == ["before (1 empty result not drawn)", "after (1 empty result not drawn)"]
    assert fig.layout.xaxis.type == "log" and min(min(t.x) for t in fig.data) > 1
    after = hist[(hist["side"] == "after") & (hist["lo"] > 0)]
    assert (after["calls"] == 0).any()  # gaps between clusters drop to zero instead of holding the last count


def _covers_once(pieces: list, total: int) -> None:  # type: ignore[type-arg]
    cursor = 0
    for piece in pieces:
        assert piece.start == cursor and piece.end > piece.start, (piece.kind, piece.start, piece.end, cursor)
        cursor = piece.end
    assert cursor == total


def test_a_long_retained_range_is_folded_as_retained_never_labelled_not_retained() -> None:
    raw = b"".join(b"order %06d shipped\n" % i for i in range(12_000))  # ~230 KB
    p = Payload(total_bytes=len(raw), cut=False, head=raw, tail=b"", sha256=None)
    pieces = excerpt(p, [[0, 134_556]])
    _covers_once(pieces, len(raw))
    inside = [x for x in pieces if x.end <= 134_556]
    assert {x.kind for x in inside} == {"retained", "retained_fold"}
    fold = next(x for x in pieces if x.kind == "retained_fold")
    assert "131,556 retained bytes not shown here" in to_html(pieces) and fold.end - fold.start == 131_556
    assert "not retained" in to_html([x for x in pieces if x.start >= 134_556])  # after the range: a real gap


def test_every_retained_byte_is_marked_on_a_rewrite_with_many_nearby_ranges() -> None:
    import random

    raw = b"".join(b'{"id": %d, "status": "ok", "note": "%s"}\n' % (i, b"x" * (i % 37)) for i in range(3000))
    p = Payload(total_bytes=len(raw), cut=False, head=raw, tail=b"", sha256=None)
    rng = random.Random(7)
    for _ in range(200):
        ranges = sorted([sorted(rng.sample(range(len(raw)), 2)) for _ in range(rng.randint(1, 9))])
        pieces = excerpt(p, ranges)
        _covers_once(pieces, len(raw))
        retained = set()
        for s, e in ranges:
            retained.update(range(s, e))
        marked = {b for x in pieces if x.kind in ("retained", "retained_fold") for b in range(x.start, x.end)}
        assert marked == retained  # byte for byte: no retained byte grey, no grey byte marked
        for x in pieces:
            if x.kind in ("retained", "context"):
                assert x.text == raw[x.start : x.end].decode()


def test_an_uncut_raw_without_ranges_is_previewed_not_called_not_retained() -> None:
    raw = b"a" * 10_000
    p = Payload(total_bytes=len(raw), cut=False, head=raw, tail=b"", sha256=None)
    html_text = to_html(excerpt(p, None))
    assert "7,000 more bytes not shown here" in html_text and "not retained" not in html_text


def test_a_long_view_keeps_its_end_and_counts_what_is_between() -> None:
    from dashboard.excerpt import preview

    rows = "".join(f'{{"row": {i}}}\n' for i in range(200_000))
    text = rows + "[truncated: 190,000 more rows; call again with offset=10000]"
    shown = preview(text)
    assert shown.endswith("[truncated: 190,000 more rows; call again with offset=10000]")
    assert shown.startswith('{"row": 0}\n')
    hidden = int(shown.split("··· ")[1].split(" more characters")[0].replace(",", ""))
    head, tail = shown.split("\n··· ")[0], shown.split("···\n\n")[1]
    assert len(head) + hidden + len(tail) == len(text)  # nothing lost between head and tail
    assert preview("short view") == "short view"


def test_the_whole_stored_raw_says_where_head_and_tail_join() -> None:
    from dashboard.excerpt import stored_text

    p = Payload(total_bytes=10_000, cut=True, head=b"a" * 100, tail=b"z" * 100, sha256="x")
    assert "··· 9,800 bytes not stored (over the payload cap) ···" in stored_text(p)


def test_filter_options_from_rollups_are_every_stored_value(con: duckdb.DuckDBPyConnection) -> None:
    assert con.execute("SELECT count(*) FROM rollup_days").fetchone()[0] > 0  # type: ignore[index]
    direct = {
        key: [
            r[0]
            for r in con.execute(f"SELECT DISTINCT {col} FROM tool_calls WHERE {col} IS NOT NULL ORDER BY 1").fetchall()
        ]
        for key, col in (("services", "service_name"), ("tools", "tool_name"), ("encodings", "encoding"))
    }
    assert queries.filter_options(con) == direct
