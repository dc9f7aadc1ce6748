"""Read Claude Code's OTLP log events as tool calls and LLM calls.

Claude Code does not export tool spans by default: with ``CLAUDE_CODE_ENABLE_TELEMETRY=1``
and ``OTEL_LOGS_EXPORTER=otlp`` it exports *log events* (see its monitoring documentation,
https://code.claude.com/docs/en/monitoring-usage, "Events"):

* ``claude_code.tool_result``, when a tool completes: ``tool_name``, ``tool_use_id``,
  ``success`` (``"true"``/``"false"``), ``duration_ms``, ``tool_result_size_bytes``,
  ``error`` / ``error_type``, and with ``OTEL_LOG_TOOL_DETAILS=1`` the arguments as
  ``tool_input`` (JSON, values over 512 characters cut) and ``tool_parameters``.
* ``claude_code.api_request``, one per model request: ``model``, ``input_tokens``,
  ``output_tokens``, ``cache_read_tokens``, ``cache_creation_tokens``, ``duration_ms``,
  ``request_id``.

Every value arrives as a string (``"1204"``); the event name is the record's event name
or body (``claude_code.tool_result``) and the attribute ``event.name`` (``tool_result``).
The event carries the *size* of the tool result, not the result itself (the content is
only on the beta trace spans' ``tool.output`` span events), so a tool call read here has
``raw_bytes_declared`` and no payload: bytes are exact, tokens are unknown.

Times: the record's time is when the tool (or request) finished, so ``end_ns`` is that
time and ``start_ns = end_ns - duration_ms``. Without a record time, ``event.timestamp``
(ISO 8601) is used.

Identifiers. A call is stored under ``(trace_id, span_id)``, so both must be unique per
call and stable across re-ingestion:

* ``trace_id``: the record's trace id when it has one (Agent SDK and ``-p`` sessions with
  ``TRACEPARENT``, and interactive sessions with tracing on); otherwise a synthetic id,
  the first 32 hex digits of ``sha256("claude_code/session/" + session.id)``, so all calls
  of one session form one trace (and window cost counts the session's later requests).
  An event without ``session.id`` uses its ``prompt.id`` the same way (and says so).
* ``span_id``: always derived, never the record's own span id, because every event of a
  prompt carries the *same* span id (the ``claude_code.interaction`` span's): used as
  the call's id it would merge all tool calls of a prompt into one. The record's span id
  becomes ``parent_span_id`` instead. A tool call's span id is the first 16 hex digits of
  ``sha256("claude_code/tool_use/" + tool_use_id)``; an API request's uses its
  ``request_id`` (or ``client_request_id``) the same way. Events without these ids
  (versions before they existed) hash the session id, ``event.sequence``, the time and
  the tool name or model instead.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from collector.decode.console import iso_to_ns
from collector.dialects import attributes as A
from collector.dialects.conventions import LLM, TOOL
from collector.model import Issue, LlmCall, LogData, ToolCall

DIALECT = "claude_code"
_PREFIX = "claude_code."


def event_name(log: LogData) -> str | None:
    """The event's name without the ``claude_code.`` prefix (``tool_result``), or None.

    Looked for in the record's event name, the ``event.name`` attribute and a string body.
    """
    candidates = (log.event_name, log.attributes.get(A.CC_EVENT_NAME), log.body)
    for value in candidates:
        if isinstance(value, str) and value:
            return value.removeprefix(_PREFIX)
    return None


def classify_log(log: LogData) -> str | None:
    """``"tool"`` for a ``claude_code.tool_result`` event, ``"llm"`` for ``claude_code.api_request``."""
    name = event_name(log)
    if name == A.CC_TOOL_RESULT_EVENT.removeprefix(_PREFIX):
        return TOOL
    if name == A.CC_API_REQUEST_EVENT.removeprefix(_PREFIX):
        return LLM
    return None


def synthetic_trace_id(session_id: str) -> str:
    """The trace id of a session whose events carry none: 32 hex digits of a sha256."""
    return hashlib.sha256(f"claude_code/session/{session_id}".encode()).hexdigest()[:32]


def synthetic_span_id(kind: str, key: str) -> str:
    """A call's span id, derived from its own id (``tool_use`` + ``tool_use_id``, ...)."""
    return hashlib.sha256(f"claude_code/{kind}/{key}".encode()).hexdigest()[:16]


