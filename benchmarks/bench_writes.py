"""Write benchmark: a receiver's writes into a store that already holds a day of calls.

Every write looks at the stored calls near its own (repeats, one call recorded by two spans, the
window cost of a trace's earlier calls); what it reads must follow the batch, not the day behind
it. Writes the same batches into two stores, one time each, alternated:

* an empty store (the baseline),
* a store holding ``--prefill`` tool calls (and an LLM call for each) spread over the 23 hours
  before the batches (default 1,400,000: some 17 calls a second all day), inserted with SQL.

A batch is ``--spans`` spans of bench_receiver's workloads, measured before the clock starts:
small results (``--views`` adds bench_receiver's agent runs instead: each tool call followed by a
model call carrying the run's tool responses). Prints the milliseconds a write (median of
``--writes``) into each store and their ratio, against the target: within 1.25x of the empty store.

Usage: ``python benchmarks/bench_writes.py [--prefill N] [--spans N] [--writes N] [--views]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_receiver import START_NS, conversations, requests_for

from collector.config import DATA_PATH_ENV, STATE_DIR_ENV, CollectorConfig
from collector.measuring import decode_requests
from collector.pipeline import Pipeline
from collector.serve import spool
from collector.store.batch import Batch
from collector.store.connection import connect

TARGET_RATIO = 1.25
DAY_NS = 23 * 3600 * 10**9


def prefill(db: str, calls: int) -> None:
    """``calls`` tool calls of traces of 10, and an LLM call before each, in time order over the
    23 hours before ``START_NS`` (the batches' time), as a collector's store holds them."""
    step = DAY_NS // max(calls, 1)
    con = connect(db, read_only=False)
    try:
        con.execute(f"""
            INSERT INTO tool_calls BY NAME
            SELECT lpad(to_hex(i // 10), 32, 'a') AS trace_id, lpad(to_hex(i), 16, '0') AS span_id,
                   'search_orders' AS tool_name, 'gen_ai' AS dialect, 'span' AS origin, 'bench' AS source,
                   {START_NS - DAY_NS} + i * {step} AS start_ns, {START_NS - DAY_NS} + i * {step} + 1000 AS end_ns,
                   make_timestamp(({START_NS - DAY_NS} + i * {step}) // 1000) AS start_time,
                   'ok' AS status, 'o200k_base' AS encoding, 900 AS raw_bytes, 300 AS raw_tokens,
                   300 AS view_tokens, 900 AS view_bytes, 'raw' AS view_source, 'list' AS shape
            FROM range({calls}) t(i)""")  # fmt: skip
        con.execute(f"""
            INSERT INTO llm_calls BY NAME
            SELECT lpad(to_hex(i // 10), 32, 'a') AS trace_id, lpad(to_hex(i), 16, 'c') AS span_id,
                   {START_NS - DAY_NS} + i * {step} - 500 AS start_ns, {START_NS - DAY_NS} + i * {step} - 100 AS end_ns,
                   make_timestamp(({START_NS - DAY_NS} + i * {step} - 500) // 1000) AS start_time,
                   'gpt-4o' AS model, 1000 + (i % 10) * 300 AS input_tokens, 100 AS output_tokens,
                   'gen_ai' AS dialect
            FROM range({calls}) t(i)""")  # fmt: skip
        con.execute("CHECKPOINT")
    finally:
        con.close()


def batches(pipeline: Pipeline, spans: int, writes: int, views: bool) -> list[Batch]:
    made = []
    for w in range(writes):
        first = 1 + w * spans
        if views:
            texts = [
                json.dumps([{"id": i, "status": "paid", "amount": i % 97}] * 4)
                for i in range(first, first + spans // 2)
            ]
            bodies = conversations(texts, 100, first)
        else:
            texts = [json.dumps([{"id": i * 10 + k, "status": "paid", "region": "north"} for k in range(14)])
                     for i in range(first, first + spans)]  # fmt: skip
            bodies = requests_for(texts, 100, first)
        batch = pipeline.build_batch(decode_requests([(spool.TRACES_PROTOBUF, b) for b in bodies]))
        batch.pack()
        made.append(batch)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefill", type=int, default=1_400_000)
    parser.add_argument("--spans", type=int, default=14_000)
    parser.add_argument("--writes", type=int, default=5)
    parser.add_argument("--views", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="toolmeter-bench-writes-")
    os.environ[STATE_DIR_ENV] = tmp
    os.environ[DATA_PATH_ENV] = os.path.join(tmp, "data")
    empty = Pipeline(CollectorConfig(db=os.path.join(tmp, "empty.duckdb")))
    full = Pipeline(CollectorConfig(db=os.path.join(tmp, "day.duckdb")))
    for p in (empty, full):
        p.store.ensure_schema()
    t0 = time.perf_counter()
    prefill(full.config.db, args.prefill)
    print(f"prefilled {args.prefill:,} tool calls and as many LLM calls over 23 h in {time.perf_counter() - t0:.1f} s")
    work = batches(empty, args.spans, args.writes, args.views)
    times: dict[str, list[float]] = {"empty": [], "day": []}
    for batch in work:  # alternated: the machine's drift falls on both
        for name, p in (("empty", empty), ("day", full)):
            t0 = time.perf_counter()
            with p.store.holding():
                p.write(batch)
            times[name].append(time.perf_counter() - t0)
    kind = "agent runs (tool and model spans)" if args.views else "small results"
    print(f"{args.writes} writes of {args.spans:,} spans of {kind} (each with its closing checkpoint):")
    e, d = statistics.median(times["empty"]), statistics.median(times["day"])
    for name, t in (("empty store (baseline)", e), (f"a store of {args.prefill:,} calls", d)):
        print(f"   {name}: {t * 1000:.0f} ms a write (median; {t / args.spans * 1e6:.1f} us a span)")
    ratio = d / e
    print(f"   ratio {ratio:.2f}x; target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'MISSED'}")


if __name__ == "__main__":
    main()
