"""The rate of request bytes coming into a receiver, and whether a pause of its writes fits.

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
KNOWN_AFTER_S = 60.0
"""The load is taken as known once the receiver has run this long: right after a restart the
exporters that waited for it send what they held, and no rate has been seen yet."""
QUEUE_SHARE = 0.5
"""Writes pause only when the requests expected meanwhile fill at most this share of the queue:
the rest is for a burst, and a full queue answers 503 (exporters retry)."""


class Inflow:
    """Bytes accepted, in the last :data:`WINDOW_S` seconds (thread-safe: request threads note)."""

    def __init__(self, now: float | None = None) -> None:
        n = int(WINDOW_S // BUCKET_S)
        self._ids = [-1] * n
        self._bytes = [0] * n
        self._lock = threading.Lock()  # request threads note at once; a lost addition would undercount
        self._started = time.monotonic() if now is None else now

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
        """Bytes a second over the last :data:`WINDOW_S` seconds, or since the start when shorter
        (0 for a receiver that got none)."""
        now = time.monotonic() if now is None else now
        b = int(now // BUCKET_S)
        n = len(self._ids)
        with self._lock:
            total = sum(size for at, size in zip(self._ids, self._bytes, strict=True) if b - n < at <= b)
        return total / max(min(WINDOW_S, now - self._started), 1.0)

    def why_not_now(self, pause_s: float, queued: int, max_queued: int, now: float | None = None) -> str | None:
        """Why writes should not pause for ``pause_s`` seconds now, with ``queued`` of the queue's
        ``max_queued`` bytes taken; None when what would come in meanwhile fits."""
        now = time.monotonic() if now is None else now
        if now - self._started < KNOWN_AFTER_S:
            return f"not yet: the load is measured over the first {KNOWN_AFTER_S:.0f} s after start"
        rate = self.rate(now)
        coming = queued + rate * pause_s
        if coming <= QUEUE_SHARE * max_queued:
            return None
        return (f"not now: requests come at {rate / 1e6:.2f} MB/s (last five minutes) and would queue "
                f"~{coming / 2**20:,.0f} MiB in the ~{pause_s:,.0f} s a rewrite takes, over half the queue "
                f"({max_queued / 2**20:,.0f} MiB, TOOLMETER_MAX_QUEUED_BYTES)")  # fmt: skip
