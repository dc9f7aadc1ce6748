"""The batching worker: a bounded queue drained by one background thread, in batches.

Used by the span processor (inside the observed agent) and by the receiver (``toolmeter
serve``), shaped like the OpenTelemetry SDK's ``BatchSpanProcessor``:

- bounded by count and by bytes: :meth:`BatchWorker.offer` answers False when full and the
  caller counts the drop (or answers 503); one item larger than the byte bound goes through
  when nothing else is held, so a single large result is never refused forever;
- batches bounded by count and bytes, exported by one named daemon thread;
- a failed export is retried with a backoff (0.5 s doubling to 30 s) that :meth:`shutdown`
  cuts short; the first failure of a run is logged with its traceback, the next ones in one
  line each, and the recovery once;
- the worker thread runs with the SDK's suppression key attached, so nothing instrumented
  that it calls (urllib in forwarding mode, DuckDB's httpfs) traces toolmeter's own work;
- :meth:`shutdown` drains within a timeout and says what it could not write.

Drop and failure counts live here, where they happen; owners read them as properties.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from opentelemetry import context as otel_context

logger = logging.getLogger("toolmeter")

T = TypeVar("T")

SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY
"""The SDK's own key (instrumentations check this one): a key made with ``create_key`` is a new,
random key that no instrumentation reads, and toolmeter's own sends would be traced."""

FIRST_RETRY_S = 0.5
MAX_RETRY_S = 30.0


