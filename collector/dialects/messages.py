"""Tool responses as the model saw them, read from an LLM call's input messages.

A tool span carries what the tool produced; the next LLM call's input messages carry what
the model was actually shown for the same tool call. Joining the two gives the view (and
so truncation and retained ranges) for unmodified agents, and where an application runs
its tools without tool spans (a plain ``openai`` loop), the messages are the only record of
the call. Every dialect's input messages are read into one form here:

* OpenTelemetry GenAI: ``gen_ai.input.messages`` (``{role, parts}``, parts ``tool_call`` and
  ``tool_call_response``), on the span, on a ``gen_ai.client.inference.operation.details``
  event or log record; and the older per-message events and log records
  (``gen_ai.user.message``, ``gen_ai.assistant.message``, ``gen_ai.tool.message``) with
  ``content``, ``id`` and ``tool_calls`` as attributes or body;
* OpenInference: ``llm.input_messages.{i}.message.*`` (``role``, ``content``, ``tool_call_id``,
  ``tool_calls.{k}.tool_call.id`` / ``.function.name``);
* Traceloop: ``gen_ai.prompt.{i}.*`` (``role``, ``content``, ``tool_call_id``, ``tool_calls.{k}.*``);
* the Vercel AI SDK: ``ai.prompt.messages`` (``tool-call`` and ``tool-result`` parts);
* Langfuse and MLflow: ``langfuse.observation.input``, ``mlflow.spanInputs`` (OpenAI- or
  Anthropic-style messages, alone or under ``messages``);
* Google ADK: ``gcp.vertex.agent.llm_request`` (``contents`` with ``function_response`` parts).

Content is read in every form these carry: strings, content blocks (``text``, Bedrock's
``toolResult`` / ``toolUse`` as Strands records them, Anthropic's ``tool_result`` /
``tool_use``), Google ``parts``. A tool response without an id (Traceloop's events) takes the
id of the assistant's pending tool call in order, and its name from that call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from collector.decode import json_value
from collector.measure.measurement import without_surrogates

GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
"""Per-message events (span events or log records) of the GenAI conventions before 1.37."""

_OI = re.compile(r"^llm\.input_messages\.(\d{1,9})\.message\.(.+)$")
_TL = re.compile(r"^gen_ai\.prompt\.(\d{1,9})\.(.+)$")
_OI_CALL = re.compile(r"^tool_calls\.(\d{1,9})\.tool_call\.(id|function\.name)$")
_TL_CALL = re.compile(r"^tool_calls\.(\d{1,9})\.(id|name)$")
_JSON_MESSAGE_KEYS = ("ai.prompt.messages", "langfuse.observation.input", "mlflow.spanInputs",
                      "gcp.vertex.agent.llm_request")  # fmt: skip


@dataclass(frozen=True)
class ToolResponse:
    """One tool result in an LLM call's input."""

    call_id: str
    name: str | None
    text: str
    position: int
    """Its order among the tool responses of that input (0, 1, ...)."""


@dataclass
class _Conversation:
    """Messages read in order: tool calls asked for, and tool responses given."""

    names: dict[str, str]
    pending: list[str]
    responses: list[tuple[str | None, str | None, str | Callable[[], str]]]
    """(call id, name, text): the text, or how to make it (only for responses that are kept)."""

    def call(self, call_id: Any, name: Any) -> None:
        if call_id in (None, ""):
            return
        cid = _call_id(call_id)
        if name:
            self.names[cid] = _call_id(name)
        self.pending.append(cid)

    def text(self, index: int) -> str:
        """The text of the ``index``-th response."""
        text = self.responses[index][2]
        return text if isinstance(text, str) else text()

    def response(self, call_id: Any, name: Any, text: str | Callable[[], str]) -> None:
        cid = _call_id(call_id) if call_id not in (None, "") else None
        if cid is None and self.pending:
            cid = self.pending[0]  # the next call still waiting for its result
        if cid is not None and cid in self.pending:
            self.pending.remove(cid)
        self.responses.append((cid, _call_id(name) if name else None, text))


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # NaN is written as NaN; only a cycle or extreme depth get here
        return str(value)


