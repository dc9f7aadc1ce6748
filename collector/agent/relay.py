"""The forwarding helper: a child process that encodes spans as OTLP and sends them.

Building OTLP protobuf is Python work (one message object per attribute), and in the
agent's interpreter it competes with the agent for the GIL. So in forwarding mode the
processor's worker thread only flattens each finished span into a tuple of plain values
and writes it, with :mod:`marshal` (C, no Python per value), to this helper's stdin; the
helper rebuilds the spans, encodes them with the SDK's own OTLP encoder and POSTs them
(:class:`collector.agent.forward.Forwarder`: gzip, retries, bearer token).

The protocol on the pipes:

- agent to helper: frames of a 4-byte little-endian length and a marshalled
  ``("spans", seq, resources, scopes, spans)`` or ``("flush", seq)``;
- helper to agent: one line per frame, ``sent SEQ N``, ``failed SEQ N`` or ``flushed SEQ``.

Lifetime: the helper ends when its stdin closes (the processor shut down, or the agent's
process died: the pipe closes with it), after sending what it holds; it ignores Ctrl+C,
which reaches the whole process group, so an interrupted agent's last spans still go out
while the agent shuts down. The receiver's token travels in the environment, not in the
command line that ``ps`` shows. The helper runs at a lower CPU priority than the agent
(:data:`HELPER_NICENESS`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import marshal
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope as PbScope
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, SpanFlags
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from collector.dialects import attributes as A

logger = logging.getLogger("toolmeter")

ENDPOINT_ENV: Final = "TOOLMETER_RELAY_ENDPOINT"
TOKEN_ENV: Final = "TOOLMETER_RELAY_TOKEN"
HELPER_NICENESS: Final = 10
"""How much lower than the agent the helper's CPU priority is (``nice``)."""
PIPE_BYTES: Final = 1 << 20
"""The pipe's buffer (Linux's default ceiling for an unprivileged process)."""
_LENGTH = struct.Struct("<I")


def _plain(attributes: Any) -> dict[str, Any]:
    """A span's, event's or resource's attributes as the dict behind them (immutable once the
    span ended), or a copy when the SDK stores them otherwise."""
    backing = getattr(attributes, "_dict", None)
    if isinstance(backing, dict):
        return backing
    return dict(attributes or {})


_KIND = {kind: kind.value for kind in SpanKind}
_CODE = {code: code.value for code in StatusCode}


def flatten(
    spans: Sequence[tuple[ReadableSpan, str | bytes | None, str | bytes | None]],
) -> tuple[list[Any], list[Any], list[Any]]:
    """(resources, scopes, spans) of plain values for :mod:`marshal`; payloads parked by
    :func:`collector.record_tool_result` join the span's attributes as ``toolmeter.raw`` /
    ``toolmeter.view`` (of this copy only).

    On the agent's interpreter (the processor's worker thread), so it reads each field once
    and builds no object per attribute: about 1 us a span."""
    resources: list[Any] = []
    scopes: list[Any] = []
    resource_index: dict[int, int] = {}
    scope_index: dict[int, int] = {}
    out: list[Any] = []
    append = out.append
    for span, raw, view in spans:
        resource = span.resource
        r = resource_index.get(id(resource))
        if r is None:
            r = resource_index[id(resource)] = len(resources)
            resources.append((_plain(resource.attributes), resource.schema_url or ""))
        scope = span.instrumentation_scope
        s = scope_index.get(id(scope))
        if s is None:
            s = scope_index[id(scope)] = len(scopes)
            scopes.append(
                (scope.name, scope.version, scope.schema_url, _plain(scope.attributes)) if scope is not None else None
            )
        # the SDK's own stores, read once (the properties wrap or copy them); see _plain
        bounded = getattr(span, "_attributes", None)
        attrs = _plain(bounded if bounded is not None else span.attributes)
        if raw is not None or view is not None:
            attrs = dict(attrs)
            for key, value in ((A.RAW, raw), (A.VIEW, view)):
                if value is not None:
                    attrs[key] = value if isinstance(value, str) else value.decode("utf-8", errors="replace")
        ctx = span.context
        parent = span.parent
        status = span.status
        events = getattr(span, "_events", None)
        if events is None:
            events = span.events
        links = getattr(span, "_links", None)
        if links is None:
            links = span.links
        append((
            span.name,
            ctx.trace_id if ctx else 0, ctx.span_id if ctx else 0,
            ",".join(f"{k}={v}" for k, v in ctx.trace_state.items()) if ctx and ctx.trace_state else None,
            parent.span_id if parent else None, bool(parent.is_remote) if parent else False,
            _KIND.get(span.kind, 0), span.start_time, span.end_time,
            attrs, getattr(bounded, "dropped", 0),
            _CODE.get(status.status_code, 0), status.description,
            [(e.name, e.timestamp, _plain(e.attributes), e.dropped_attributes) for e in events] if events else (),
            [(link.context.trace_id, link.context.span_id, bool(link.context.is_remote), _plain(link.attributes),
              link.dropped_attributes) for link in links] if links else (),
            getattr(events, "dropped", 0), getattr(links, "dropped", 0),
            r, s,
        ))  # fmt: skip
    return resources, scopes, out


