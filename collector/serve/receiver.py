"""``toolmeter serve``: an OTLP receiver (HTTP and gRPC) for agents in any language.

Request path (kept short so exporters never wait on token counting):

1. check the bearer token (401), content type and encoding (415), size (413);
2. decode the body with the official protobuf messages or the OTLP/JSON rules (400 when
   it cannot be decoded; spans with bad ids are rejected and reported as partial success);
3. refuse with 503 / ``UNAVAILABLE`` and a retry hint when the queue is full;
4. append the body to the spool and fsync it (:mod:`collector.serve.spool`): only now is the
   request **safe**, and only now is it acknowledged (200 / ``OK``).

Measuring runs on a background thread that batches spooled requests, measures them on a
thread pool (tiktoken releases the GIL, so counting uses both cores), and writes one
DuckDB transaction per batch together with the spool position it reached. This process is
the one owner of the DuckDB file; the dashboard reads between flushes.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import hmac
import logging
import os
import socket
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from collector.config import CollectorConfig
from collector.decode.request import JSON, PROTOBUF, Decoded, decode_logs, decode_traces
from collector.dialects.spans import LLM, TOOL, classify
from collector.errors import InputError, StoreError
from collector.model import Item
from collector.pipeline import Pipeline, interleaved
from collector.serve import spool as S
from collector.store.database import Batch, read_progress
from collector.store.lake import LakeSpec, is_lake

logger = logging.getLogger("toolmeter")

TOKEN_ENV = "TOOLMETER_RECEIVER_TOKEN"
"""Bearer token every request must carry (``Authorization: Bearer <token>``); unset: none."""

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_BODY_ENV = "TOOLMETER_MAX_BODY_BYTES"
RETRY_AFTER_S = 2


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


class QueueFull(Exception):
    """The measuring queue is full: the client should retry later."""


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
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[int, int, int, bytes]] = collections.deque()
        self._queued_bytes = 0
        self._accepted = 0
        self._done = 0
        self._stopping = False
        self._stop_event = threading.Event()
        self._failures = 0
        self.refused = 0  # requests answered 503
        self.paused = False  # when True the writer waits (tests use it to fill the queue)
        self._pool = futures.ThreadPoolExecutor(max_workers=rc.workers, thread_name_prefix="toolmeter-measure")
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
        self._recover(progress)
        self._worker = threading.Thread(target=self._run, name="toolmeter-receiver-writer", daemon=True)
        self._worker.start()

    # --- acceptance (request threads) ---------------------------------------------------

    def _recover(self, progress: tuple[int, int]) -> None:
        segment, offset = progress
        replayed = 0
        for record in self.spool.replay(segment, offset):
            self._queue.append(record)
            self._queued_bytes += len(record[3])
            self._accepted += 1
            replayed += 1
        if replayed:
            logger.warning(
                "toolmeter receiver: replaying %d spooled request(s) not yet in %s", replayed, self.config.db
            )

    def accept(self, kind: int, body: bytes) -> None:
        """Spool ``body`` (fsync) and queue it for measuring.

        Raises:
            QueueFull: answer 503 / UNAVAILABLE.
            StoreError: the spool could not be written; answer 503 too.
        """
        with self._lock:
            if self._queue and self._queued_bytes + len(body) > self.max_queued_bytes:
                self.refused += 1
                with self.pipeline.lock:
                    self.pipeline.counters.refused = self.refused
                raise QueueFull()
        segment, end = self.spool.append(kind, body)
        with self._lock:
            self._queue.append((segment, end, kind, body))
            self._queued_bytes += len(body)
            self._accepted += 1
        self._wake.set()

    # --- measuring (background) -----------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.config.flush_interval)
            self._wake.clear()
            self._drain()
            if self._stopping:
                with self._lock:
                    if not self._queue:
                        return

    def _drain(self) -> None:
        while not self.paused or self._stopping:
            with self._lock:
                if not self._queue:
                    return
                records: list[tuple[int, int, int, bytes]] = []
                size = 0
                while self._queue and (not records or size < 16 * 1024 * 1024) and len(records) < 512:
                    record = self._queue.popleft()
                    records.append(record)
                    size += len(record[3])
            try:
                self._write(records)
            except Exception as e:
                # keep the records: they are spooled, and retrying is safe (idempotent rows). The
                # first failure in a row is logged with its traceback, the next ones in a line each,
                # with a backoff up to 30 s that stopping cuts short
                self._failures += 1
                delay = min(2 ** (self._failures - 1), 30)
                if self._failures == 1:
                    logger.exception("toolmeter receiver could not write %d request(s); retrying", len(records))
                else:
                    logger.warning("toolmeter receiver still cannot write (%d tries): %s; retrying in %d s",
                                   self._failures, e, delay)  # fmt: skip
                with self._lock:
                    self._queue.extendleft(reversed(records))
                self._stop_event.wait(delay)
                if self._stopping:
                    return
                continue
            if self._failures:
                logger.warning("toolmeter receiver writes again after %d failed tries", self._failures)
                self._failures = 0
            with self._lock:
                self._queued_bytes -= size
                self._done += len(records)
                self._idle.notify_all()
            self.spool.release(records[-1][0])

    def _items(self, kind: int, body: bytes) -> list[Item]:
        content_type = PROTOBUF if kind in (S.TRACES_PROTOBUF, S.LOGS_PROTOBUF) else JSON
        if kind in (S.TRACES_PROTOBUF, S.TRACES_JSON):
            decoded = decode_traces(body, content_type, "otlp")
            return [Item(k, s) for s in decoded.spans if (k := classify(s.name, s.attributes)) in (TOOL, LLM)]
        decoded = decode_logs(body, content_type, "otlp")
        return [Item("log", log) for log in decoded.logs]  # type: ignore[arg-type]

    def _write(self, records: list[tuple[int, int, int, bytes]]) -> None:
        items: list[Item] = []
        for _, _, kind, body in records:
            try:
                items += self._items(kind, body)
            except InputError as e:  # was valid when accepted; only a changed decoder gets here
                logger.error("toolmeter receiver: spooled request no longer decodes: %s", e)
        # interleaved chunks, at least two per worker: a few megabyte results must not all
        # land on one thread while the other idles
        chunks = interleaved(items, max(self.rc.workers * 2, -(-len(items) // 128)))
        batch = Batch()
        for part in self._pool.map(self.pipeline.build_batch, chunks):
            batch.extend(part)
        last = records[-1]
        batch.progress = (self.receiver_id, last[0], last[1])
        with self._lock:
            queued = len(self._queue)
        self.pipeline.write(batch, queued=queued)

    def flush(self, timeout_s: float = 60) -> bool:
        """Wait until everything accepted so far is in DuckDB."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            target = self._accepted
        self._wake.set()
        with self._lock:
            while self._done < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._stopping = True
        self._stop_event.set()
        self._wake.set()
        self._worker.join(timeout=120)
        if self._worker.is_alive():
            with self._lock:
                left = len(self._queue)
            logger.error("toolmeter receiver did not finish writing within 120 s; %d request(s) stay in the spool "
                         "and are written at the next start", left)  # fmt: skip
        self._pool.shutdown(wait=True)
        self.spool.close()


