"""Daily rollups: a ranking read from them says so, and differs from the exact one only in its
percentiles, by 1 % at most."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from collector.config import CollectorConfig
from collector.ingest import ingest_files
from collector.query.ranking import _QUANTILES, Filters, _percentiles, ranking
from collector.store import rollup
from collector.store.schema import schema_sql
from tests.conftest import SAMPLE_TRACES

PERCENTILES = ("view_tokens_p50", "view_tokens_p95", "view_tokens_p99", "raw_tokens_p50", "raw_tokens_p95",
               "raw_tokens_p99", "raw_bytes_p99", "view_bytes_p99")  # fmt: skip


def assert_close(exact: list[dict[str, object]], rolled: list[dict[str, object]]) -> None:
    """Same tools in the same order; percentiles within 1 %, everything else equal."""
    assert [r["tool"] for r in rolled] == [r["tool"] for r in exact]
    for e, r in zip(exact, rolled, strict=True):
        assert e["percentiles"] == "exact" and r["percentiles"] == "rollup"
        for key, value in e.items():
            if key in PERCENTILES and value is not None:
                # 1 % at most (plus float noise: a bucket's value sits exactly 1 % from its edge)
                assert r[key] == pytest.approx(value, rel=rollup.ALPHA * (1 + 1e-9), abs=1e-9), (e["tool"], key)
            elif key != "percentiles":
                assert r[key] == value, (e["tool"], key)


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = str(tmp_path_factory.mktemp("rollup") / "samples.duckdb")
    ingest_files(sorted(str(p) for p in Path(SAMPLE_TRACES).glob("*.json*")), CollectorConfig(db=db))
    return db


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(since=dt.datetime(2026, 11, 12, 5, 30), until=dt.datetime(2026, 11, 20)),  # partial first day
        Filters(services=("sre-agent",), encoding="o200k_base"),
        Filters(tools=("search_orders", "run_sql"), since=dt.datetime(2026, 11, 15)),
    ],
)
def test_a_ranking_from_rollups_is_the_exact_one_within_one_percent(samples: str, filters: Filters) -> None:
    with duckdb.connect(samples, read_only=True) as con:
        rolled_days = con.execute("SELECT count(*) FROM rollup_days").fetchone()[0]  # type: ignore[index]
        assert rolled_days == 12  # every sample day but the last two, which are not closed
        for by in ("view", "cost"):
            assert_close(ranking(con, filters, by, exact=True), ranking(con, filters, by, exact=False))
        # small stores stay exact unless rollups are asked for
        assert {r["percentiles"] for r in ranking(con, filters, exact=None)} <= {"exact"}


def test_a_late_call_in_a_rolled_day_makes_the_day_roll_again(samples: str, tmp_path: Path) -> None:
    import shutil

    from collector.store.payloads import payload_dir

    db = str(tmp_path / "late.duckdb")
    shutil.copy(samples, db)
    shutil.copytree(payload_dir(samples), payload_dir(db))
    late = str(tmp_path / "late.json")
    Path(late).write_text(
        '{"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "late"}}]},'
        ' "scopeSpans": [{"spans": [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",'
        ' "name": "execute_tool search_orders", "startTimeUnixNano": "1794484800000000000",'
        ' "endTimeUnixNano": "1794484801000000000", "attributes": ['
        '{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},'
        '{"key": "gen_ai.tool.name", "value": {"stringValue": "search_orders"}},'
        '{"key": "gen_ai.tool.call.result", "value": {"stringValue": "' + "row " * 90_000 + '"}}]}]}]}]}'
    )  # 2026-11-12 12:00 UTC: a day the samples rolled, and a result larger than any there
    ingest_files([late], CollectorConfig(db=db))
    with duckdb.connect(db, read_only=True) as con:
        assert_close(ranking(con, exact=True), ranking(con, exact=False))
        top = ranking(con, Filters(tools=("search_orders",)), exact=False)[0]
        assert top["raw_tokens_max"] > 90_000 and top["percentiles"] == "rollup"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(0, 3_000_000) | st.integers(0, 40), min_size=1, max_size=300),
    days=st.integers(1, 45),
)
def test_percentiles_of_any_sizes_are_within_one_percent(sizes: list[int], days: int) -> None:
    con = duckdb.connect()
    con.execute(schema_sql())
    start = dt.datetime(2026, 1, 20)  # from 11 days on, January closes and its histograms are merged
    con.execute(
        """INSERT INTO tool_calls (trace_id, span_id, tool_name, start_ns, start_time, view_tokens, raw_tokens,
                                   raw_bytes, view_bytes, status)
           SELECT 't' || i, 's' || i, 'tool' || (i % 2), 0, ?::TIMESTAMP + INTERVAL (i % ?) DAY, x, x * 3, x * 4,
                  x * 4, 'ok'
           FROM (SELECT unnest(?::BIGINT[]) AS x, generate_subscripts(?::BIGINT[], 1) AS i)""",
        [start, days, sizes, sizes],
    )
    # a newest call two days on, so every day of the sizes is closed and rolled
    con.execute(
        "INSERT INTO tool_calls (trace_id, span_id, tool_name, start_time, view_tokens) VALUES ('z', 'z', 'tool0', ?, 1)",
        [start + dt.timedelta(days=days + 2)],
    )
    assert rollup.refresh(con) == min(days, len(sizes))
    merged = con.execute("SELECT count(DISTINCT month) FROM tool_month_buckets").fetchone()[0]  # type: ignore[index]
    newest = (start + dt.timedelta(days=days + 2)).date()
    months = {(start + dt.timedelta(days=i % days)).date().replace(day=1) for i in range(1, len(sizes) + 1)}
    closed = {
        m for m in months if (m.replace(day=28) + dt.timedelta(days=4)).replace(day=1) <= newest - dt.timedelta(days=1)
    }
    assert merged == len(closed)  # every closed month with calls has its histograms merged
    assert_close(ranking(con, exact=True), ranking(con, exact=False))
    con.close()


def test_top_says_when_its_percentiles_come_from_rollups(samples: str, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from collector.cli import main

    assert main(["top", "--db", samples, "--rollups"]) == 0
    out = capsys.readouterr().out
    assert "percentiles: from daily rollups, within 1 % of exact" in out and "--exact reads every call" in out
    assert main(["top", "--db", samples]) == 0  # a small store: exact, and nothing to say
    assert "rollups" not in capsys.readouterr().out
    assert main(["top", "--db", samples, "--rollups", "--json"]) == 0
    assert {r["percentiles"] for r in json.loads(capsys.readouterr().out)} == {"rollup"}


def test_a_day_rolled_twice_by_two_writers_is_counted_once(samples: str, tmp_path: Path) -> None:
    import shutil

    db = str(tmp_path / "twice.duckdb")
    shutil.copy(samples, db)
    with duckdb.connect(db) as con:
        before = ranking(con, exact=False)
        for table in ("tool_day_stats", "tool_day_buckets", "rollup_days"):  # as a second lake writer would
            con.execute(f"INSERT INTO {table} SELECT * REPLACE ('0' AS roll_id) FROM {table} WHERE day = '2026-11-12'")
        assert ranking(con, exact=False) == before


@settings(max_examples=200, deadline=None)
# a running count that ends exactly at a rank: the median of 5 calls is the third, in the second bucket
@example(rows=[("a", "view_tokens", 10, 2), ("a", "view_tokens", 20, 3)])
@given(st.lists(st.tuples(st.sampled_from(("a", "b")), st.sampled_from(rollup.METRICS), st.integers(0, 900),
                          st.integers(1, 50)), min_size=1, max_size=60))  # fmt: skip
def test_percentiles_read_from_histograms_are_quantile_cont_over_the_bucket_values(
    rows: list[tuple[str, str, int, int]],
) -> None:
    """Each bucket stands for its value as many times as it holds calls: the percentile read from a
    histogram is DuckDB's ``quantile_cont`` over those values (interpolated between two ranks)."""
    merged: dict[tuple[str, str, int], int] = {}
    for tool, metric, bucket, calls in rows:
        merged[(tool, metric, bucket)] = merged.get((tool, metric, bucket), 0) + calls
    histograms = sorted((t, m, b, c) for (t, m, b), c in merged.items())
    estimates = _percentiles(histograms)
    with duckdb.connect() as con:
        for tool, metric in {(t, m) for t, m, _, _ in histograms}:
            values = [rollup.value_of(b) for t, m, b, c in histograms if (t, m) == (tool, metric) for _ in range(c)]
            (expected,) = con.execute("SELECT quantile_cont(v, ?) FROM (SELECT unnest(?::DOUBLE[]) AS v)",
                                      [list(_QUANTILES), values]).fetchone()  # type: ignore[misc]  # fmt: skip
            got = [estimates[tool][f"{metric}_q{int(q * 100)}"] for q in _QUANTILES]
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-12), (tool, metric)