def _frame(message: tuple[Any, ...]) -> bytes:
    try:
        data = marshal.dumps(message)
    except ValueError:  # a value marshal does not know (a custom SDK's attribute type): as text
        data = marshal.dumps(_as_text(message))
    return _LENGTH.pack(len(data)) + data


def _as_text(value: Any) -> Any:
    if value is None or isinstance(value, (str, bytes, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_text(v) for v in value) if isinstance(value, tuple) else [_as_text(v) for v in value]
    return str(value)


@dataclass
class _Helper:
    """One helper process and what it was handed and has answered for."""

    proc: subprocess.Popen[bytes]
    handed: int = 0
    answered: int = 0
    flushed: int = 0


class Relay:
    """The agent's end: starts the helper on first use and hands it batches.

    ``send`` runs on the processor's worker thread; a full pipe blocks that thread (not the
    agent's), and the processor's queue then fills and counts drops, as when a receiver is slow.
    Spans handed to a helper that dies before answering for them are counted as failed.
    """

    def __init__(self, endpoint: str, token: str | None = None) -> None:
        self.endpoint = endpoint
        self.token = token
        self.sent = 0
        self.failed = 0
        self.exits: list[int] = []
        """Exit codes of helpers that ended with spans unanswered for, or not cleanly."""
        self._helper: _Helper | None = None
        self._seq = 0
        self._lock = threading.Lock()
        self._answer = threading.Condition(self._lock)
        self._writing = threading.Lock()
        """One frame at a time on the pipe: the worker sends while force_flush (any thread) asks."""

    def _start(self) -> _Helper:
        helper = self._helper
        if helper is not None:
            if helper.proc.poll() is None:
                return helper
            if helper.proc.stdin is not None:
                with contextlib.suppress(OSError, ValueError):  # a broken pipe's buffer cannot flush
                    helper.proc.stdin.close()
        if not sys.executable:
            raise OSError("this interpreter names no sys.executable to start the forwarding helper with")
        env = dict(os.environ, **{ENDPOINT_ENV: self.endpoint})
        env.pop(TOKEN_ENV, None)
        if self.token:
            env[TOKEN_ENV] = self.token
        # the helper imports this package from where the agent found it, whatever its sys.path
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from collector.agent.relay import run_helper; sys.exit(run_helper())"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
        )  # fmt: skip
        if proc.stdin is not None and hasattr(fcntl, "F_SETPIPE_SZ"):
            # a batch is megabytes: in 64 KB pipe-fuls it costs both processes a wake-up each
            with contextlib.suppress(OSError):
                fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        helper = self._helper = _Helper(proc)
        threading.Thread(target=self._read_answers, args=(helper,), name="toolmeter-relay", daemon=True).start()
        return helper

    def _read_answers(self, helper: _Helper) -> None:
        out = helper.proc.stdout
        assert out is not None
        with contextlib.suppress(OSError, ValueError):  # ValueError: abandon() closed the pipe
            for line in out:
                word, _, rest = line.decode("ascii", "replace").strip().partition(" ")
                with self._lock:
                    if word in ("sent", "failed"):
                        n = int(rest.split()[1])
                        helper.answered += n
                        if word == "sent":
                            self.sent += n
                        else:
                            self.failed += n
                    elif word == "flushed":
                        helper.flushed = int(rest)
                    self._answer.notify_all()
        with contextlib.suppress(OSError, ValueError):
            out.close()
        code = helper.proc.wait()
        with self._lock:
            lost = helper.handed - helper.answered
            if lost or code != 0:
                self.failed += lost
                helper.answered = helper.handed
                self.exits.append(code)
                logger.warning("toolmeter: the forwarding helper exited (code %s); %d span(s) it had not "
                               "answered for are counted as failed", code, lost)  # fmt: skip
            self._answer.notify_all()

    def _write(self, kind: str, body: tuple[Any, ...], spans: int = 0) -> tuple[_Helper, int]:
        with self._writing:
            self._seq += 1
            return self._write_locked(_frame((kind, self._seq, *body)), spans), self._seq

    def _write_locked(self, frame: bytes, spans: int) -> _Helper:
        for attempt in (1, 2):  # a helper that died is started again, once
            helper = self._start()
            stdin = helper.proc.stdin
            assert stdin is not None
            with self._lock:
                helper.handed += spans
            try:
                stdin.write(frame)
                stdin.flush()
                return helper
            except (ValueError, OSError) as e:  # BrokenPipeError is an OSError
                with self._lock:
                    helper.handed -= spans  # never reached it: the caller fails them
                if attempt == 2:
                    raise OSError(f"the forwarding helper stopped (exit {helper.proc.poll()}): {e}") from e
        raise AssertionError("unreachable")

    def send(self, spans: Sequence[tuple[ReadableSpan, str | bytes | None, str | bytes | None]]) -> None:
        """Hand ``spans`` to the helper (raises OSError when it cannot be started or keeps dying)."""
        resources, scopes, flat = flatten(spans)
        self._write("spans", (resources, scopes, flat), len(flat))

    def flush(self, timeout_s: float) -> bool:
        """Wait until the helper has answered for everything handed to it so far."""
        if self._helper is None:
            return True
        try:
            helper, seq = self._write("flush", ())
        except OSError:
            return False
        with self._lock:
            return (
                self._answer.wait_for(lambda: helper.flushed >= seq or helper.proc.poll() is not None, timeout_s)
                and helper.flushed >= seq
            )

    def abandon(self) -> None:
        """Let go of the helper without waiting: close this process's ends of its pipes (in a
        forked child, where the parent still owns the helper; or after the helper failed)."""
        helper, self._helper = self._helper, None
        if helper is not None:
            for pipe in (helper.proc.stdin, helper.proc.stdout):
                with contextlib.suppress(OSError, ValueError):
                    if pipe is not None:
                        pipe.close()

    def close(self, timeout_s: float) -> None:
        """Close the helper's stdin and wait for it to send what it holds (killed after ``timeout_s``)."""
        helper, self._helper = self._helper, None
        if helper is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert helper.proc.stdin is not None
            helper.proc.stdin.close()
        try:
            helper.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("toolmeter: the forwarding helper did not finish within %.0f s; stopping it", timeout_s)
            helper.proc.kill()
            helper.proc.wait()
        # its answers are read to the end before counters are read
        with self._lock:
            self._answer.wait_for(lambda: helper.answered >= helper.handed, 5)