# --- OTLP/HTTP ----------------------------------------------------------------------------

_KINDS = {
    ("/v1/traces", PROTOBUF): S.TRACES_PROTOBUF,
    ("/v1/traces", JSON): S.TRACES_JSON,
    ("/v1/logs", PROTOBUF): S.LOGS_PROTOBUF,
    ("/v1/logs", JSON): S.LOGS_JSON,
}


def _token_ok(header: str | None, token: str) -> bool:
    """Constant-time comparison: the time a wrong token takes says nothing about the right one."""
    return hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())


def _status_body(code: int, message: str, content_type: str) -> bytes:
    status = status_pb2.Status(code=code, message=message)
    if content_type == PROTOBUF:
        return bytes(status.SerializeToString())
    import json

    return json.dumps({"code": code, "message": message}).encode("utf-8")


def _error(http_status: int, rpc_code: int, message: str, content_type: str, **headers: str) -> web.Response:
    ct = content_type if content_type in (PROTOBUF, JSON) else JSON
    return web.Response(status=http_status, body=_status_body(rpc_code, message, ct), content_type=ct, headers=headers)


def _ok(path: str, decoded: Decoded, content_type: str) -> web.Response:
    if path == "/v1/traces":
        resp: Any = ExportTraceServiceResponse()
        if decoded.rejected:
            resp.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=decoded.rejected, error_message=decoded.rejection_message())
            )
    else:
        resp = ExportLogsServiceResponse()
        if decoded.rejected:
            resp.partial_success.CopyFrom(
                ExportLogsPartialSuccess(
                    rejected_log_records=decoded.rejected, error_message=decoded.rejection_message()
                )
            )
    if content_type == PROTOBUF:
        return web.Response(body=resp.SerializeToString(), content_type=PROTOBUF)
    from google.protobuf.json_format import MessageToJson

    return web.Response(text=MessageToJson(resp), content_type=JSON)


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise ValueError(f"gzip body inflates past {limit:,} bytes")
    if not d.eof:
        raise gzip.BadGzipFile("truncated gzip body")
    return out