def _call_id(value: Any) -> str:
    """A tool call id as the store can hold it (the tool span's id is cleaned the same way)."""
    return without_surrogates(str(value))[0]


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{", '"'):
        try:
            return json_value.loads(value)
        except (ValueError, RecursionError):
            return value
    return value


def _response_text(value: Any) -> str:
    """The text of a tool response value: content blocks joined (also when JSON-encoded in a
    string), the AI SDK's typed output's value, any other string as it is (a tool's JSON result
    is the very text the model read: its bytes and tokens are measured, not a re-encoding's),
    else JSON."""
    given = value
    if isinstance(value, str):
        # content blocks and typed outputs have a "type", "text" or "json" key: a JSON result
        # without one is the text itself, and is not parsed to find out
        if value[:2] not in ("[{", '{"') or ('"type"' not in value and '"json"' not in value and '"text"' not in value):
            return value
        value = _maybe_json(value)
    if isinstance(value, list) and value and all(isinstance(b, Mapping) for b in value):
        texts = []
        for block in value:
            if isinstance(block.get("text"), str) and block.get("type") in (None, "text"):
                texts.append(block["text"])
            elif "json" in block and len(block) == 1:
                texts.append(_text(block["json"]))
            else:
                return _text(given)
        return "\n".join(texts)
    if isinstance(value, Mapping) and value.get("type") in ("text", "error-text") and "value" in value:
        return _text(value["value"])  # the AI SDK's output
    if isinstance(value, Mapping) and value.get("type") in ("json", "error-json") and "value" in value:
        return json.dumps(value["value"], ensure_ascii=False, separators=(",", ":"))
    return _text(given)


def _blocks(conv: _Conversation, role: str | None, blocks: Iterable[Any]) -> list[str]:
    """Read content blocks or parts of any dialect; returns the plain text blocks."""
    texts: list[str] = []
    for b in blocks:
        if isinstance(b, str):
            texts.append(b)
            continue
        if not isinstance(b, Mapping):
            continue
        kind = b.get("type")
        # a response's text is made only if it is kept: every later model call of a run repeats it
        if kind == "tool_call_response":
            conv.response(b.get("id"), b.get("name"), partial(_response_text, b.get("response", b.get("result", ""))))
        elif kind == "tool_call":
            conv.call(b.get("id"), b.get("name"))
        elif kind == "tool-result":
            conv.response(b.get("toolCallId"), b.get("toolName"),
                          partial(_response_text, b.get("output", b.get("result"))))  # fmt: skip
        elif kind == "tool-call":
            conv.call(b.get("toolCallId"), b.get("toolName"))
        elif kind == "tool_result":
            conv.response(b.get("tool_use_id"), None, partial(_response_text, b.get("content", "")))
        elif kind == "tool_use":
            conv.call(b.get("id"), b.get("name"))
        elif isinstance(b.get("toolResult"), Mapping):
            r = b["toolResult"]
            conv.response(r.get("toolUseId"), None, partial(_response_text, r.get("content", "")))
        elif isinstance(b.get("toolUse"), Mapping):
            conv.call(b["toolUse"].get("toolUseId"), b["toolUse"].get("name"))
        elif isinstance(fr := b.get("function_response", b.get("functionResponse")), Mapping):
            conv.response(fr.get("id"), fr.get("name"), partial(_text, fr.get("response", "")))
        elif isinstance(fc := b.get("function_call", b.get("functionCall")), Mapping):
            conv.call(fc.get("id"), fc.get("name"))
        elif isinstance(b.get("text"), str) and kind in (None, "text"):
            texts.append(b["text"])
        elif kind == "text" and isinstance(b.get("content"), str):
            texts.append(b["content"])
    return texts


_BLOCK_KEYS = frozenset({"type", "toolResult", "toolUse", "function_response", "functionResponse", "function_call",
                         "functionCall", "text"})  # fmt: skip


_BLOCK_MARKERS = tuple(f'"{k}"' for k in (*_BLOCK_KEYS, "parts"))


def _may_be_blocks(text: str) -> bool:
    """Whether a message's string content may be JSON-encoded content blocks (or a Google
    Content), which are parsed to be read. A tool result carried as JSON text has none of their
    keys, and is not parsed: every later model call of a run repeats every result before it."""
    return text[:1] in ("[", "{") and any(marker in text for marker in _BLOCK_MARKERS)


def _looks_like_blocks(value: Any) -> bool:
    if isinstance(value, Mapping):
        return isinstance(value.get("parts"), list)
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(b, Mapping) and b.keys() & _BLOCK_KEYS and len(b) <= 6 for b in value)
    )