# --- the helper process ------------------------------------------------------------------------


def encode(resources: list[Any], scopes: list[Any], flat: list[Any]) -> bytes:
    """An OTLP ``ExportTraceServiceRequest`` of flattened spans, field for field what the SDK's
    encoder (``encode_spans``) makes of the same spans, in a quarter of its time: no SDK span
    is rebuilt and no value passes through a mapping proxy (a test holds the two equal)."""
    local, remote = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
    grouped: dict[int, dict[int, list[Any]]] = {}
    for (name, trace_id, span_id, trace_state, parent_id, parent_remote, kind, start, end, attrs, dropped,
         code, description, events, links, dropped_events, dropped_links, r, s) in flat:  # fmt: skip
        tid = trace_id.to_bytes(16, "big")
        span = PbSpan(
            trace_id=tid,
            span_id=span_id.to_bytes(8, "big"),
            trace_state=trace_state,
            parent_span_id=parent_id.to_bytes(8, "big") if parent_id is not None else b"",
            name=name,
            kind=kind + 1,  # OTLP counts SPAN_KIND_UNSPECIFIED as 0
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=_key_values(attrs),
            events=[
                PbSpan.Event(name=n, time_unix_nano=t, attributes=_key_values(a), dropped_attributes_count=d)
                for n, t, a, d in events
            ]
            or None,
            links=[
                PbSpan.Link(
                    trace_id=lt.to_bytes(16, "big"),
                    span_id=ls.to_bytes(8, "big"),
                    attributes=_key_values(a),
                    dropped_attributes_count=d,
                    flags=local | (remote if lr else 0),
                )
                for lt, ls, lr, a, d in links
            ]
            or None,
            status=PbStatus(code=code, message=description),
            dropped_attributes_count=dropped,
            dropped_events_count=dropped_events,
            dropped_links_count=dropped_links,
            flags=local | (remote if parent_remote else 0),
        )
        grouped.setdefault(r, {}).setdefault(s, []).append(span)
    out = []
    for r, by_scope in grouped.items():
        attrs, schema_url = resources[r]
        scope_spans = []
        for s, spans in by_scope.items():
            scope = scopes[s]
            scope_spans.append(
                ScopeSpans(
                    scope=PbScope(name=scope[0], version=scope[1], attributes=_key_values(scope[3]))
                    if scope is not None
                    else PbScope(),
                    spans=spans,
                    schema_url=(scope[2] or "") if scope is not None else "",
                )
            )
        out.append(
            ResourceSpans(
                resource=PbResource(attributes=_key_values(attrs)), scope_spans=scope_spans, schema_url=schema_url
            )
        )
    return bytes(ExportTraceServiceRequest(resource_spans=out).SerializeToString())


