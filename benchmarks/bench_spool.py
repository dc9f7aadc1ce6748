"""Spool benchmark: requests a second the receiver's spool makes durable, by concurrent senders.

``toolmeter serve`` acknowledges a request once its body is in the spool and synced to disk
(:mod:`collector.serve.spool`). Each of ``--threads`` threads (the receiver's request threads)
appends ``--requests`` bodies of ``--kb`` KB to a real spool in a temporary folder, and for each
count of threads the benchmark prints, beside a baseline measured in the same run on the same
disk:

* the spool: requests a second, and syncs a request (its appenders share syncs);
* the baseline: the same records written and each synced on its own under one lock, which is
  what a spool does that syncs once a request.

Usage: ``python benchmarks/bench_spool.py [--threads 1,4,8] [--requests N] [--kb K] [--dir PATH]``
(``--dir``: a folder on the disk to measure, by default the system's temporary folder).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from collector.serve.spool import TRACES_PROTOBUF, Spool

ROUNDS = 3


def spool_rate(folder: str, threads: int, requests: int, body: bytes) -> tuple[float, float]:
    """(requests a second, syncs a request) of ``threads`` appending to one spool."""
    spool = Spool(folder)
    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda _: [spool.append(TRACES_PROTOBUF, body) for _ in range(requests)], range(threads)))
        elapsed = time.perf_counter() - start
        return threads * requests / elapsed, spool.syncs / (threads * requests)
    finally:
        spool.close()


def baseline_rate(folder: str, threads: int, requests: int, body: bytes) -> float:
    """Requests a second when each record is written and synced on its own, under one lock."""
    os.makedirs(folder, exist_ok=True)
    lock = threading.Lock()
    sync = getattr(os, "fdatasync", os.fsync)
    with open(os.path.join(folder, "baseline.log"), "ab") as f:

        def append() -> None:
            with lock:
                f.write(body)
                f.flush()
                sync(f.fileno())

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda _: [append() for _ in range(requests)], range(threads)))
        return threads * requests / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,4,8", help="counts of concurrent senders, comma-separated")
    parser.add_argument("--requests", type=int, default=300, help="requests each thread appends")
    parser.add_argument("--kb", type=int, default=100, help="size of a request body (100 small spans: ~100 KB)")
    parser.add_argument("--dir", default=None, help="a folder on the disk to measure")
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")]
    body = os.urandom(args.kb * 1024)
    root = tempfile.mkdtemp(prefix="toolmeter-bench-spool-", dir=args.dir)
    print(f"spool: {args.requests} requests of {args.kb} KB a thread, in {root}; median of {ROUNDS} rounds")
    print(f"   {'threads':>7} {'baseline req/s':>15} {'spool req/s':>12} {'vs baseline':>12} {'syncs a request':>16}")
    try:
        for threads in counts:
            base, rate, syncs = [], [], []
            for r in range(ROUNDS):  # alternated: the disk's speed drifts
                base.append(baseline_rate(os.path.join(root, f"b{threads}-{r}"), threads, args.requests, body))
                got = spool_rate(os.path.join(root, f"s{threads}-{r}"), threads, args.requests, body)
                rate.append(got[0])
                syncs.append(got[1])
            b, s = statistics.median(base), statistics.median(rate)
            print(f"   {threads:>7} {b:>15,.0f} {s:>12,.0f} {s / b:>11.2f}x {statistics.median(syncs):>16.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
