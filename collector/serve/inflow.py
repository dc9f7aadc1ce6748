"""The rate of request bytes coming into a receiver, over the last few minutes.

``serve`` rewrites its file only when what comes in meanwhile fits in its queue; the rate is kept
in buckets of :data:`BUCKET_S` seconds, so noting a request is an addition and the memory a few
numbers whatever the load.
"""

from __future__ import annotations

import threading
import time

BUCKET_S = 10.0
"""The rate's resolution: a request is counted in the bucket of its ten seconds."""
WINDOW_S = 300.0
"""The rate is over this many seconds (five minutes): long enough that a pause between bursts is
not taken for a quiet receiver, short enough to follow the load as it changes over a day."""


class Inflow:
    """Bytes accepted, in the last :data:`WINDOW_S` seconds (thread-safe: request threads note)."""

    def __init__(self) -> None:
        n = int(WINDOW_S // BUCKET_S)
        self._ids = [-1] * n
        self._bytes = [0] * n
        self._lock = threading.Lock()  # request threads note at once; a lost addition would undercount

    def note(self, size: int, now: float | None = None) -> None:
        """Count ``size`` bytes accepted at ``now`` (``time.monotonic``)."""
        b = int((time.monotonic() if now is None else now) // BUCKET_S)
        i = b % len(self._ids)
        with self._lock:
            if self._ids[i] != b:  # the bucket last held a window ago: start it again
                self._ids[i] = b
                self._bytes[i] = 0
            self._bytes[i] += size

    def rate(self, now: float | None = None) -> float:
        """Bytes a second over the last :data:`WINDOW_S` seconds (0 for a receiver that got none)."""
        b = int((time.monotonic() if now is None else now) // BUCKET_S)
        n = len(self._ids)
        with self._lock:
            total = sum(size for at, size in zip(self._ids, self._bytes, strict=True) if b - n < at <= b)
        return total / WINDOW_S