class _Reader:
    """Typed values from one record; bad values become issues naming the field."""

    def __init__(self, log: LogData) -> None:
        self.log = log
        self.attrs: Mapping[str, Any] = log.attributes
        self.issues: list[Issue] = []
        self._found: list[tuple[str | None, str]] = []
        session = self.string(A.CC_SESSION_ID) or _str(log.resource.get(A.CC_SESSION_ID))
        prompt = self.string(A.CC_PROMPT_ID)
        self.session = session
        if _given_id(log.trace_id):
            self.trace_id = str(log.trace_id).lower()
        else:
            self.trace_id = synthetic_trace_id(session or prompt or "unknown")
            if not session:
                self.note(
                    A.CC_SESSION_ID,
                    "event has no session.id; its trace id is derived from "
                    + ("its prompt.id" if prompt else "nothing (one shared trace for all such events)"),
                )
        self.time_ns = self._time()
        self.span_id = ""  # set by the caller once the call's id is known

    def note(self, field: str | None, message: str) -> None:
        self._found.append((field, message))

    def finish(self) -> list[Issue]:
        src = self.log.source
        self.issues = [Issue(src, m, self.trace_id, self.span_id or None, f) for f, m in self._found]
        return self.issues

    def warnings(self) -> tuple[str, ...]:
        return tuple(m if not f else f"{f}: {m}" for f, m in self._found)

    def string(self, key: str) -> str | None:
        return _str(self.attrs.get(key))

    def number(self, key: str) -> float | None:
        """A non-negative number (Claude Code sends numbers as strings); a bad value is an issue."""
        value = self.attrs.get(key)
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, (int, float)):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                number = None
        if number is None or number != number or number < 0 or number == float("inf"):
            self.note(key, f"must be a non-negative number, got {value!r}; ignored")
            return None
        return number

    def integer(self, key: str) -> int | None:
        number = self.number(key)
        if number is None:
            return None
        if number != int(number):
            self.note(key, f"must be a whole number, got {self.attrs.get(key)!r}; ignored")
            return None
        return int(number)

    def _time(self) -> int:
        if self.log.time_ns:
            return int(self.log.time_ns)
        stamp = self.attrs.get(A.CC_EVENT_TIMESTAMP)
        if isinstance(stamp, str):
            try:
                return iso_to_ns(stamp)
            except ValueError:
                self.note(A.CC_EVENT_TIMESTAMP, f"is not an ISO 8601 time, got {stamp!r}")
        self.note(None, "event has no time (record time or event.timestamp); recorded at 0")
        return 0

    def fallback_key(self, what: str | None) -> str:
        """Stable identity of an event that has no id of its own."""
        sequence = self.string(A.CC_EVENT_SEQUENCE) or ""
        return f"{self.session or ''}/{sequence}/{self.time_ns}/{what or ''}"


