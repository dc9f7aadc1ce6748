"""One OTLP export request, whatever carried it: the rules HTTP and gRPC share.

Both servers call :func:`authorised` and :func:`export` and only translate the
:class:`Answer` into their own status codes and bodies, so the two cannot drift apart: the
same checks, the same words in every refusal, the same partial-success message.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.rpc import code_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from collector.decode.request import JSON, PROTOBUF, Decoded, check_logs, check_traces
from collector.errors import InputError, StoreError
from collector.serve import spool as S

if TYPE_CHECKING:
    from collector.serve.receiver import Receiver

TRACES = "/v1/traces"
LOGS = "/v1/logs"
RETRY_AFTER_S = 2

KINDS = {
    (TRACES, PROTOBUF): S.TRACES_PROTOBUF,
    (TRACES, JSON): S.TRACES_JSON,
    (LOGS, PROTOBUF): S.LOGS_PROTOBUF,
    (LOGS, JSON): S.LOGS_JSON,
}
"""The spool's record kind for each (path, content type) toolmeter accepts."""

UNAUTHENTICATED_MESSAGE = "missing or wrong bearer token (Authorization: Bearer ...)"


class QueueFull(Exception):
    """The measuring queue is full: the client should retry later."""


@dataclass(frozen=True)
class Answer:
    """What to answer: ``rpc_code`` is a ``google.rpc.Code``; ``http_status`` its OTLP/HTTP twin."""

    http_status: int
    rpc_code: int
    message: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    response: Any = None
    """The ``Export*ServiceResponse`` (with any partial success) when the request was accepted."""


def authorised(token: str | None, header: str | None) -> bool:
    """Constant-time comparison: the time a wrong token takes says nothing about the right one."""
    if token is None:
        return True
    return hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())


def busy() -> Answer:
    return Answer(503, code_pb2.UNAVAILABLE, f"toolmeter is busy measuring; retry in {RETRY_AFTER_S} s",
                  {"Retry-After": str(RETRY_AFTER_S)})  # fmt: skip


def export(receiver: Receiver, path: str, body: bytes, content_type: str) -> Answer:
    """Check ``body``, spool it and say what to answer (blocking: call it off the event loop).

    Spans and log records are checked, not read: the measuring processes decode them from the
    spool (reading every attribute here as well cost this process ~10 µs a small span for nothing)."""
    check = check_traces if path == TRACES else check_logs
    try:
        decoded = check(body, content_type, "otlp")
    except InputError as e:
        return Answer(400, code_pb2.INVALID_ARGUMENT, str(e))
    try:
        receiver.accept(KINDS[(path, content_type)], body)
    except QueueFull:
        return busy()
    except StoreError as e:
        return Answer(503, code_pb2.UNAVAILABLE, f"cannot spool the request ({e}); retry later",
                      {"Retry-After": str(RETRY_AFTER_S * 5)})  # fmt: skip
    return Answer(200, code_pb2.OK, response=response(path, decoded))


def response(path: str, decoded: Decoded) -> Any:
    """The export response, with OTLP's partial success when some items were rejected."""
    if path == TRACES:
        resp: Any = ExportTraceServiceResponse()
        if decoded.rejected:
            resp.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=decoded.rejected, error_message=decoded.rejection_message())
            )
        return resp
    resp = ExportLogsServiceResponse()
    if decoded.rejected:
        resp.partial_success.CopyFrom(
            ExportLogsPartialSuccess(rejected_log_records=decoded.rejected, error_message=decoded.rejection_message())
        )
    return resp


def count_metrics_request(receiver: Receiver) -> None:
    """OTLP metrics are answered and counted, then discarded: toolmeter measures tool results,
    and exporters that share the endpoint (MLflow's, the Node SDK's) would otherwise log an
    error every interval."""
    with receiver.pipeline.lock:
        receiver.pipeline.counters.metric_requests += 1