def make_app(receiver: Receiver) -> web.Application:
    rc = receiver.rc
    limit = rc.max_body_bytes

    async def handle(request: web.Request) -> web.Response:
        ct = (request.content_type or "").lower()
        if rc.token is not None and not _token_ok(request.headers.get("Authorization"), rc.token):
            return _error(401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token (Authorization: Bearer ...)",
                          ct, **{"WWW-Authenticate": "Bearer"})  # fmt: skip
        kind = _KINDS.get((request.path, ct))
        if kind is None:
            return _error(415, code_pb2.INVALID_ARGUMENT,
                          f"unsupported content type {ct or '(none)'!r}: send application/x-protobuf or application/json",
                          ct)  # fmt: skip
        encoding = (request.headers.get("Content-Encoding") or "identity").lower()
        if encoding not in ("identity", "gzip"):
            return _error(415, code_pb2.INVALID_ARGUMENT,
                          f"unsupported Content-Encoding {encoding!r}: send gzip or no encoding", ct)  # fmt: skip
        if request.content_length is not None and request.content_length > limit:
            return _too_large(request.content_length, limit, ct)
        try:
            body = await request.read()  # the whole body; aiohttp stops at client_max_size
        except web.HTTPRequestEntityTooLarge:
            return _too_large(None, limit, ct)
        except (asyncio.IncompleteReadError, ConnectionError):
            return _error(400, code_pb2.INVALID_ARGUMENT, "request body ended early", ct)
        loop = asyncio.get_running_loop()
        if encoding == "gzip":
            try:
                body = await loop.run_in_executor(None, _gunzip, body, limit)
            except ValueError:
                return _too_large(None, limit, ct, inflated=True)
            except (OSError, EOFError, zlib.error) as e:
                return _error(400, code_pb2.INVALID_ARGUMENT, f"Content-Encoding is gzip but the body is not ({e})", ct)
        decode = decode_traces if request.path == "/v1/traces" else decode_logs
        try:
            decoded = await loop.run_in_executor(None, decode, body, ct, "otlp")
        except InputError as e:
            return _error(400, code_pb2.INVALID_ARGUMENT, str(e), ct)
        # the answer needs the rejections only; the decoded payloads would stay alive
        # (as large as the body) while it is spooled
        decoded = Decoded(rejected=decoded.rejected, issues=decoded.issues)
        try:
            await loop.run_in_executor(None, receiver.accept, kind, body)
        except QueueFull:
            return _error(503, code_pb2.UNAVAILABLE, f"toolmeter is busy measuring; retry in {RETRY_AFTER_S} s",
                          ct, **{"Retry-After": str(RETRY_AFTER_S)})  # fmt: skip
        except StoreError as e:
            return _error(503, code_pb2.UNAVAILABLE, f"cannot spool the request ({e}); retry later", ct,
                          **{"Retry-After": str(RETRY_AFTER_S * 5)})  # fmt: skip
        return _ok(request.path, decoded, ct)

    async def metrics(request: web.Request) -> web.Response:
        """OTLP metrics are answered and counted, then discarded: toolmeter measures tool results,
        and exporters that share the endpoint (MLflow's, the Node SDK's) would otherwise log an
        error every interval."""
        ct = (request.content_type or "").lower()
        if rc.token is not None and not _token_ok(request.headers.get("Authorization"), rc.token):
            return _error(401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token (Authorization: Bearer ...)",
                          ct, **{"WWW-Authenticate": "Bearer"})  # fmt: skip
        if ct not in (PROTOBUF, JSON):
            return _error(415, code_pb2.INVALID_ARGUMENT,
                          f"unsupported content type {ct or '(none)'!r}: send application/x-protobuf or application/json",
                          ct)  # fmt: skip
        await request.read()
        with receiver.pipeline.lock:
            receiver.pipeline.counters.metric_requests += 1
        if ct == PROTOBUF:
            return web.Response(body=b"", content_type=PROTOBUF)  # an empty ExportMetricsServiceResponse
        return web.Response(text="{}", content_type=JSON)

    app = web.Application(client_max_size=limit)
    app.router.add_post("/v1/traces", handle)
    app.router.add_post("/v1/logs", handle)
    app.router.add_post("/v1/metrics", metrics)
    return app


