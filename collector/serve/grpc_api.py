"""OTLP/gRPC: the trace, logs and metrics services, on raw bytes (no generated servicer code).

The same rules as over HTTP (:mod:`collector.serve.exports`); only the status codes differ.
"""

from __future__ import annotations

from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc
from google.rpc import code_pb2

from collector.decode.request import PROTOBUF
from collector.serve import exports as X

if TYPE_CHECKING:
    from collector.serve.receiver import Receiver

_GRPC_CODES = {
    code_pb2.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    code_pb2.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
    code_pb2.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
    code_pb2.RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _check_token(token: str | None, context: grpc.ServicerContext) -> None:
    if not X.authorised(token, dict(context.invocation_metadata()).get("authorization")):
        context.abort(grpc.StatusCode.UNAUTHENTICATED, X.UNAUTHENTICATED_MESSAGE)


def make_grpc_server(receiver: Receiver, host: str, port: int) -> tuple[grpc.Server, int]:
    """A gRPC server for the trace and logs services; returns it and the bound port."""
    rc = receiver.rc

    def export(path: str) -> Any:
        def handler(body: bytes, context: grpc.ServicerContext) -> bytes:
            _check_token(rc.token, context)
            if len(body) > rc.max_body_bytes:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"request over {rc.max_body_bytes:,} bytes")
            answer = X.export(receiver, path, body, PROTOBUF)
            if answer.response is None:
                context.abort(_GRPC_CODES.get(answer.rpc_code, grpc.StatusCode.INTERNAL), answer.message)
            return bytes(answer.response.SerializeToString())

        return grpc.unary_unary_rpc_method_handler(handler)  # raw bytes in and out

    def metrics(body: bytes, context: grpc.ServicerContext) -> bytes:
        _check_token(rc.token, context)
        X.count_metrics_request(receiver)
        return b""  # an empty ExportMetricsServiceResponse

    handlers = [
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.metrics.v1.MetricsService",
            {"Export": grpc.unary_unary_rpc_method_handler(metrics)},
        ),
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": export(X.TRACES)}
        ),
        grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.logs.v1.LogsService", {"Export": export(X.LOGS)}
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