def _message(conv: _Conversation, m: Mapping[str, Any]) -> None:
    """One message of any dialect (OpenAI, GenAI parts, Anthropic, Google, AI SDK, Bedrock)."""
    role = m.get("role")
    for tc in m.get("tool_calls") or []:
        if isinstance(tc, Mapping):
            fn = tc.get("function")
            conv.call(tc.get("id"), (fn.get("name") if isinstance(fn, Mapping) else None) or tc.get("name"))
    content = given = m.get("content")
    if isinstance(given, str) and _may_be_blocks(given):
        parsed = _maybe_json(given)
        if _looks_like_blocks(parsed):  # else a tool result that is JSON: text the model read
            content = parsed
    parts = m.get("parts")
    if isinstance(content, Mapping) and isinstance(content.get("parts"), list):  # Google Content in a body
        role, parts, content = content.get("role", role), content["parts"], None
    texts: list[str] = []
    if isinstance(parts, list):
        texts += _blocks(conv, role, parts)
    if isinstance(content, list):
        texts += _blocks(conv, role, content)
    elif isinstance(content, str):
        texts.append(content)
    if role == "tool" and texts:
        call_id = m.get("tool_call_id", m.get("id"))
        conv.response(call_id, m.get("name"), "\n".join(texts) if len(texts) > 1 else texts[0])
    elif role == "tool" and content is None and not parts and (m.get("tool_call_id") or m.get("id")):
        conv.response(m.get("tool_call_id", m.get("id")), m.get("name"), "")


def _messages(conv: _Conversation, value: Any) -> None:
    value = _maybe_json(value)
    if isinstance(value, str):  # MLflow JSON-encodes the JSON once more
        value = _maybe_json(value)
    if isinstance(value, Mapping):
        for key in ("messages", "contents"):
            if isinstance(value.get(key), list):
                value = value[key]
                break
        else:
            return
    for m in value if isinstance(value, list) else []:
        if isinstance(m, Mapping):
            _message(conv, m)


def _flattened(conv: _Conversation, attrs: Mapping[str, Any], pattern: re.Pattern[str], prefix: str,
               call_pattern: re.Pattern[str]) -> bool:  # fmt: skip
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        m = pattern.match(key)
        if m:
            messages.setdefault(int(m.group(1)), {})[m.group(2)] = value
    for _, msg in sorted(messages.items()):
        calls: dict[int, dict[str, Any]] = {}
        for key, value in msg.items():
            c = call_pattern.match(key)
            if c:
                calls.setdefault(int(c.group(1)), {})[c.group(2)] = value
        for _, fields in sorted(calls.items()):
            conv.call(fields.get("id"), fields.get("function.name", fields.get("name")))
        if msg.get("role") == "tool":
            content = msg.get("content")
            if content is None:  # OpenInference's contents.{j}.message_content.text
                content = "".join(str(v) for k, v in sorted(msg.items()) if k.endswith("message_content.text"))
            conv.response(msg.get("tool_call_id"), msg.get("name"), _text(content))
    return bool(messages)


