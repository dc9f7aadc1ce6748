"""Secret redaction: the RE2 screen against the full ``re`` scan, for 1 MiB with no secrets.

    python benchmarks/bench_redact.py [FILE]

Without FILE, a generated log full of near misses ("password", "token", URLs, JSON); with
one, its first MiB. Best of 20 rounds each; the full scan is the baseline of the same run.
"""

from __future__ import annotations

import os
import sys
import time

from collector.measure import redaction as redact
from collector.measure.redaction import Redactor


def _sample_log(size: int = 1 << 20) -> bytes:
    """A deterministic application log with no secrets (but the words ``token``, ``password``, URLs, JSON)."""
    lines = []
    total = i = 0
    while total < size:
        i += 1
        line = (
            f"2025-06-20T10:{i // 60 % 60:02d}:{i % 60:02d}.{i * 37 % 1000:03d}Z [INFO] api-{i % 7} "
            f"GET https://api.internal:8443/v1/users/{i}?page={i % 9} 200 {i * 7919 % 997}ms "
            f'{{"user": "user_{i % 500}", "event": "password reset requested", "input_tokens": {i * 13 % 4096}, '
            f'"trace": "{i * 2654435761 % 2**32:08x}"}} token refreshed for session {i % 97}\n'
        )
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()[:size]


def bench(path: str | None, rounds: int = 20) -> None:
    if path is None:
        data, name = _sample_log(), "generated log"
    else:
        with open(path, "rb") as f:
            data, name = f.read()[: 1 << 20], os.path.basename(path)
    redactor = Redactor()
    saved = redact._SCREEN
    try:
        for label, screen in (("screened", saved), ("full scan", redact._Screen(saved.rules, use_re2=False))):
            redact._SCREEN = screen
            redactor.find(data)  # builds the screen
            best = float("inf")
            for _ in range(rounds):
                t0 = time.perf_counter()
                _, n = redactor.redact_bytes_same_length(data)
                best = min(best, time.perf_counter() - t0)
            print(f"{name}, {len(data):,} bytes, {label}: {n} redactions, best of {rounds}: {best * 1000:.1f} ms")
    finally:
        redact._SCREEN = saved


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit("usage: python benchmarks/bench_redact.py [FILE]")
    bench(sys.argv[1] if len(sys.argv) == 2 else None)
