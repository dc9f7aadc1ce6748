"""Measuring on every core: worker processes that turn OTLP request bodies (``serve``) or
decoded spans (``ingest``) into batches.

Counting is C (and releases the GIL), but reading spans, inferring truncation, fingerprinting
and redacting are Python: on threads of one process they share one core. A receiver with a
large batch hands its spooled request bodies to :class:`MeasuringPool` instead: each worker
process decodes its share, measures it with its own :class:`collector.pipeline.Pipeline`
(payload files go to the store's payload folder, which several writers may share) and sends
back the rows. The store is only ever written by the one writer (the receiver's writer thread,
the ingest loop).

Workers are started with ``spawn`` (forking a process that runs an event loop, gRPC and
DuckDB threads is not safe), lazily, at the first batch large enough to be worth the trip.
They ignore Ctrl+C and SIGTERM, which a terminal or a supervisor sends to the whole process
group: the receiver drains its queue through them and then stops them; a worker whose
receiver was killed ends within :data:`PARENT_CHECK_S`. A worker that dies
breaks the pool; the batch is then measured on the receiver's own threads, and so is every
batch after it (the log says so once).
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, Final

from collector.config import CollectorConfig
from collector.decode.request import JSON, PROTOBUF, decode_logs, decode_traces
from collector.dialects.spans import LLM, TOOL, classify
from collector.errors import InputError
from collector.model import Item
from collector.serve import spool as S
from collector.store import columns
from collector.store.batch import Batch

if TYPE_CHECKING:
    from collector.pipeline import Pipeline

logger = logging.getLogger("toolmeter")

MIN_POOL_BYTES: Final = 256 * 1024
"""Batches smaller than this are measured on the receiver's threads: the trip to a worker
(pickling the rows back) would cost more than it saves, and a quiet receiver starts no workers."""

MIN_REQUESTS_PER_PROCESS: Final = 4
"""Fewer requests than this per worker are measured on the receiver's threads (see ``worth_it``)."""
GC_THRESHOLD: Final = (50_000, 20, 100)
"""A worker's collector thresholds (Python's: 700, 10, 10). Measuring a batch allocates
hundreds of thousands of short-lived dicts and tuples and makes almost no cycles; at the
defaults the collector ran every 700 of them and cost ~8 % of a small span's measuring."""
PARENT_CHECK_S: Final = 1.0
"""How often a worker checks that the receiver that started it is still alive."""

Request = tuple[int, bytes]
"""A spooled request: (kind, body)."""


def items_of(kind: int, body: bytes) -> list[Item]:
    """The tool, LLM and log items of one request (raises InputError when it does not decode)."""
    content_type = PROTOBUF if kind in (S.TRACES_PROTOBUF, S.LOGS_PROTOBUF) else JSON
    if kind in (S.TRACES_PROTOBUF, S.TRACES_JSON):
        decoded = decode_traces(body, content_type, "otlp")
        return [Item(k, s) for s in decoded.spans if (k := classify(s.name, s.attributes)) in (TOOL, LLM)]
    decoded_logs = decode_logs(body, content_type, "otlp")
    return [Item("log", log) for log in decoded_logs.logs]  # type: ignore[arg-type]


def decode_requests(requests: Sequence[Request]) -> list[Item]:
    """Items of several requests; one that no longer decodes is logged and skipped."""
    items: list[Item] = []
    for kind, body in requests:
        try:
            items += items_of(kind, body)
        except InputError as e:  # was valid when accepted; only a changed decoder gets here
            logger.error("toolmeter receiver: spooled request no longer decodes: %s", e)
    return items


def deal(requests: Sequence[Request], n: int) -> list[list[Request]]:
    """``requests`` in ``n`` shares of about equal bytes; log requests stay together, in order,
    in the first (one LLM call's input may be many records)."""
    shares: list[list[Request]] = [[] for _ in range(n)]
    sizes = [0] * n
    logs = [r for r in requests if r[0] in (S.LOGS_PROTOBUF, S.LOGS_JSON)]
    if logs:
        shares[0] += logs
        sizes[0] += sum(len(b) for _, b in logs)
    spans = [r for r in requests if r[0] not in (S.LOGS_PROTOBUF, S.LOGS_JSON)]
    for request in sorted(spans, key=lambda r: -len(r[1])):
        least = sizes.index(min(sizes))
        shares[least].append(request)
        sizes[least] += len(request[1])
    return [s for s in shares if s]


# --- the worker processes ----------------------------------------------------------------------

_pipeline: Any = None


def _start_worker(config: CollectorConfig, collector_id: str) -> None:
    # the receiver stops the workers itself, after draining through them
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, name="toolmeter-parent-watch", daemon=True).start()
    from collector.pipeline import Pipeline

    global _pipeline
    _pipeline = Pipeline(config, collector_id=collector_id)
    _warm_up(_pipeline)
    gc.freeze()  # what start-up loaded (modules, the counter) lives as long as the worker: never scanned
    gc.set_threshold(*GC_THRESHOLD)