def _key_values(attrs: dict[str, Any] | None) -> list[Any]:
    if not attrs:
        return []
    out = []
    for key, value in attrs.items():
        encoded = _any_value(value)
        if encoded is not None:
            out.append(KeyValue(key=key, value=encoded))
    return out


def _any_value(value: Any) -> Any:
    t = value.__class__
    if t is str:
        return AnyValue(string_value=value)
    if t is bool:
        return AnyValue(bool_value=value)
    if t is int:
        return AnyValue(int_value=value)
    if t is float:
        return AnyValue(double_value=value)
    if value is None:
        return AnyValue()
    if t is bytes:
        return AnyValue(bytes_value=value)
    if t is tuple or t is list:
        return AnyValue(array_value=ArrayValue(values=[v for v in map(_any_value, value) if v is not None]))
    if t is dict:
        return AnyValue(kvlist_value=KeyValueList(values=_key_values({str(k): v for k, v in value.items()})))
    logger.warning("toolmeter relay: an attribute value of type %s cannot be sent; left out", t.__name__)
    return None


def _read_frames(stdin: IO[bytes], inbox: queue.Queue[Any], eof: threading.Event) -> None:
    try:
        while True:
            head = stdin.read(_LENGTH.size)
            if len(head) < _LENGTH.size:
                break
            (size,) = _LENGTH.unpack(head)
            data = stdin.read(size)
            if len(data) < size:
                break
            inbox.put(marshal.loads(data))
    finally:
        eof.set()
        inbox.put(None)


def run_helper() -> int:
    """The helper's loop: frames in, OTLP out, one answer line per frame."""
    from collector.agent.forward import Forwarder

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        # background work: where it shares a core with the agent, the agent goes first (the
        # helper falls behind, the processor's queue fills and drops are counted)
        os.nice(HELPER_NICENESS)
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    endpoint = os.environ.get(ENDPOINT_ENV)
    if not endpoint:
        print(f"toolmeter relay: {ENDPOINT_ENV} is not set; this helper is started by ToolResultProcessor",
              file=sys.stderr)  # fmt: skip
        return 2
    forwarder = Forwarder(endpoint, os.environ.get(TOKEN_ENV) or None)
    inbox: queue.Queue[Any] = queue.Queue(maxsize=4)
    eof = threading.Event()
    threading.Thread(target=_read_frames, args=(sys.stdin.buffer, inbox, eof), daemon=True).start()
    out = sys.stdout
    while (message := inbox.get()) is not None:
        if message[0] == "flush":
            print(f"flushed {message[1]}", file=out, flush=True)
            continue
        _, seq, resources, scopes, flat = message
        ok = forwarder.send_encoded(encode(resources, scopes, flat), len(flat), stop=eof)
        print(f"{'sent' if ok else 'failed'} {seq} {len(flat)}", file=out, flush=True)
    return 0
