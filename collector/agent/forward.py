"""Forwarding mode: ship tool and LLM spans, payloads included, to a ``toolmeter serve``.

The agent's process then pays for no token counting and holds no DuckDB file: its spans go
to a helper process (:mod:`collector.agent.relay`), which encodes them as OTLP protobuf and
POSTs them with the :class:`Forwarder` here (the agent's worker thread does, when no helper
can run). Payloads that :func:`collector.record_tool_result` parked travel as
``toolmeter.raw`` / ``toolmeter.view`` attributes of the forwarded copy only; the spans other
exporters ship are unchanged.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from collector.dialects import attributes as A

logger = logging.getLogger("toolmeter")

MAX_ATTEMPTS = 6
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def with_payload_attributes(
    attrs: Mapping[str, Any], raw: str | bytes | None, view: str | bytes | None
) -> Mapping[str, Any]:
    """``attrs`` with the parked payloads added as ``toolmeter.raw`` / ``toolmeter.view`` (a copy;
    ``attrs`` itself when there are none)."""
    if raw is None and view is None:
        return attrs
    out = dict(attrs)
    for key, value in ((A.RAW, raw), (A.VIEW, view)):
        if value is not None:
            out[key] = value if isinstance(value, str) else value.decode("utf-8", errors="replace")
    return out


class Forwarder:
    """POSTs batches of spans to an OTLP/HTTP endpoint, retrying on 429/502/503/504."""

    def __init__(self, endpoint: str, token: str | None = None, timeout_s: float = 30) -> None:
        self.url = endpoint.rstrip("/") + ("" if endpoint.rstrip("/").endswith("/v1/traces") else "/v1/traces")
        self.token = token
        # gzip saves bandwidth across a network; to a receiver on this host it only costs CPU
        # on both ends (about 8 us a 6 KB span here, and as much again to inflate)
        self.compress = urllib.parse.urlsplit(self.url).hostname not in _LOOPBACK
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0

    def send_encoded(self, body: bytes, count: int, stop: threading.Event | None = None) -> bool:
        """Send an encoded ``ExportTraceServiceRequest`` of ``count`` spans; True when the receiver
        acknowledged them.

        ``stop`` is the worker's shutdown event: a backoff wait ends when it is set, and the
        attempts after it wait at most 2 s each, so exit is never held for long."""
        headers = {"Content-Type": "application/x-protobuf"}
        if self.compress:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        delay = 0.5
        for attempt in range(MAX_ATTEMPTS):
            request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    resp.read()
                self.sent += count
                return True
            except urllib.error.HTTPError as e:
                if e.code not in (429, 502, 503, 504):
                    logger.error("toolmeter forwarding to %s refused %d span(s): %s %s", self.url, count,
                                 e.code, e.read()[:300])  # fmt: skip
                    break
                retry_after = e.headers.get("Retry-After")
                delay = float(retry_after) if retry_after and retry_after.isdigit() else delay
            except (urllib.error.URLError, OSError) as e:
                logger.warning("toolmeter cannot reach %s (%s); attempt %d of %d", self.url, e, attempt + 1,
                               MAX_ATTEMPTS)  # fmt: skip
            if attempt + 1 < MAX_ATTEMPTS:
                if stop is None:
                    time.sleep(delay)
                elif stop.is_set():
                    time.sleep(min(delay, 2))  # shutting down: short waits for the few attempts left
                else:
                    stop.wait(delay)  # shutdown ends the wait
                delay = min(delay * 2, 30)
        self.failed += count
        return False
