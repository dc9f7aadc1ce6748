"""Flush benchmark: what one write of a batch costs as the store grows.

A receiver runs for weeks; a write that costs more the more the store holds slows it down
until it cannot keep up. This measures one batch of small tool calls (about 1 KB results,
measured once, then given new random trace ids for each write, as OpenTelemetry makes them,
and times ``--every`` seconds later than the previous write's) written again and again into
one DuckDB file through the collector's own writer, with the file's closing checkpoint (its
CPU also shown apart), and prints the cost per span at each size beside the cost into a
store of ``--first`` calls (the baseline, same run). It does so for a file made now, for
one made with the primary keys the large tables had before, and for a DuckLake with a
DuckDB catalog file and its data beside it (``--layouts``; the lake is not in the default:
a lake write commits a catalog snapshot and a Parquet file per table, ~10x a file's cost).

Each size shows two figures: the median of the three writes around it (one write), and the
mean of the ten around it (what a write costs over time). DuckDB's checkpoint merges the row
groups the writes leave every few writes, and a write that merges costs 2-3x one that does not
(31-33 against 164-168 ms of commit for 5,000 calls, BENCHMARKS.md): three writes can hold one
merge or two, ten hold their share.

Usage: ``python benchmarks/bench_flush.py [--batch 5000] [--calls 1000000]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from typing import Any

import duckdb
from bench_receiver import TOOLS_PER_TRACE, conversations, requests_for

from collector.config import DATA_PATH_ENV, STATE_DIR_ENV, CollectorConfig
from collector.measuring import items_of
from collector.pipeline import Pipeline
from collector.store.batch import Batch
from collector.store.lake import PREFIX, close_all
from collector.store.schema import keyed_schema_sql

TIMES = ("start_ns", "end_ns", "llm_start_ns", "asked_ns")
"""The columns of a batch's rows that hold a time."""


def renamed(base: Batch, rng: random.Random, shift_ns: int) -> Batch:
    """``base`` with random trace ids of its own (a trace keeps its spans together), ``shift_ns`` later."""
    ids: dict[str, str] = {}

    def moved(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for row in rows:
            row = dict(row, trace_id=ids.setdefault(row["trace_id"], f"{rng.getrandbits(128):032x}"))
            for column in TIMES:
                if row.get(column) is not None:
                    row[column] += shift_ns
            out.append(row)
        return out

    batch = Batch()
    for table in ("tool_rows", "payload_rows", "llm_rows", "message_rows", "name_rows"):
        setattr(batch, table, moved(getattr(base, table)))
    return batch


def _size(folder: str) -> int:
    """Bytes of every file under ``folder`` (a DuckDB file, or a lake's catalog and data)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(folder) for f in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=5000, help="tool calls per write")
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls in the store at the end")
    parser.add_argument("--first", type=int, default=100_000, help="store size of the baseline")
    parser.add_argument("--layouts", default="now,with keys",
                        help="any of 'now', 'with keys' (a file as made before) and 'lake'")  # fmt: skip
    parser.add_argument("--every", type=float, default=600.0,
                        help="seconds of span time between writes (600: 5,000 calls every 10 minutes, ~720,000 a day)")  # fmt: skip
    parser.add_argument("--views", action="store_true",
                        help="runs of 5 tool calls, each followed by a model call whose input carries the run's "
                             "tool responses so far: the views, and the joins between calls and views, are written too")  # fmt: skip
    args = parser.parse_args()
    texts = [json.dumps([{"id": i * 10 + k, "status": "paid", "amount": round(k * 3.7, 2), "region": "north"}
                         for k in range(14)]) for i in range(args.batch)]  # fmt: skip
    writes = args.calls // args.batch
    marks = sorted({args.first // args.batch, *(writes * k // 5 - 2 for k in range(1, 6))} - {0})
    results = {}
    for layout in args.layouts.split(","):
        with tempfile.TemporaryDirectory(prefix="toolmeter-bench-flush-") as tmp:
            db = os.path.join(tmp, "flush.duckdb")
            if layout == "lake":
                os.environ[DATA_PATH_ENV] = os.path.join(tmp, "data")
                os.environ[STATE_DIR_ENV] = os.path.join(tmp, "state")
                db = f"{PREFIX}{tmp}/flush.ducklake"
            elif layout == "with keys":  # a file made before the large tables lost their keys
                with duckdb.connect(db) as con:
                    con.execute(keyed_schema_sql())
            pipeline = Pipeline(CollectorConfig(db=db))
            bodies = conversations(texts, 100, offset=1) if args.views else requests_for(texts, 100, offset=1)
            items = [item for body in bodies for item in items_of(1, body)]
            base = pipeline.build_batch(items)
            rng = random.Random(7)
            costs, closing = [], []
            for n in range(writes):
                batch = renamed(base, rng, round(n * args.every * 1e9))
                t0 = time.perf_counter()
                with pipeline.store.holding():  # the file is closed (and checkpointed) as the block ends
                    pipeline.write(batch)
                    cpu = time.process_time()
                costs.append((time.perf_counter() - t0) / args.batch * 1e6)
                closing.append((time.process_time() - cpu) / args.batch * 1e6)
            # three writes around each mark: one is noisy; ten: the row-group merges counted in
            results[layout] = ([statistics.median(costs[max(n - 1, 0) : n + 2]) for n in marks], _size(tmp),
                               [statistics.median(closing[max(n - 1, 0) : n + 2]) for n in marks],
                               [statistics.mean(costs[max(n - 5, 0) : n + 5]) for n in marks])  # fmt: skip
            close_all()
    views = (
        f", each with a model call carrying the views of its run ({TOOLS_PER_TRACE} calls a run)" if args.views else ""
    )
    print(f"one write of {args.batch:,} small tool calls{views} (random trace ids, {args.every:g} s of span time apart) "
          "into one store, as it grows")  # fmt: skip
    head = "".join(f" {layout + ': us/span':>20} {'vs baseline':>12} {'closing, CPU':>13} {'mean of 10':>11} {'vs':>6}"
                   for layout in results)  # fmt: skip
    print(f"   {'calls stored before the write':>30}{head}")
    for i, n in enumerate(marks):
        cells = "".join(
            f" {us[i]:>20.1f} {us[i] / us[0]:>11.2f}x {close[i]:>13.1f} {mean[i]:>11.1f} {mean[i] / mean[0]:>5.2f}x"
            for us, _, close, mean in results.values()
        )
        print(f"   {n * args.batch:>30,}{cells}{'  (baseline)' if i == 0 else ''}")
    print(
        "   store at the end: "
        + ", ".join(f"{layout} {size / 1e6:,.0f} MB" for layout, (_, size, _, _) in results.items())
    )
    print("   closing, CPU: µs a call of this process's CPU while the file was closed after the write (its checkpoint)")
    print("   mean of 10: µs a call over the ten writes around the size, the checkpoint's row-group merges counted in")


if __name__ == "__main__":
    main()
