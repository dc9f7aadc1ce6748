"""Flush benchmark: what one write of a batch costs as the store grows.

A receiver runs for weeks; a write that costs more the more the store holds slows it down
until it cannot keep up. This measures one batch of small tool calls (about 1 KB results,
measured once, then given new trace ids for each write) written again and again into one
DuckDB file through the collector's own writer, and prints the cost per span at each size
beside the cost into a store of ``--first`` calls (the baseline, same run).

Usage: ``python benchmarks/bench_flush.py [--batch 5000] [--calls 1000000]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench_receiver import requests_for

from collector.config import CollectorConfig
from collector.measuring import items_of
from collector.pipeline import Pipeline
from collector.store.batch import Batch


def renamed(base: Batch, n: int) -> Batch:
    """``base`` with trace ids of its own (the n-th copy)."""
    prefix = f"{n:08x}"
    batch = Batch()
    batch.tool_rows = [dict(r, trace_id=prefix + r["trace_id"][8:]) for r in base.tool_rows]
    batch.payload_rows = [dict(r, trace_id=prefix + r["trace_id"][8:]) for r in base.payload_rows]
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=5000, help="tool calls per write")
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in the store at the end")
    parser.add_argument("--first", type=int, default=100_000, help="store size of the baseline")
    args = parser.parse_args()
    texts = [json.dumps([{"id": i * 10 + k, "status": "paid", "amount": round(k * 3.7, 2), "region": "north"}
                         for k in range(14)]) for i in range(args.batch)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="toolmeter-bench-flush-") as tmp:
        db = os.path.join(tmp, "flush.duckdb")
        pipeline = Pipeline(CollectorConfig(db=db))
        items = [item for body in requests_for(texts, 100, offset=1) for item in items_of(1, body)]
        base = pipeline.build_batch(items)
        writes = args.calls // args.batch
        marks = sorted({args.first // args.batch, *(writes * k // 5 - 2 for k in range(1, 6))} - {0})
        costs = []
        for n in range(writes):
            batch = renamed(base, n)
            t0 = time.perf_counter()
            pipeline.write(batch)
            costs.append((time.perf_counter() - t0) / args.batch * 1e6)
        print(f"one write of {args.batch:,} small tool calls into one DuckDB file, as it grows")
        print(f"   {'calls stored before the write':>30} {'us/span':>8} {'vs baseline':>12}")
        baseline = None
        for n in marks:
            us = statistics.median(costs[max(n - 1, 0) : n + 2])  # three writes around the mark: one is noisy
            baseline = baseline or us
            note = "  (baseline)" if n == marks[0] else ""
            print(f"   {n * args.batch:>30,} {us:>8.1f} {us / baseline:>11.2f}x{note}")
        print(f"   file: {os.path.getsize(db) / 1e6:,.0f} MB")


if __name__ == "__main__":
    main()