def _warm_up(pipeline: Pipeline) -> None:
    """Do at start the one-off work the first batch would otherwise wait for: the counter's first
    call, the redaction screen's compile, and pyarrow's first array, at which it imports pandas
    when that is installed (~0.2 s; in two workers starting together, up to ~0.7 s each). Measured
    in one process, a first large request took 0.18 s, and 0.003 s after this. Nothing is measured
    or stored."""
    pipeline.counter.count("warm up")
    pipeline.redactor.find(b"warm up")
    columns.table_of([], columns.TABLES["tool_calls"])


def _exit_with_parent() -> None:
    """End this worker when the process that started it is gone (killed: nobody will shut the
    pool down), which the ignored SIGTERM would otherwise not do.

    It waits on the parent's sentinel, a pipe spawn hands every child: it is readable once the
    parent has died, also when that happened before this thread started (reading the parent's
    pid here instead would find init's, and wait for ever)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        wait([parent.sentinel])
    else:  # not started by multiprocessing: fall back to watching the parent's pid
        first = os.getppid()
        while os.getppid() == first:
            time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _measure(requests: list[Request]) -> tuple[Batch, int]:
    """(rows of ``requests``, spans that could not be measured), in a worker."""
    return _measure_items(decode_requests(requests))


def _measure_items(items: list[Item]) -> tuple[Batch, int]:
    """(rows of ``items``, spans that could not be measured), in a worker."""
    pipeline = _pipeline
    before = pipeline.counters.failed
    batch = pipeline.build_batch(items)
    batch.pack()
    return batch, pipeline.counters.failed - before


def _ready(wait_s: float) -> int:
    time.sleep(wait_s)
    return os.getpid()


class MeasuringPool:
    """Worker processes measuring request bodies into batches, started at first use."""

    def __init__(self, pipeline: Pipeline, processes: int) -> None:
        self.pipeline = pipeline
        """The writer's pipeline: workers measure with its settings and collector id, and the
        spans they could not measure are counted in its counters."""
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.broken = False

    def worth_it(self, requests: Sequence[Request]) -> bool:
        """Whether ``requests`` are better measured here: enough bytes to pay for the trip, and
        enough requests to share out. A few requests of large results are better measured on
        the receiver's threads, which share out their spans and count them in parallel (the
        counter releases the GIL); a request is the smallest share a worker gets."""
        return (
            self.usable
            and len(requests) >= MIN_REQUESTS_PER_PROCESS * self.processes
            and sum(len(b) for _, b in requests) >= MIN_POOL_BYTES
        )

    @property
    def usable(self) -> bool:
        """More than one worker asked for, and none has died."""
        return self.processes > 1 and not self.broken

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.processes,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker,
                    initargs=(self.pipeline.config, self.pipeline.collector_id),
                )
            return self._pool

    def start(self) -> None:
        """Start every worker now, in the background (``serve``): a worker starts in about half a
        second (an interpreter, DuckDB, the counter), which the first large batch would wait for.
        The executor starts one per task while none is idle, so each gets a task that waits."""
        if self.processes <= 1:
            return

        def warm() -> None:
            try:
                list(self._executor().map(_ready, [0.5] * self.processes))
            except (BrokenProcessPool, OSError, RuntimeError) as e:  # RuntimeError: closed meanwhile
                logger.warning("toolmeter receiver: the measuring processes did not start (%s)", e)

        threading.Thread(target=warm, name="toolmeter-measuring-start", daemon=True).start()

    def measure(self, requests: Sequence[Request]) -> list[Batch] | None:
        """A batch per share of ``requests``, or None when the pool broke (a worker died): the
        caller measures them itself."""
        return self.submit(requests)()

    def submit(self, requests: Sequence[Request]) -> Callable[[], list[Batch] | None]:
        """Start measuring ``requests``; the returned call waits for what :meth:`measure` returns.
        The receiver writes one slice of its batch while the workers measure the next."""
        return self._start(_measure, deal(requests, self.processes * 2))

    def submit_items(self, chunks: Sequence[list[Item]]) -> Callable[[], list[Batch] | None]:
        """Start measuring chunks of already decoded items (``toolmeter ingest``); the returned
        call waits for a batch per chunk, or None when the pool broke."""
        return self._start(_measure_items, chunks)

    def _start(self, measure: Any, shares: Sequence[Any]) -> Callable[[], list[Batch] | None]:
        try:
            started = [self._executor().submit(measure, share) for share in shares]
        except (BrokenProcessPool, OSError, RuntimeError) as e:  # RuntimeError: shut down meanwhile
            self._broke(e)
            return lambda: None

        def result() -> list[Batch] | None:
            try:
                parts = [future.result() for future in started]
            except (BrokenProcessPool, OSError) as e:
                self._broke(e)
                return None
            with self.pipeline.lock:
                self.pipeline.counters.failed += sum(failed for _, failed in parts)
            return [batch for batch, _ in parts]

        return result

    def _broke(self, e: BaseException) -> None:
        if not self.broken:
            logger.warning(
                "toolmeter: a measuring process failed (%s); measuring on this process's threads from now on",
                e or type(e).__name__,
            )
        self.broken = True
        self.close()

    def __enter__(self) -> MeasuringPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
