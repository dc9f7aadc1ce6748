"""Ingest benchmark: ``toolmeter ingest`` of the same spans laid out as files in different ways.

The spans are ``bench_peers.py``'s (``--spans`` tool spans with ~1 KB results, 100 to a
request). Each layout is ingested by ``python -m collector ingest`` into a new store, ``--rounds``
times, and the median is printed with the layout's time against the baseline's:

* one OTLP protobuf file holding every span (the baseline: no per-file cost);
* a folder of OTLP protobuf files, one request each (as exporters that write files leave them);
* one OTLP/JSON file, one request a line.

Usage: ``python benchmarks/bench_ingest.py [--spans N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peers import build_workload
from google.protobuf.json_format import MessageToJson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def _layouts(folder: Path, spans: int) -> dict[str, list[str]]:
    """The workload written as each layout; returns the paths to ingest, by layout."""
    requests = [ExportTraceServiceRequest.FromString(body) for body in build_workload(spans).bodies]
    whole = ExportTraceServiceRequest()
    for request in requests:
        whole.resource_spans.extend(request.resource_spans)
    (folder / "all.pb").write_bytes(whole.SerializeToString())
    (folder / "requests").mkdir()
    for i, request in enumerate(requests):
        (folder / "requests" / f"r{i:05d}.pb").write_bytes(request.SerializeToString())
    with open(folder / "all.jsonl", "w") as f:
        for request in requests:
            f.write(MessageToJson(request, indent=None) + "\n")
    return {
        "one protobuf file (baseline)": [str(folder / "all.pb")],
        f"{len(requests)} protobuf files, a request each": sorted(str(p) for p in (folder / "requests").iterdir()),
        "one OTLP/JSON file, a request a line": [str(folder / "all.jsonl")],
    }


def _ingest(paths: list[str], folder: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the ingest and its measuring processes)."""
    db = folder / f"store-{time.monotonic_ns()}.duckdb"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "collector", "ingest", *paths, "--db", str(db), "--no-alerts"],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolmeter-bench-ingest-") as tmp:
        folder = Path(tmp)
        layouts = _layouts(folder, args.spans)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in layouts}
        for _ in range(args.rounds):  # layouts alternated, so a slow moment of the machine hits each
            for name, paths in layouts.items():
                results[name].append(_ingest(paths, folder))
        print(f"{args.spans:,} tool spans, {os.cpu_count()} cores; medians of {args.rounds} rounds\n")
        print(f"{'layout':<42} {'wall (s)':>9} {'spans/s':>9} {'CPU (s)':>8} {'vs baseline':>12}")
        base = statistics.median(w for w, _ in next(iter(results.values())))
        for name, runs in results.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"{name:<42} {wall:>9.2f} {args.spans / wall:>9,.0f} {cpu:>8.2f} {wall / base:>11.2f}x")


if __name__ == "__main__":
    main()