def tool_call_from_log(log: LogData) -> tuple[ToolCall | None, list[Issue]]:
    """Read a ``claude_code.tool_result`` event; None (and no issues) for any other record."""
    if classify_log(log) != TOOL:
        return None, []
    r = _Reader(log)
    name = r.string(A.CC_TOOL_NAME) or r.string(A.CC_TOOL_NAME_LEGACY)
    if name is None:
        r.note(A.CC_TOOL_NAME, "tool_result event has no tool_name; recorded as '(unnamed)'")
    tool_use_id = r.string(A.CC_TOOL_USE_ID)
    r.span_id = synthetic_span_id("tool_use", tool_use_id or r.fallback_key(name))
    status, error = "unset", None
    success = log.attributes.get(A.CC_SUCCESS)
    if success is not None:
        flag = success if isinstance(success, bool) else str(success).strip().lower()
        if flag in (True, "true"):
            status = "ok"
        elif flag in (False, "false"):
            status = "error"
            error = r.string(A.CC_ERROR) or r.string(A.CC_ERROR_TYPE) or "failed"
        else:
            r.note(A.CC_SUCCESS, f'must be "true" or "false", got {success!r}; status left unset')
    duration = r.number(A.CC_DURATION_MS)
    size = r.integer(A.CC_TOOL_RESULT_SIZE_BYTES)
    arguments = _text(log.attributes.get(A.CC_TOOL_INPUT))
    if arguments is None:
        arguments = _text(log.attributes.get(A.CC_TOOL_PARAMETERS))
    end_ns = r.time_ns
    start_ns = end_ns - round(duration * 1_000_000) if duration is not None else end_ns
    issues = r.finish()
    call = ToolCall(
        origin="log",
        trace_id=r.trace_id,
        span_id=r.span_id,
        parent_span_id=str(log.span_id).lower() if _given_id(log.span_id) else None,
        tool_name=name or "(unnamed)",
        dialect=DIALECT,
        start_ns=max(start_ns, 0),
        end_ns=end_ns,
        tool_call_id=tool_use_id,
        service_name=_str(log.resource.get(A.SERVICE_NAME)),
        status=status,
        error=error,
        arguments=arguments,
        raw=None,  # the event carries the result's size, not the result
        raw_bytes_declared=size,
        source=log.source,
        warnings=r.warnings(),
    )
    return call, issues


def llm_call_from_log(log: LogData) -> LlmCall | None:
    """Read a ``claude_code.api_request`` event; None for any other record.

    ``input_tokens`` is the whole prompt: Claude Code's uncached ``input_tokens`` plus
    ``cache_read_tokens`` and ``cache_creation_tokens`` (the Anthropic API counts them
    apart; all three entered the window). Bad values are left out; use
    :func:`llm_call_from_log_with_issues` to get them as issues.
    """
    call, _ = llm_call_from_log_with_issues(log)
    return call


def llm_call_from_log_with_issues(log: LogData) -> tuple[LlmCall | None, list[Issue]]:
    """:func:`llm_call_from_log`, with the problems met as issues naming the field."""
    if classify_log(log) != LLM:
        return None, []
    r = _Reader(log)
    model = r.string(A.CC_MODEL)
    request_id = r.string(A.CC_REQUEST_ID) or r.string(A.CC_CLIENT_REQUEST_ID)
    r.span_id = synthetic_span_id("api_request", request_id or r.fallback_key(model))
    parts = [r.integer(k) for k in (A.CC_INPUT_TOKENS, A.CC_CACHE_READ_TOKENS, A.CC_CACHE_CREATION_TOKENS)]
    input_tokens = None if parts[0] is None else sum(p or 0 for p in parts)
    output_tokens = r.integer(A.CC_OUTPUT_TOKENS)
    duration = r.number(A.CC_DURATION_MS)
    end_ns = r.time_ns
    start_ns = end_ns - round(duration * 1_000_000) if duration is not None else end_ns
    issues = r.finish()
    call = LlmCall(
        trace_id=r.trace_id,
        span_id=r.span_id,
        parent_span_id=str(log.span_id).lower() if _given_id(log.span_id) else None,
        start_ns=max(start_ns, 0),
        end_ns=end_ns,
        dialect=DIALECT,
        service_name=_str(log.resource.get(A.SERVICE_NAME)),
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        source=log.source,
        cache_read_tokens=parts[1],
        cache_write_tokens=parts[2],
    )
    return call, issues


def _given_id(value: str | None) -> bool:
    """An id the record really carries (OTLP writes an absent one as empty or all zeros)."""
    return bool(value) and bool(str(value).strip("0"))


def _str(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text or None


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
