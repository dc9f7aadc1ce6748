"""Dashboard benchmark: page times on a generated store of N tool calls.

Builds (once, with SQL) a store of ``--calls`` tool calls (default 1,000,000) in traces of
10 tool calls and 11 LLM calls, plus one trace of 200 tool calls, then times:

* the home page's queries (ranking + KPIs): exact percentiles over every call (the baseline)
  and from the daily rollups (what the page reads at this size), and the whole home page
  through AppTest;
* the replay of the 200-call trace: its queries, and the whole page through AppTest;
* the tool-detail queries for the largest tool.

Each figure is printed beside the target (home < 2 s, replay < 1 s). Medians of
``--rounds`` runs; Streamlit's own query cache is cleared between runs, so every run
pays for its SQL.

Several sizes (``--calls 1000000,10000000``) also print how the home page's queries grow
from the smallest store to the largest, both measured in the same run (target: at most 1.5x).

Usage: ``python benchmarks/bench_dashboard.py [--calls N[,N...]] [--db PATH] [--rounds R]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from collector.query.ranking import Filters
from collector.store.connection import connect
from collector.store.database import Store, read_connection, recount_all_later_llm_calls
from dashboard import queries

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "streamlit_app.py")
TOOLS = ["search_orders", "fetch_pod_logs", "run_sql", "fetch_webpage", "list_github_issues", "get_weather",
         "get_customer", "kubectl_describe_node"]  # fmt: skip
BIG_TRACE = "f" * 32


def build(path: str, calls: int) -> None:
    Store(path).ensure_schema()
    con = connect(path, read_only=False)  # as a collector opens it: the same row-group size
    t0 = time.perf_counter()
    populate(con, calls)
    con.close()
    print(f"built {path}: {calls:,} tool calls in {time.perf_counter() - t0:.1f} s")


def populate(con: duckdb.DuckDBPyConnection, calls: int, first: int = 0, finish: bool = True) -> None:
    """Insert ``calls`` generated tool calls (ids from ``first``) and their LLM calls, with SQL.

    ``finish`` adds the long trace and counts the LLM calls after each tool call (once, after
    the last chunk of a store built in chunks).
    """
    tools = "[" + ", ".join(f"'{t}'" for t in TOOLS) + "]"
    con.execute(f"""
        INSERT INTO tool_calls BY NAME
        SELECT lpad(to_hex(i // 10), 32, '0') AS trace_id, lpad(to_hex(i), 16, '0') AS span_id,
               {tools}[1 + (hash(i) % {len(TOOLS)})::INT] AS tool_name,
               ['support-agent', 'sre-agent', 'research-agent'][1 + ((i // 10) % 3)::INT] AS service_name,
               'gen_ai' AS dialect, 'bench' AS source,
               1763000000000000000 + (i // 10) * 60000000000 + (i % 10) * 2000000000 AS start_ns,
               1763000000000000000 + (i // 10) * 60000000000 + (i % 10) * 2000000000 + 500000000 AS end_ns,
               make_timestamp((1763000000000000000 + (i // 10) * 60000000000 + (i % 10) * 2000000000) // 1000) AS start_time,
               'ok' AS status, 'o200k_base' AS encoding,
               (exp(random() * 12))::BIGINT * 4 AS raw_bytes, (exp(random() * 12))::BIGINT AS raw_tokens,
               (exp(random() * 10))::BIGINT AS view_tokens, (exp(random() * 10))::BIGINT * 4 AS view_bytes,
               25000 AS budget_tokens, random() < 0.1 AS truncated, random() < 0.05 AS over_budget,
               'view' AS view_source, 'list' AS shape,
               'fp' || (hash(i) % 3)::VARCHAR AS schema_fingerprint
        FROM range({first}, {first + calls}) t(i)
    """)
    con.execute(f"""
        INSERT INTO llm_calls BY NAME
        SELECT lpad(to_hex(i // 11), 32, '0') AS trace_id, lpad(to_hex(i), 16, '0') AS span_id,
               1763000000000000000 + (i // 11) * 60000000000 + (i % 11) * 2000000000 - 1000000000 AS start_ns,
               1763000000000000000 + (i // 11) * 60000000000 + (i % 11) * 2000000000 - 900000000 AS end_ns,
               make_timestamp((1763000000000000000 + (i // 11) * 60000000000 + (i % 11) * 2000000000) // 1000) AS start_time,
               'gpt-4o' AS model, 1000 + (i % 11) * 3000 AS input_tokens, 200 AS output_tokens, 'gen_ai' AS dialect
        FROM range({first // 10 * 11}, {(first + calls) // 10 * 11}) t(i)
    """)
    if not finish:
        return
    # one long trace: 200 tool calls, 201 LLM calls
    con.execute(f"""
        INSERT INTO tool_calls BY NAME
        SELECT '{BIG_TRACE}' AS trace_id, 'b' || lpad(to_hex(i), 15, '0') AS span_id,
               {tools}[1 + (i % {len(TOOLS)})::INT] AS tool_name, 'sre-agent' AS service_name,
               1764000000000000000 + i * 4000000000 AS start_ns, 1764000000000000000 + i * 4000000000 + 1000 AS end_ns,
               make_timestamp((1764000000000000000 + i * 4000000000) // 1000) AS start_time,
               'ok' AS status, 'o200k_base' AS encoding, 4000 AS raw_bytes, 1000 AS raw_tokens,
               900 AS view_tokens, 3600 AS view_bytes, 'view' AS view_source
        FROM range(200) t(i)
    """)
    con.execute(f"""
        INSERT INTO llm_calls BY NAME
        SELECT '{BIG_TRACE}' AS trace_id, 'c' || lpad(to_hex(i), 15, '0') AS span_id,
               1764000000000000000 + i * 4000000000 - 2000000000 AS start_ns,
               1764000000000000000 + i * 4000000000 - 1000000000 AS end_ns,
               make_timestamp((1764000000000000000 + i * 4000000000 - 2000000000) // 1000) AS start_time,
               'gpt-4o' AS model, 2000 + i * 900 AS input_tokens, 100 AS output_tokens
        FROM range(201) t(i)
    """)
    recount_all_later_llm_calls(con)


def timed(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def app_run(db: str, page: str | None = None, **query: str) -> Callable[[], object]:
    from streamlit.testing.v1 import AppTest

    def run() -> object:
        import streamlit as st

        st.cache_data.clear()
        os.environ["TOOLMETER_DB"] = db
        at = AppTest.from_file(APP, default_timeout=120)
        for k, v in query.items():
            at.query_params[k] = v
        if page:
            at.switch_page(page)  # before the first run: only this page is rendered
        at.run()
        assert not at.exception, at.exception
        if page:
            assert at.title and at.title[0].value != "Window eaters", "switch_page did not take"
        return at

    return run


def measure(db: str, calls: int, rounds: int) -> float:
    """Time the pages on the store ``db`` of ``calls`` calls (built first if missing), print the
    table, and return the home page's ranking + KPI queries as shown."""
    if not os.path.exists(db):
        build(db, calls)
    t0 = time.perf_counter()
    rolled = Store(db).refresh_rollups()
    print(f"rolled {rolled:,} closed day(s) into daily rollups in {time.perf_counter() - t0:.1f} s")
    f = Filters()

    def home(exact: bool | None) -> Callable[[], object]:
        def run() -> object:
            with read_connection(db) as con:
                table = queries.tool_ranking(con, f, "view", exact)
                return table, queries.kpis(con, table), queries.filter_options(con)

        return run

    with read_connection(db) as con:
        which = queries.tool_ranking(con, f, "view", None)["percentiles"].iloc[0]

    def replay_queries() -> object:
        with read_connection(db) as con:
            return (queries.find_traces(con, f, "largest"), queries.trace_steps(con, BIG_TRACE),
                    queries.context_occupancy(con, BIG_TRACE))  # fmt: skip

    def detail_queries() -> object:
        with read_connection(db) as con:
            return (queries.size_histogram(con, f, "search_orders", "view_tokens"),
                    queries.daily_envelope(con, f, "search_orders"), queries.largest_calls(con, f, "search_orders"))  # fmt: skip

    shown = timed(home(None), rounds)
    rows = [
        ("home page: ranking + KPI queries, exact (baseline)", timed(home(True), rounds), None),
        (f"home page: ranking + KPI queries, as shown ({which})", shown, 0.2),
        ("home page: whole page (AppTest)", timed(app_run(db), rounds), 2.0),
        ("replay of a 200-call trace: queries", timed(replay_queries, rounds), 1.0),
        ("replay of a 200-call trace: whole page (AppTest)",
         timed(app_run(db, "app_pages/replay.py", trace=BIG_TRACE), rounds), None),
        ("tool detail: histogram + daily envelope + largest", timed(detail_queries, rounds), None),
    ]  # fmt: skip
    print(f"\nstore: {db} ({calls:,} tool calls); median of {rounds}")
    print(f"{'what':<52} {'seconds':>8} {'target':>7}")
    for name, sec, target in rows:
        print(f"{name:<52} {sec:>8.3f} {('< ' + str(target)) if target else '':>7}")
    return shown


GROWTH_TARGET = 1.5
"""The home page's queries at the largest size, at most this many times those at the smallest."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", default="1000000",
                        help="calls in the store; several, comma-separated (1000000,10000000), also print how "
                             "the home page's queries grow from the smallest to the largest")  # fmt: skip
    parser.add_argument("--db", default=None, help="the store's file (one size only)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        sizes = [int(n.replace("_", "")) for n in args.calls.split(",")]
    except ValueError:
        parser.error(f"--calls {args.calls!r}: give whole numbers, comma-separated")
    if args.db and len(sizes) > 1:
        parser.error("--db names one store: give one size with it, or leave it out")
    shown = {n: measure(args.db or f"/tmp/toolmeter-bench-{n}.duckdb", n, args.rounds) for n in sizes}
    if len(shown) > 1:
        low, high = min(shown), max(shown)
        growth = shown[high] / shown[low]
        print(f"\nhome page: ranking + KPI queries as shown, {high:,} calls against {low:,} (same run): "
              f"{shown[high]:.3f} / {shown[low]:.3f} s = {growth:.2f}x (target <= {GROWTH_TARGET}x: "
              f"{'met' if growth <= GROWTH_TARGET else 'missed'})")  # fmt: skip


if __name__ == "__main__":
    main()