class BatchWorker(Generic[T]):
    """A bounded queue of ``T`` exported in batches by one daemon thread.

    Args:
        name: the thread's name (shows in ``py-spy`` and thread dumps).
        export: called on the worker thread with each batch. Raising an exception of
            ``retry_on`` keeps the batch and retries it; any other exception gives it up.
        give_up: called with a batch and the reason when it is given up (a non-retryable
            error, or a retryable one still failing at shutdown).
        max_items, max_bytes: the queue's bounds; bytes count items queued *and* being
            exported, so the batch in hand and the queue behind it hold at most ``max_bytes``.
        batch_items, batch_bytes: one batch's bounds (a batch holds at least one item).
        interval: seconds between exports when batches do not fill.
        what: how log lines name the items (``"span"``, ``"request"``).
        full_message: logged at warning when the queue first fills in an episode.
        label: how log lines name the owner (``"toolmeter receiver"``).
        drop_verb: what happens to an item refused (``"dropped"``; a receiver ``"refused"``, 503).
        fill_bytes, linger_s: with ``fill_bytes``, items :meth:`put` are not exported at once: the
            thread waits until this many bytes are queued, the items stop coming for ``linger_s``,
            or the oldest has waited ``interval`` (a receiver: a write costs about half as much a
            row at a full slice as at a third of one, see :data:`collector.serve.receiver.SLICE_BYTES`).
    """

    def __init__(
        self,
        name: str,
        export: Callable[[list[T]], None],
        *,
        give_up: Callable[[list[T], BaseException], None],
        max_items: int,
        max_bytes: int,
        batch_items: int,
        batch_bytes: int | None = None,
        interval: float,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        what: str = "item",
        full_message: str = "toolmeter queue is full; dropping and counting",
        drop_verb: str = "dropped",
        label: str = "toolmeter",
        fill_bytes: int | None = None,
        linger_s: float = 0.05,
    ) -> None:
        self.name = name
        self._export = export
        self._give_up = give_up
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.batch_items = batch_items
        self.batch_bytes = batch_bytes
        self.interval = interval
        self.retry_on = retry_on
        self.what = what
        self.full_message = full_message
        self.drop_verb = drop_verb
        self.label = label
        self.fill_bytes = fill_bytes
        self.linger_s = linger_s
        self._last_put = 0.0
        self._first_put = 0.0
        """When the last item was put, and the first of those queued since the queue was empty."""
        self._exporting = 0
        """Bytes of the batch being exported (``_held_bytes`` counts them too)."""
        self._flushes = 0
        """Callers waiting in :meth:`flush`: no gathering while there are any."""
        self.paused = False
        """While True the thread exports nothing (until shutdown): the batch under way ends, items
        queue up. A receiver pauses it to rewrite its file; tests, to fill the queue."""
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Event()
        self.stopping = threading.Event()
        """Set by :meth:`shutdown`: a retry's wait ends at once. Owners pass it to slow calls."""
        # items and their sizes side by side, not as (item, size) pairs: a pair is one more object
        # for the garbage collector to visit for as long as its item waits, and in the agent's
        # process the collector's passes over queued spans can cost more than on_end itself
        self._queue: collections.deque[T] = collections.deque()
        self._sizes: collections.deque[int] = collections.deque()
        self._held_bytes = 0
        self._accepted = 0
        self._done = 0
        self.offered = 0
        self.dropped = 0
        self.given_up = 0
        self._drops_reported = 0
        self._full_warned = False
        self._failures = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # --- producers (any thread; on the agent's thread for the processor) ---------------------

    def offer(self, item: T, size: int) -> bool:
        """Queue ``item`` (``size`` payload bytes) unless full; O(1), never blocks on I/O."""
        with self._lock:
            self.offered += 1
            queue = self._queue
            queued = len(queue)
            held = self._held_bytes
            if queued >= self.max_items or (held and held + size > self.max_bytes):
                self.dropped += 1
                if not self._full_warned:
                    self._full_warned = True
                    logger.warning("%s (%d %ss queued, %d bytes held)", self.full_message, queued,
                                   self.what, held)  # fmt: skip
                return False
            queue.append(item)
            self._sizes.append(size)
            self._held_bytes = held + size
            self._accepted += 1
        # a set Event is not set again: set() takes a lock, and the agent's thread runs this
        if queued + 1 >= self.batch_items and not self._wake.is_set():
            self._wake.set()
        return True

    def has_room(self, size: int) -> bool:
        """Whether :meth:`offer` of ``size`` bytes would be accepted now (counts a refusal if not)."""
        with self._lock:
            held = self._held_bytes
            if len(self._queue) < self.max_items and not (held and held + size > self.max_bytes):
                return True
            self.offered += 1
            self.dropped += 1
            return False

    def put(self, item: T, size: int) -> None:
        """Queue ``item`` whatever the bounds (a receiver: every request it spooled)."""
        now = time.monotonic()
        with self._lock:
            if not self._queue:
                self._first_put = now
            self._queue.append(item)
            self._sizes.append(size)
            self._held_bytes += size
            self._accepted += 1
            self._last_put = now
            full = self.fill_bytes is None or self._queued_bytes() >= self.fill_bytes
        if full:
            self._wake.set()

    def peek(self, max_bytes: int) -> list[T]:
        """The items next in line, up to about ``max_bytes`` (at least one when any) and no more
        than the next batch takes, left queued: the exporting thread starts work on its next batch
        before this one is written (more would not match the batch, and be done again)."""
        items: list[T] = []
        held = 0
        with self._lock:
            for item, size in zip(self._queue, self._sizes, strict=True):
                if held >= max_bytes or len(items) == self.batch_items:
                    break
                items.append(item)
                held += size
        return items

    @property
    def queued(self) -> int:
        """Items waiting (not counting the batch being exported)."""
        return len(self._queue)

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting (not counting the batch being exported)."""
        with self._lock:
            return self._queued_bytes()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        otel_context.attach(otel_context.set_value(SUPPRESS_KEY, True))
        tick = self.interval if self.fill_bytes is None else min(self.interval, self.linger_s)
        while True:
            woke = self._wake.wait(tick)
            self._wake.clear()
            if not woke and self._gathering():
                continue
            self._drain()
            if self.stopping.is_set():
                with self._lock:
                    if not self._queue:
                        return

    def _next_batch(self) -> tuple[list[T], int]:
        """Pop one batch and its bytes (holding ``_lock``)."""
        queue, sizes = self._queue, self._sizes
        limit = self.batch_bytes
        if limit is None:
            # by count alone: popped in C. In the span processor this runs on the agent's
            # interpreter, where a Python loop per span is GIL time taken from the agent
            if len(queue) <= self.batch_items:
                items = list(queue)
                size = sum(sizes)
                queue.clear()
                sizes.clear()
                return items, size
            n = self.batch_items
            return [queue.popleft() for _ in range(n)], sum([sizes.popleft() for _ in range(n)])
        items = []
        size = 0
        while queue and len(items) < self.batch_items and (not items or size < limit):
            items.append(queue.popleft())
            size += sizes.popleft()
        return items, size

    def _queued_bytes(self) -> int:
        """Bytes queued, not counting the batch being exported (holding ``_lock``)."""
        return self._held_bytes - self._exporting

    def _gathering(self) -> bool:
        """Whether to let queued items wait for more (see ``fill_bytes``) rather than export them now."""
        if self.fill_bytes is None or self._flushes or self.stopping.is_set():
            return False
        now = time.monotonic()
        with self._lock:
            return (
                bool(self._queue)
                and self._queued_bytes() < self.fill_bytes
                and now - self._last_put < self.linger_s
                and now - self._first_put < self.interval
            )

    def _drain(self) -> None:
        while not self.paused or self.stopping.is_set():
            with self._lock:
                if not self._queue:
                    self._report_drops()
                    return
                batch, size = self._next_batch()
                self._exporting = size
            self._export_with_retry(batch)
            n = len(batch)
            del batch
            with self._lock:
                self._exporting = 0
                self._held_bytes -= size
                self._done += n
                self._idle.notify_all()
            if self._gathering():
                return  # the thread comes back when the queue fills or the items stop coming

    def _export_with_retry(self, batch: list[T]) -> None:
        """Export ``batch``, retrying while it fails with ``retry_on``, until it is written or given up.

        At shutdown a failing batch gets one more try, then it is given up: the owner's
        ``give_up`` says what that means (counted as failed; or kept in the receiver's spool).
        """
        delay = FIRST_RETRY_S
        while True:
            try:
                self._export(batch)
            except self.retry_on as e:
                self._failures += 1
                if self.stopping.is_set() and self._failures > 1:
                    self._abandon(batch, e)
                    return
                if self._failures == 1:
                    logger.warning("%s could not write %d %s(s); retrying in %.1f s",
                                   self.label, len(batch), self.what, delay, exc_info=True)  # fmt: skip
                else:
                    logger.warning("%s still cannot write (%d tries): %s; retrying in %.1f s",
                                   self.label, self._failures, e, delay)  # fmt: skip
                if self.stopping.wait(delay) and self._failures > 1:
                    self._abandon(batch, e)
                    return
                delay = min(delay * 2, MAX_RETRY_S)
                continue
            except Exception as e:
                logger.exception("%s gave up a batch of %d %s(s)", self.label, len(batch), self.what)
                self._abandon(batch, e, logged=True)
                return
            if self._failures:
                logger.warning("%s writes again after %d failed tries", self.label, self._failures)
                self._failures = 0
            return

    def _abandon(self, batch: list[T], reason: BaseException, logged: bool = False) -> None:
        self.given_up += len(batch)
        if not logged:
            logger.error("%s gave up %d %s(s) at shutdown: %s", self.label, len(batch), self.what, reason)
        try:
            self._give_up(batch, reason)
        except Exception:
            logger.exception("toolmeter: recording a given-up batch failed")

    def _report_drops(self) -> None:
        """Once the queue has emptied after drops, say how many (holding ``_lock``), and warn
        again on the next episode: not once per process lifetime."""
        if self.dropped > self._drops_reported:
            logger.warning("%s %s %d %s(s) while its queue was full (%d in all); the queue has room again",
                           self.label, self.drop_verb, self.dropped - self._drops_reported, self.what, self.dropped)  # fmt: skip
            self._drops_reported = self.dropped
        self._full_warned = False

    # --- flush and shutdown ---------------------------------------------------------------------

    def flush(self, timeout_s: float) -> bool:
        """Wait until everything accepted so far is exported (or given up); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._accepted
            self._flushes += 1
        self._wake.set()
        try:
            with self._lock:
                while self._done < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not self._thread.is_alive():
                        return False
                    self._idle.wait(min(remaining, 0.1))
            return True
        finally:
            with self._lock:
                self._flushes -= 1

    def shutdown(self, timeout_s: float) -> bool:
        """Export what is queued and stop the thread; False (and an error logged) when it could not
        finish within ``timeout_s``. Idempotent; a no-op from the worker's own thread."""
        self.stopping.set()
        self._wake.set()
        if threading.current_thread() is self._thread or not self._thread.is_alive():
            return not self._queue
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            logger.error("%s did not finish writing within %.0f s; %d %s(s) not written",
                         self.label, timeout_s, len(self._queue), self.what)  # fmt: skip
            return False
        return True
