"""Schema fingerprints: ``schema_of`` against a walk that visits every JSON value, same run.

    python benchmarks/bench_fingerprint.py [--compare CHECKOUT] [--rounds 9]

Two workloads: 2,000 small results (14 rows of 4 keys, as ``bench_receiver.py`` sends) and
the real payloads of ../shared/realworld that are JSON. The baseline is the plain recursive
walk the fingerprint's property test checks against (every value visited, one at a time).
``--compare`` also times ``collector/measure/shape.py`` of another checkout (a worktree of
an earlier commit), loaded into this process and run alternately with this one, so both see
the same machine. Median and best of ``--rounds`` rounds, µs a result.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.measure import shape
from collector.measure.shape import parse_json

ROOT = Path(__file__).resolve().parent.parent
REALWORLD = Path(os.environ.get("TOOLMETER_REALWORLD", ROOT.parent / "shared" / "realworld" / "payloads"))


def every_value(parsed: Any) -> tuple[str, list[str], bool]:
    """The baseline: each value visited, recursively (the tests' reference walk)."""
    return (*shape.schema_by_every_value(parsed), True)


def _load(checkout: str) -> Callable[[Any], tuple[str, list[str], bool]]:
    spec = importlib.util.spec_from_file_location("compared_shape", Path(checkout) / "collector/measure/shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.schema_of  # type: ignore[no-any-return]


def _workloads() -> dict[str, list[Any]]:
    small = [[{"id": i * 10 + k, "status": "paid", "amount": round(k * 3.7, 2), "region": "north"} for k in range(14)]
             for i in range(2000)]  # fmt: skip
    real = []
    for path in sorted(REALWORLD.glob("*")):
        data = path.read_bytes()
        if path.name.startswith("holmesgpt__"):
            data = data.split(b"\n", 2)[2]
        parsed, _ = parse_json(data.decode("utf-8"))
        if parsed is not None:
            real.append(parsed)
    return {"small results": json.loads(json.dumps(small)), f"real JSON payloads ({len(real)})": real}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", help="another checkout whose schema_of to time alongside")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    walks: dict[str, Callable[[Any], tuple[str, list[str], bool]]] = {"every value (baseline)": every_value}
    if args.compare:
        walks[f"schema_of of {args.compare}"] = _load(args.compare)
    walks["schema_of (this checkout)"] = shape.schema_of
    for name, values in _workloads().items():
        if not values:
            continue
        times: dict[str, list[float]] = {w: [] for w in walks}
        for _ in range(args.rounds):
            for walk_name, walk in walks.items():  # alternated: each round sees the same machine
                t0 = time.process_time()
                for v in values:
                    walk(v)
                times[walk_name].append((time.process_time() - t0) / len(values) * 1e6)
        expected = [every_value(v)[:2] for v in values]
        for walk_name, walk in walks.items():
            if [walk(v)[:2] for v in values] != expected:
                sys.exit(f"{walk_name} gives other fingerprints than every value's walk")
        base = statistics.median(times["every value (baseline)"])
        print(f"\n{name}: µs a result, median and best of {args.rounds}")
        for walk_name, t in times.items():
            print(
                f"   {walk_name:<44} {statistics.median(t):>10.1f} {min(t):>10.1f} {base / statistics.median(t):>7.2f}x"
            )


if __name__ == "__main__":
    main()
