"""``toolmeter serve``: an OTLP receiver (HTTP and gRPC) for agents in any language.

Request path (kept short so exporters never wait on token counting):

1. check the bearer token (401), content type and encoding (415), size (413);
2. decode the body with the official protobuf messages or the OTLP/JSON rules (400 when
   it cannot be decoded; spans with bad ids are rejected and reported as partial success);
3. refuse with 503 / ``UNAVAILABLE`` and a retry hint when the queue is full;
4. append the body to the spool and fsync it, a sync shared with the requests that arrived
   meanwhile (:mod:`collector.serve.spool`): only now is the request **safe**, and only now is
   it acknowledged (200 / ``OK``).

Measuring runs on a background thread that batches spooled requests, measures a large batch
in worker processes (:mod:`collector.measuring`: every core) and a small one on a thread
pool, and writes one DuckDB transaction per batch together with the spool position it reached. This process is
the one owner of the DuckDB file; the dashboard reads between flushes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from aiohttp import web

from collector import config as config_module
from collector.config import DEFAULT_MAX_BODY_BYTES, CollectorConfig
from collector.errors import RejectedRows, StoreError
from collector.measuring import MeasuringPool, decode_requests
from collector.pipeline import Pipeline, interleaved
from collector.serve import spool as S
from collector.serve.exports import QueueFull
from collector.serve.grpc_api import make_grpc_server
from collector.serve.http_api import make_app
from collector.serve.inflow import Inflow
from collector.store.compaction import NoRoom, compact_file, survey
from collector.store.database import Batch, read_progress
from collector.store.lake import LakeSpec, is_lake, redact
from collector.worker import BatchWorker

logger = logging.getLogger("toolmeter")

CLOSE_TIMEOUT_S = 120.0

Record = tuple[int, int, int, bytes]
"""A spooled request: (segment, end offset, kind, body)."""

SLICE_BYTES = 16 * 1024 * 1024
"""A batch is written in slices of at least about this many request bytes (some 14,000 small
spans) when it has them: large enough that a write's fixed cost (opening the file, the
checkpoint at its close, which rewrites the rows that went through the log) is spread, small
enough that the workers measure the next slice meanwhile. The writer waits for this much
(at most the flush interval, and not once requests stop coming): on a 2-core machine a write
of 14,000 small spans cost ~29-35 us a span, of 7,000 ~34-38 and of 3,000 ~68-79
(``benchmarks/bench_flush.py --batch N``; BENCHMARKS.md)."""
MEASURE_AHEAD = 2
"""Slices of a batch being measured while one is written. With one, a worker that finished its
share of the next slice waited for the write to end: a slice's shares take unequal times
(results from 10 KB to megabytes), and the measuring processes idled about a fifth of the time."""
REWRITE_BYTES_PER_S = 18e6
"""What a rewrite of the file is taken to take, by its size: half what was measured while
measuring processes were idle (a file of 10 million calls, 1,121 MB in 31 s; BENCHMARKS.md)."""


def slice_records(records: list[Record], size: int) -> list[list[Record]]:
    """``records`` in order, cut into runs of at least about ``size`` bytes of bodies (fewer than
    twice that), of about equal bytes (at least one record each): a remainder of a few requests
    would cost a write of its own dearer a span than a full slice's."""
    total = sum(len(r[3]) for r in records)
    target = total / max(1, total // size)
    slices: list[list[Record]] = []
    current: list[Record] = []
    held = 0
    for record in records:
        current.append(record)
        held += len(record[3])
        if held >= target:
            slices.append(current)
            current, held = [], 0
    if current:
        slices.append(current)
    return slices


def _warm_up_writes() -> None:
    """Import now what the first write would wait for: DuckDB imports ``pyarrow.dataset`` (and
    with it Parquet, Acero and the file systems) the first time it reads an Arrow table, which
    added ~15 ms to the first write of 100 spans (one-off timing)."""
    import pyarrow.dataset  # noqa: F401


@dataclass(frozen=True)
class ReceiverConfig:
    """Receiver settings (the store's settings are a :class:`CollectorConfig`)."""

    host: str = "127.0.0.1"
    port: int = 4318
    grpc_port: int | None = 4317
    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_queued_bytes: int | None = None
    """Request bytes spooled and not yet written to DuckDB, at most; None: the collector
    config's ``max_queued_bytes`` (``TOOLMETER_MAX_QUEUED_BYTES``, 256 MiB by default)."""
    spool_dir: str | None = None
    workers: int = 2
    """Threads measuring a batch in this process (small batches, or when no process can start)."""
    measure_processes: int = field(default_factory=config_module.measure_processes)
    """Worker processes measuring large batches (:mod:`collector.measuring`); 1: none."""


class Receiver:
    """Accepts OTLP requests, spools them, and measures them in the background."""

    def __init__(self, config: CollectorConfig, rc: ReceiverConfig) -> None:
        self.config = config
        self.rc = rc
        self.max_queued_bytes = config.max_queued_bytes if rc.max_queued_bytes is None else rc.max_queued_bytes
        self.pipeline = Pipeline(config, collector_id=f"receiver-{os.getpid()}")
        db = os.fspath(config.db)
        if is_lake(db):
            # the spool is this host's own (never on the shared lake), and receivers on
            # different hosts may use the same folder name: the host name tells them apart
            spool_dir = rc.spool_dir or os.path.join(LakeSpec.parse(db).state_dir, "spool")
            self.receiver_id = f"{socket.gethostname()}:{os.path.abspath(spool_dir)}"
        else:
            spool_dir = rc.spool_dir or db + ".spool"
            self.receiver_id = os.path.abspath(spool_dir)
        self.spool = S.Spool(spool_dir)
        self._abandoned = False
        self._inflow = Inflow()
        self._prefetched: tuple[list[Record], Callable[[], Batch]] | None = None
        self._stored = (-1, -1)
        """The spool position of the last slice written (a retried batch skips up to it)."""
        self._pool = futures.ThreadPoolExecutor(max_workers=rc.workers, thread_name_prefix="toolmeter-measure")
        self._processes = MeasuringPool(self.pipeline, rc.measure_processes)
        try:
            self.pipeline.store.ensure_schema()
            progress = read_progress(self.config.db, self.receiver_id)
        except StoreError as e:
            if not is_lake(db):
                raise
            # a receiver (re)started while the catalog is away still accepts: what it acknowledges
            # is on its own disk, and the whole spool is replayed once the lake answers (rows and
            # batches already committed are skipped there, so nothing is written twice)
            logger.warning("toolmeter receiver: the lake cannot be reached (%s); accepting and spooling, "
                           "writing once it is back", e)  # fmt: skip
            progress = (0, 0)
        self._worker: BatchWorker[Record] = BatchWorker(
            "toolmeter-receiver-writer",
            self._export,
            give_up=self._give_up,
            max_items=sys.maxsize,  # bounded by bytes: a request's size is what costs memory
            max_bytes=self.max_queued_bytes,
            batch_items=4096,
            batch_bytes=4 * SLICE_BYTES,
            interval=config.flush_interval,
            what="request",
            label="toolmeter receiver",
            drop_verb="refused (503)",
            full_message="toolmeter receiver queue is full; answering 503 with Retry-After until it drains",
            fill_bytes=SLICE_BYTES,
        )
        # the store's retries (a lake commit, a held file) end when shutdown is asked for: the
        # requests stay in the spool, so giving up a write there loses nothing
        self.pipeline.store.stop = self._worker.stopping
        self._recover(progress)

    def start_background_work(self) -> None:
        """Start the measuring processes now, not at the first large batch, write the spool's spares
        and import what the first write needs, all in the background (a long-running ``serve``)."""
        self._processes.start()
        threading.Thread(target=self.spool.prepare_spares, name="toolmeter-spool-spares", daemon=True).start()
        threading.Thread(target=_warm_up_writes, name="toolmeter-writer-warm-up", daemon=True).start()

    # --- acceptance (request threads) ---------------------------------------------------

    def _recover(self, progress: tuple[int, int]) -> None:
        segment, offset = progress
        replayed = 0
        for record in self.spool.replay(segment, offset):
            self._worker.put(record, len(record[3]))
            replayed += 1
        if replayed:
            logger.warning(
                "toolmeter receiver: replaying %d spooled request(s) not yet in %s", replayed, redact(self.config.db)
            )

    def accept(self, kind: int, body: bytes) -> None:
        """Spool ``body`` (fsync) and queue it for measuring.

        Raises:
            QueueFull: answer 503 / UNAVAILABLE.
            StoreError: the spool could not be written; answer 503 too.
        """
        if not self._worker.has_room(len(body)):
            with self.pipeline.lock:
                self.pipeline.counters.refused = self._worker.dropped
            raise QueueFull()
        # queued by the spool once synced, in its order (see Spool.append): requests share syncs
        # and end them in any order, but a slice's progress is its last record's position
        self.spool.append(kind, body, lambda end: self._worker.put((*end, kind, body), len(body)))
        self._inflow.note(len(body))

    @property
    def refused(self) -> int:
        """Requests answered 503 because the queue was full."""
        return self._worker.dropped

    @property
    def abandoned(self) -> bool:
        """A batch was given up at shutdown: nothing more is written until the next start."""
        return self._abandoned

    @property
    def queued(self) -> int:
        """Requests accepted and not written yet."""
        return self._worker.queued

    @property
    def paused(self) -> bool:
        """While True nothing is written (:meth:`rewrite_when_light` sets it; tests, to fill the queue)."""
        return self._worker.paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._worker.paused = value

    def rewrite_when_light(self) -> str | None:
        """Rewrite the store's file when worth it (:func:`survey`: freed space, calls in
        small row groups) and the requests coming in meanwhile fit in half the queue, once a minute
        of the load has been seen (:meth:`Inflow.why_not_now`); returns what was done or why not
        (for the log), None when the file needs nothing. Requests that come meanwhile are spooled
        and answered as ever, and written after it; readers read the old file until the new one
        takes its name."""
        if is_lake(self.config.db):
            return None
        db, wait_s = os.fspath(self.config.db), self.pipeline.store.lock_wait_s
        paused, self.paused = self.paused, True  # a batch being written ends; the check waits for it
        try:
            looked = survey(db, wait_s=wait_s)
            why = looked.reason
            if why is None:
                return None
            took = os.path.getsize(db) / REWRITE_BYTES_PER_S
            wait = self._inflow.why_not_now(took, self._worker.queued_bytes, self.max_queued_bytes)
            if wait:
                return (f"the file is worth rewriting ({why}), {wait}; tried again at the next retention run, "
                        "or stop the receiver and run `toolmeter prune`")  # fmt: skip
            start = time.monotonic()
            try:
                compact_file(db, wait_s=wait_s, surveyed=looked)
            except NoRoom as e:
                return str(e)
            return f"rewrote the file in {time.monotonic() - start:,.1f} s: {why}"
        finally:
            self.paused = paused

    # --- measuring (the worker thread) ------------------------------------------------------

    def _export(self, records: list[Record]) -> None:
        if self._abandoned:
            # a batch before this one was given up at shutdown: writing this one would move the
            # stored spool position past it, and the next start would not replay it
            raise StoreError("an earlier batch is still to be written; this one stays in the spool too")
        # a batch tried again after a failed write: its slices already stored are not written twice
        records = [r for r in records if (r[0], r[1]) > self._stored]
        # one slice is written while the measuring processes measure the next ones (the first
        # slice of the next batch, while the last of this one is written): the writer and the
        # workers work at the same time instead of in turn
        slices, first = self._take_prefetched(records)
        measuring = collections.deque([first])
        with self.pipeline.store.holding():  # one open and closing checkpoint for the slices
            for i, part in enumerate(slices):
                batch = measuring.popleft()()
                for ahead in slices[i + 1 + len(measuring) : i + 1 + MEASURE_AHEAD]:
                    measuring.append(self._start_measuring(ahead))
                if not measuring:
                    self._prefetch()
                last = part[-1]
                batch.progress = (self.receiver_id, last[0], last[1])
                try:
                    self.pipeline.write(batch, queued=self._worker.queued)
                except RejectedRows as e:
                    self._write_each(part, e)
                self._stored = (last[0], last[1])
                self.spool.release(last[0])

    def _write_each(self, records: list[Record], error: RejectedRows) -> None:
        """The store refused a slice's rows: write its requests one at a time, and set aside
        (keep the body, count and say it) each one it refuses again, so one bad request does
        not stop every later one behind it."""
        logger.error("toolmeter receiver: the store refused a slice of %d request(s) (%s); writing them one at a time",
                     len(records), error)  # fmt: skip

        def measure(record: Record) -> Batch:
            one = self._measure_here([(record[2], record[3])])
            one.progress = (self.receiver_id, record[0], record[1])
            return one

        self.pipeline.write_each(records, measure, lambda r: f"request {r[0]}:{r[1]} of the spool",
                                 lambda r: self.spool.set_aside(*r), self._worker.queued)  # fmt: skip

    def _take_prefetched(self, records: list[Record]) -> tuple[list[list[Record]], Callable[[], Batch]]:
        """The slices of ``records`` and the measuring of the first, started already when the
        previous batch prefetched it (its records are where this batch begins)."""
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            ahead, measuring = prefetched
            if [r[:2] for r in records[: len(ahead)]] == [r[:2] for r in ahead]:
                return [ahead, *slice_records(records[len(ahead) :], SLICE_BYTES)], measuring
        slices = slice_records(records, SLICE_BYTES)
        return slices, (self._start_measuring(slices[0]) if slices else Batch)

    def _prefetch(self) -> None:
        """Start measuring the first slice still queued, if the measuring processes take it."""
        ahead = self._worker.peek(SLICE_BYTES)
        requests = [(kind, body) for _, _, kind, body in ahead]
        # a full slice only: a part of one would be written on its own, at a part's cost a span
        if sum(len(body) for _, body in requests) >= SLICE_BYTES and self._processes.worth_it(requests):
            self._prefetched = (ahead, self._start_measuring(ahead))

    def _give_up(self, records: list[Record], reason: BaseException) -> None:
        self._abandoned = True
        logger.warning("toolmeter receiver: %d request(s) stay in the spool %s and are written at the next start",
                       len(records), self.spool.folder)  # fmt: skip

    def _start_measuring(self, records: list[Record]) -> Callable[[], Batch]:
        """Start measuring ``records`` in the measuring processes when worth it; the returned
        call gives the batch (measured on this process's threads when not, or when they broke)."""
        requests = [(kind, body) for _, _, kind, body in records]
        if not self._processes.worth_it(requests):
            return lambda: self._measure_here(requests)
        pending = self._processes.submit(requests)

        def measured() -> Batch:
            parts = pending()
            if parts is None:
                return self._measure_here(requests)
            batch = Batch()
            for part in parts:
                batch.extend(part)
            return batch

        return measured

    def _measure_here(self, requests: list[tuple[int, bytes]]) -> Batch:
        items = decode_requests(requests)
        # interleaved chunks, at least two per worker: a few megabyte results must not all
        # land on one thread while the other idles
        chunks = interleaved(items, max(self.rc.workers * 2, -(-len(items) // 128)))
        batch = Batch()
        for part in self._pool.map(self.pipeline.build_batch, chunks):
            batch.extend(part)
        return batch

    def flush(self, timeout_s: float = 60) -> bool:
        """Wait until everything accepted so far is in DuckDB."""
        return self._worker.flush(timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Write what is queued, then stop; False when some requests stay in the spool for the next start."""
        done = self._worker.shutdown(timeout_s)
        if not done:
            logger.error("toolmeter receiver: %d request(s) stay in the spool %s and are written at the next start",
                         self._worker.queued, self.spool.folder)  # fmt: skip
        self._pool.shutdown(wait=True)
        self._processes.close()
        self.spool.close()
        return done


# --- running it ---------------------------------------------------------------------------------


class RunningReceiver:
    """A receiver serving HTTP (and gRPC) in a background thread; for tests and embedding."""

    def __init__(self, config: CollectorConfig, rc: ReceiverConfig) -> None:
        self.receiver = Receiver(config, rc)
        self._loop = asyncio.new_event_loop()
        # our own bounded gunzip (a clear 413 for gzip bombs), not aiohttp's
        self._runner = web.AppRunner(make_app(self.receiver), access_log=None, auto_decompress=False)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, rc.host, rc.port)
        self._loop.run_until_complete(site.start())
        sockets = site._server.sockets if site._server else []  # type: ignore[union-attr,attr-defined]
        self.port = int(sockets[0].getsockname()[1]) if sockets else rc.port
        self._thread = threading.Thread(target=self._loop.run_forever, name="toolmeter-http", daemon=True)
        self._thread.start()
        self.grpc_server: grpc.Server | None = None
        self.grpc_port: int | None = None
        if rc.grpc_port is not None:
            self.grpc_server, self.grpc_port = make_grpc_server(self.receiver, rc.host, rc.grpc_port)

    @property
    def url(self) -> str:
        return f"http://{self.receiver.rc.host}:{self.port}"

    def stop(self) -> None:
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=5).wait()
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self.receiver.close()
