"""OTLP/HTTP: the aiohttp application for ``/v1/traces``, ``/v1/logs`` and ``/v1/metrics``.

Checks in order, each with its own status: bearer token (401), content type and encoding
(415), size before and after gzip (413); then :func:`collector.serve.exports.export`.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from typing import TYPE_CHECKING, Any

from aiohttp import web
from google.protobuf.json_format import MessageToJson
from google.rpc import code_pb2, status_pb2

from collector.config import MAX_BODY_BYTES_ENV
from collector.decode.request import JSON, PROTOBUF
from collector.serve import exports as X

if TYPE_CHECKING:
    from collector.serve.receiver import Receiver


def _status_body(code: int, message: str, content_type: str) -> bytes:
    status = status_pb2.Status(code=code, message=message)
    if content_type == PROTOBUF:
        return bytes(status.SerializeToString())
    return json.dumps({"code": code, "message": message}).encode("utf-8")


def _error(http_status: int, rpc_code: int, message: str, content_type: str, **headers: str) -> web.Response:
    ct = content_type if content_type in (PROTOBUF, JSON) else JSON
    return web.Response(status=http_status, body=_status_body(rpc_code, message, ct), content_type=ct, headers=headers)


def _answer(answer: X.Answer, content_type: str) -> web.Response:
    if answer.response is None:
        return _error(answer.http_status, answer.rpc_code, answer.message, content_type, **answer.headers)
    if content_type == PROTOBUF:
        return web.Response(body=answer.response.SerializeToString(), content_type=PROTOBUF)
    return web.Response(text=MessageToJson(answer.response), content_type=JSON)


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise ValueError(f"gzip body inflates past {limit:,} bytes")
    if not d.eof:
        raise gzip.BadGzipFile("truncated gzip body")
    return out


def _too_large(length: int | None, limit: int, ct: str, inflated: bool = False) -> web.Response:
    what = "inflated body" if inflated else f"request body ({length:,} bytes)" if length else "request body"
    return _error(413, code_pb2.INVALID_ARGUMENT,
                  f"{what} is over the limit of {limit:,} bytes; raise it with --max-body-bytes or "
                  f"{MAX_BODY_BYTES_ENV}, or export smaller batches", ct)  # fmt: skip


def _refusal(request: web.Request, token: str | None, ct: str) -> web.Response | None:
    """401 or 415, or None when the request may be read."""
    if not X.authorised(token, request.headers.get("Authorization")):
        return _error(401, code_pb2.UNAUTHENTICATED, X.UNAUTHENTICATED_MESSAGE, ct, **{"WWW-Authenticate": "Bearer"})
    if ct not in (PROTOBUF, JSON):
        return _error(415, code_pb2.INVALID_ARGUMENT,
                      f"unsupported content type {ct or '(none)'!r}: send application/x-protobuf or application/json",
                      ct)  # fmt: skip
    return None


async def _body(request: web.Request, limit: int, ct: str) -> bytes | web.Response:
    """The request's body, gunzipped within ``limit``, or the error response."""
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
    if encoding != "gzip":
        return body
    try:
        return await asyncio.get_running_loop().run_in_executor(None, _gunzip, body, limit)
    except ValueError:
        return _too_large(None, limit, ct, inflated=True)
    except (OSError, EOFError, zlib.error) as e:
        return _error(400, code_pb2.INVALID_ARGUMENT, f"Content-Encoding is gzip but the body is not ({e})", ct)


def make_app(receiver: Receiver) -> web.Application:
    rc = receiver.rc
    limit = rc.max_body_bytes

    async def handle(request: web.Request) -> web.Response:
        ct = (request.content_type or "").lower()
        refusal = _refusal(request, rc.token, ct)
        if refusal is not None:
            return refusal
        body = await _body(request, limit, ct)
        if isinstance(body, web.Response):
            return body
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(None, X.export, receiver, request.path, body, ct)
        return _answer(answer, ct)

    async def metrics(request: web.Request) -> web.Response:
        ct = (request.content_type or "").lower()
        refusal = _refusal(request, rc.token, ct)
        if refusal is not None:
            return refusal
        await request.read()
        X.count_metrics_request(receiver)
        if ct == PROTOBUF:
            return web.Response(body=b"", content_type=PROTOBUF)  # an empty ExportMetricsServiceResponse
        empty: Any = "{}"
        return web.Response(text=empty, content_type=JSON)

    async def health(request: web.Request) -> web.Response:
        # for a supervisor's probes: no token asked, and nothing told but counts
        writing = not receiver.abandoned
        return web.json_response(
            {"status": "ok" if writing else "not writing", "queued_requests": receiver.queued,
             "refused_requests": receiver.refused},
            status=200 if writing else 503,
        )  # fmt: skip

    app = web.Application(client_max_size=limit)
    app.router.add_get("/healthz", health)
    app.router.add_post(X.TRACES, handle)
    app.router.add_post(X.LOGS, handle)
    app.router.add_post("/v1/metrics", metrics)
    return app
