"""Window-cost benchmark: what counting reads one by one (prompt cache, context editing) and
merging a wrapper model-call span cost a write, against the plain count in the same run.

Agent runs of ``--turns`` model calls with two tool calls between each, written run by run
(``--runs`` per write) through the collector's own writer into one DuckDB file, in three
variants, each into a fresh store:

* plain: model calls report input and output tokens only (every result is read by every later
  call: one as-of join per write) -- the baseline;
* cache: every model call also reports cache reads and writes, and every fifth clears the
  oldest tool result (each result's reads counted one by one);
* cache + wrapper: as cache, and every model call is also traced by an instrumentation span
  around it, beside it in the tree (OpenLLMetry's), merged into one call at each write.

Usage: ``python benchmarks/bench_windowcost.py [--runs 200] [--turns 20] [--writes 10]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

from collector.config import CollectorConfig
from collector.dialects.spans import LLM, TOOL
from collector.model import Item, SpanData
from collector.pipeline import Pipeline
from collector.store.database import read_connection

RESULT = '[{"id": 1, "status": "paid", "amount": 12.5, "region": "north"}]' * 6


def runs(first: int, n: int, turns: int, variant: str) -> list[Item]:
    items: list[Item] = []
    for r in range(first, first + n):
        trace = f"{r:032x}"
        t = 10**18 + r * 10**12
        total = 2000
        for turn in range(turns):
            span = f"{r:08x}{turn:04x}0001"
            attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5",
                                     "gen_ai.usage.input_tokens": total, "gen_ai.usage.output_tokens": 40}  # fmt: skip
            if variant != "plain":
                attrs["gen_ai.usage.cache_read.input_tokens"] = max(total - 500, 0)
                attrs["gen_ai.usage.cache_creation.input_tokens"] = 500
                if turn and turn % 5 == 0:
                    attrs["toolmeter.context.cleared_tool_uses"] = 1
            items.append(Item(LLM, SpanData("chat", trace, span, t, t + 10**6, attrs, parent_span_id="0" * 16)))
            if variant == "wrapper":
                outer = dict(attrs, **{"llm.request.type": "chat"})
                items.append(Item(LLM, SpanData("anthropic.chat", trace, f"{r:08x}{turn:04x}0002", t - 10, t + 10**6 + 10,
                                                outer, parent_span_id="0" * 16)))  # fmt: skip
            t += 2 * 10**6
            for k in range(2):
                tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{k}",
                        "gen_ai.tool.call.id": f"c{r}-{turn}-{k}", "gen_ai.tool.call.result": RESULT}  # fmt: skip
                items.append(Item(TOOL, SpanData("execute_tool", trace, f"{r:08x}{turn:04x}1{k:03x}", t, t + 10**5, tool,
                                                 parent_span_id="0" * 16)))  # fmt: skip
                t += 2 * 10**5
            total += 40 + 400
    return items


def measure(variant: str, args: argparse.Namespace) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="toolmeter-bench-wc-") as tmp:
        pipeline = Pipeline(CollectorConfig(db=os.path.join(tmp, "wc.duckdb"), store_payloads=False))
        costs = []
        spans = 0
        for w in range(args.writes):
            items = runs(w * args.runs, args.runs, args.turns, variant)
            batch = pipeline.build_batch(items)
            t0 = time.perf_counter()
            pipeline.write(batch)
            costs.append((time.perf_counter() - t0) / len(items) * 1e6)
            spans = len(items)
        with read_connection(pipeline.config.db) as con:
            llm = con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]  # type: ignore[index]
        if llm != args.writes * args.runs * args.turns:  # the wrappers merged: one row per model call
            raise SystemExit(f"{variant}: {llm} model calls stored, expected {args.writes * args.runs * args.turns}")
        return statistics.median(costs[1:] or costs), spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="agent runs per write")
    parser.add_argument("--turns", type=int, default=20, help="model calls per run")
    parser.add_argument("--writes", type=int, default=10, help="writes per variant (the median after the first)")
    args = parser.parse_args()
    results = [(name, *measure(variant, args)) for name, variant in
               (("plain counts (baseline)", "plain"), ("cache figures, clearing", "cache"),
                ("cache, clearing, wrapper spans merged", "wrapper"))]  # fmt: skip
    base = results[0][1]
    print(
        f"one write of {args.runs} runs x {args.turns} model calls (2 tool calls a turn), median of {args.writes - 1}"
    )
    print(f"   {'':<40} {'spans':>7} {'us/span':>8} {'vs baseline':>12}")
    for name, cost, spans in results:
        print(f"   {name:<40} {spans:>7,} {cost:>8.1f} {cost / base:>11.2f}x")


if __name__ == "__main__":
    main()