def _event_message(conv: _Conversation, name: str, attrs: Mapping[str, Any], body: Any) -> None:
    """A per-message event (span event or log record): fields in its attributes or its body."""
    fields: dict[str, Any] = dict(attrs)
    if isinstance(body, Mapping):
        fields.update(body)
    elif body is not None and "content" not in fields:
        fields["content"] = body
    fields.setdefault("role", MESSAGE_EVENTS[name])
    if name == "gen_ai.tool.message":
        fields["role"] = "tool"
    _message(conv, fields)


def read_events(conv: _Conversation, events: Iterable[tuple[str, Mapping[str, Any], Any]]) -> None:
    for name, attrs, body in events:
        if name in MESSAGE_EVENTS:
            _event_message(conv, name, attrs, body)
        elif name == OPERATION_DETAILS and attrs.get(GEN_AI_INPUT_MESSAGES) is not None:
            _messages(conv, attrs[GEN_AI_INPUT_MESSAGES])


def read_output(conv: _Conversation, value: Any) -> None:
    """Output messages (``gen_ai.output.messages``): tool responses in them are a tool's result."""
    _messages(conv, value)


def _unique(conv: _Conversation, names: dict[str, str] | None, known: set[str] | None = None) -> list[ToolResponse]:
    """The conversation's responses, once per call id; ``names`` gets the names it asked for.
    Those of ``known`` call ids are left out (their text is not made), keeping the others'
    positions, and the call ids returned are added to ``known``."""
    if names is not None:
        names.update(conv.names)
    seen: set[str] = set()
    out: list[ToolResponse] = []
    for i, (call_id, name, _) in enumerate(conv.responses):
        if call_id is None or call_id in seen:  # the first time the model saw it
            continue
        position = len(seen)
        seen.add(call_id)
        if known is not None:
            if call_id in known:
                continue
            known.add(call_id)
        out.append(ToolResponse(call_id, name or conv.names.get(call_id), conv.text(i), position))
    return out


def new_conversation() -> _Conversation:
    return _Conversation({}, [], [])


def tool_responses(
    attrs: Mapping[str, Any], events: Iterable[tuple[str, Mapping[str, Any], Any]] = (),
    names: dict[str, str] | None = None, known: set[str] | None = None,
) -> list[ToolResponse]:  # fmt: skip
    """Each tool response in an LLM call's input (attributes first, then its events), once per call id.

    ``names``, when given, gets the name of every tool call the input's messages asked for, by
    call id (responses that arrive elsewhere can be named from it). Responses to the ``known``
    call ids (read already from an earlier call of the same run) are left out, and their text
    is not made: each model call repeats the run's responses so far; the call ids returned are
    added to ``known``.
    """
    conv = new_conversation()
    if attrs.get(GEN_AI_INPUT_MESSAGES) is not None:
        _messages(conv, attrs[GEN_AI_INPUT_MESSAGES])
    elif not _flattened(conv, attrs, _OI, "llm.input_messages.", _OI_CALL) and not _flattened(
        conv, attrs, _TL, "gen_ai.prompt.", _TL_CALL
    ):
        for key in _JSON_MESSAGE_KEYS:
            if attrs.get(key) is not None:
                _messages(conv, attrs[key])
                if conv.responses:
                    break
    if not conv.responses:
        read_events(conv, events)
    return _unique(conv, names, known)


def responses_from_logs(
    logs: Iterable[tuple[str, Mapping[str, Any], Any]], names: dict[str, str] | None = None
) -> list[ToolResponse]:
    """Tool responses in one LLM call's input given as log records (in the order they were emitted);
    ``names`` as for :func:`tool_responses`."""
    conv = new_conversation()
    read_events(conv, logs)
    return _unique(conv, names)
