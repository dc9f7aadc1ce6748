"""Alert-rule benchmark: evaluating the rules on a generated store, and a writer beside it.

On a copy of ``bench_dashboard.py``'s store of ``--calls`` tool calls (built once under /tmp
if missing; 1,000,000 calls over 70 days by default, 10,000,000 over 694), it times:

* a whole evaluation (``evaluate``, every window read from the store): the baseline;
* the next evaluation, as ``serve`` and ``toolmeter watch`` make it every few minutes, after
  ``--new`` calls were written into the store's last day: the windows kept from the first
  (``collector.alerts.memo``) and those read again, and its seconds against the whole one;
* a writer of this process (as ``serve``'s is) writing a row every 50 ms while a whole
  evaluation runs (as ``serve``'s first: a writer waiting is let in between two windows read):
  how long a write waited for the file, longest and median, beside the same writes with no
  evaluation (the baseline).

Usage: ``python benchmarks/bench_alerts.py [--calls N] [--new N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dashboard import build

from collector.alerts.evaluation import evaluate
from collector.alerts.memo import Memo
from collector.alerts.rules import Rules
from collector.store.connection import connect, read_connection

WRITE_EVERY_S = 0.05


def _add_calls(db: str, n: int) -> None:
    """``n`` calls more on the store's last day: copies of its last calls, with new ids."""
    con = connect(db, read_only=False)
    try:
        con.execute(f"""
            INSERT INTO tool_calls BY NAME
            SELECT * REPLACE ('new' || span_id AS span_id, start_ns + 1 AS start_ns)
            FROM (SELECT * FROM tool_calls ORDER BY start_time DESC LIMIT {int(n)})""")
    finally:
        con.close()


def _writes(db: str, stop: threading.Event, waits: list[float]) -> None:
    """Write a row every :data:`WRITE_EVERY_S` until ``stop``; each write's seconds into ``waits``."""
    while not stop.wait(WRITE_EVERY_S):
        t0 = time.perf_counter()
        con = connect(db, read_only=False, wait_s=3600)
        try:
            con.execute("INSERT INTO bench_writes VALUES (?)", [t0])
        finally:
            con.close()
        waits.append(time.perf_counter() - t0)


def _beside_writes(db: str, seconds: float | None) -> tuple[list[float], float]:
    """The waits of the writes made during a whole evaluation (or ``seconds`` of none), and its seconds."""
    stop, waits = threading.Event(), []  # type: ignore[var-annotated]
    writer = threading.Thread(target=_writes, args=(db, stop, waits))
    writer.start()
    t0 = time.perf_counter()
    if seconds is None:
        evaluate(db, Rules(), memo=Memo())  # as serve's first: every window read, a writer let in before each
    else:
        time.sleep(seconds)
    took = time.perf_counter() - t0
    stop.set()
    writer.join()
    return waits, took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=1_000, help="calls written between two evaluations")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = f"/tmp/toolmeter-bench-{args.calls}.duckdb"
    if not os.path.exists(source):
        build(source, args.calls)
    folder = tempfile.mkdtemp(prefix="toolmeter-bench-alerts-")
    db = os.path.join(folder, "store.duckdb")
    try:
        whole, kept, windows, read = [], [], 0, []
        for _ in range(args.rounds):
            shutil.copy(source, db)
            memo = Memo()
            t0 = time.perf_counter()
            evaluate(db, Rules(), memo=memo)
            whole.append(time.perf_counter() - t0)
            windows = memo.read
            _add_calls(db, args.new)
            t0 = time.perf_counter()
            evaluate(db, Rules(), memo=memo)
            kept.append(time.perf_counter() - t0)
            read.append(memo.read)
        with read_connection(db) as con:
            calls, days = con.execute("SELECT count(*), count(DISTINCT start_time::DATE) FROM tool_calls").fetchone()  # type: ignore[misc]
        print(f"{calls:,} calls over {days} days; medians of {args.rounds} rounds\n")
        w, k = statistics.median(whole), statistics.median(kept)
        print(f"whole evaluation (every window read: {windows:,} envelopes and shares): {w:8.2f} s   (baseline)")
        print(f"next evaluation, {args.new:,} calls later ({statistics.median(read):,.0f} windows read again): "
              f"{k:8.2f} s   ({k / w:.3f}x)")  # fmt: skip

        con = connect(db, read_only=False)
        con.execute("CREATE TABLE IF NOT EXISTS bench_writes (t DOUBLE)")
        con.close()
        during, took = _beside_writes(db, None)
        alone, _ = _beside_writes(db, took)
        print(
            f"\nwrites every {WRITE_EVERY_S * 1000:.0f} ms, seconds each waited and wrote (one evaluation, {took:.1f} s):"
        )
        for name, waits in (("beside an evaluation", during), ("alone (baseline)", alone)):
            print(f"  {name:22s} {len(waits):4d} writes   median {statistics.median(waits):.3f}   "
                  f"longest {max(waits):.3f}")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