def _too_large(length: int | None, limit: int, ct: str, inflated: bool = False) -> web.Response:
    what = "inflated body" if inflated else f"request body ({length:,} bytes)" if length else "request body"
    return _error(413, code_pb2.INVALID_ARGUMENT,
                  f"{what} is over the limit of {limit:,} bytes; raise it with --max-body-bytes or "
                  f"{MAX_BODY_ENV}, or export smaller batches", ct)  # fmt: skip


# --- OTLP/gRPC ------------------------------------------------------------------------------


def make_grpc_server(receiver: Receiver, host: str, port: int) -> tuple[grpc.Server, int]:
    """A gRPC server for the trace and logs services; returns it and the bound port."""
    rc = receiver.rc

    def export(kind: int, path: str) -> Any:
        def handler(body: bytes, context: grpc.ServicerContext) -> bytes:
            if rc.token is not None:
                meta = dict(context.invocation_metadata())
                if not _token_ok(meta.get("authorization"), rc.token):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
            if len(body) > rc.max_body_bytes:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"request over {rc.max_body_bytes:,} bytes")
            decode = decode_traces if path == "/v1/traces" else decode_logs
            try:
                decoded = decode(body, PROTOBUF, "otlp")
            except InputError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            decoded = Decoded(rejected=decoded.rejected, issues=decoded.issues)  # not the payloads
            try:
                receiver.accept(kind, body)
            except QueueFull:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"toolmeter is busy measuring; retry in {RETRY_AFTER_S} s")
            except StoreError as e:  # the same words as over HTTP: not "busy"
                context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot spool the request ({e}); retry later")
            if path == "/v1/traces":
                resp: Any = ExportTraceServiceResponse()
                if decoded.rejected:
                    resp.partial_success.rejected_spans = decoded.rejected
                    resp.partial_success.error_message = decoded.rejection_message()
            else:
                resp = ExportLogsServiceResponse()
                if decoded.rejected:
                    resp.partial_success.rejected_log_records = decoded.rejected
                    resp.partial_success.error_message = decoded.rejection_message()
            return bytes(resp.SerializeToString())

        return grpc.unary_unary_rpc_method_handler(handler)  # raw bytes in and out

    def metrics(body: bytes, context: grpc.ServicerContext) -> bytes:
        """Answered, counted and discarded, as over HTTP (an empty ExportMetricsServiceResponse)."""
        if rc.token is not None and not _token_ok(dict(context.invocation_metadata()).get("authorization"), rc.token):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        with receiver.pipeline.lock:
            receiver.pipeline.counters.metric_requests += 1
        return b""

    handlers = [
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.metrics.v1.MetricsService",
            {"Export": grpc.unary_unary_rpc_method_handler(metrics)},
        ),
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": export(S.TRACES_PROTOBUF, "/v1/traces")}
        ),
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.logs.v1.LogsService", {"Export": export(S.LOGS_PROTOBUF, "/v1/logs")}
        ),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="toolmeter-grpc"),
        handlers=handlers,
        options=[("grpc.max_receive_message_length", rc.max_body_bytes)],
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    server.start()
    return server, bound


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
