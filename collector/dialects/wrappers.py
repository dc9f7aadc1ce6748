"""Framework envelopes around a tool's result, removed so that raw is what the tool returned.

Frameworks record a tool's result inside their own message types: LangChain serialises the
whole ToolMessage (two ways), Strands and MCP wrap text in content blocks, ADK wraps a
non-dict return in ``{"result": ...}``, and the AI SDK and MLflow JSON-encode strings. Measured
as given, a 12-token result reads as 60 and the schema fingerprint is the wrapper's.

:func:`unwrap` takes a result attribute's value and returns the text the tool returned, the
kind of envelope it came in (stored as ``raw_wrapper``, its overhead as ``wrapper_bytes`` and
``wrapper_tokens``), and a call id found inside it. A value that looks like an envelope but
cannot be opened is measured as given, with a problem naming the envelope.

Forms read (each as its owner emits it):

* ``langchain_message``: ``{"type": "tool", "data": {"content": ..., "tool_call_id": ...}}``
  (LangChain's ``message_to_dict``; OpenInference's ``output.value``);
* ``langchain_constructor``: ``{"lc": 1, "type": "constructor", "id": [..., "ToolMessage"],
  "kwargs": {"content": ..., "tool_call_id": ...}}`` (LangChain's ``dumpd``; Traceloop's
  output, itself under ``{"output": ...}``);
* ``content_blocks``: ``[{"type": "text", "text": ...}, ...]`` or ``[{"text": ...}]``;
* ``mcp_call_tool_result``: ``{"content": [blocks], "structuredContent": ..., "isError": ...}``;
  the text blocks are what the model reads; ``structuredContent`` is measured only when there
  is no text (it repeats the text otherwise), so nothing is counted twice;
* ``strands_tool_result``: ``{"toolUseId": ..., "status": ..., "content": [{"text": ...} |
  {"json": ...}]}``;
* ``adk_function_response``: ``{"result": ...}`` on ADK's ``gcp.vertex.agent.tool_response``;
* ``llamaindex_tool_output``: ``{"blocks": [{"text": ...}], "tool_name": ..., "raw_input": ...,
  "raw_output": ..., "is_error": ...}`` (OpenInference's ``output.value`` for LlamaIndex tools);
* ``json_string``: a result that is the JSON encoding of a string (``"\\"hello\\""``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collector.decode import json_value

ADK_TOOL_RESPONSE = "gcp.vertex.agent.tool_response"

_ENVELOPE_START = re.compile(
    r'\s*(\{\s*"(lc|type|data|output|outputs|content|toolUseId|status|structuredContent|isError|_meta|result|blocks)"'
    r'|\[\s*\{\s*"(type|text|json)")'
)
"""How an envelope's JSON begins (its first key, in the order its owner serialises): only such a
value is parsed here, so a 92 KB list of rows (``[{"order_id": ...``) is not parsed twice."""
_SNIFF = 512
_TEXT_BLOCK_KEYS = frozenset({"type", "text", "annotations", "_meta", "citations", "cache_control"})
"""Keys a text content block may have (MCP, Anthropic, Strands); a row with a ``text`` field and
others is data, not a block."""
MAX_UNWRAP_CHARS = 64 * 1024 * 1024
"""Larger values are measured as given (parsing them twice would cost more than it tells)."""


@dataclass(slots=True)
class Unwrapped:
    """A result with its envelope removed."""

    text: str | bytes
    """What the tool returned (the value as given when there was no envelope)."""
    wrapper: str | None = None
    """The envelope's kind, or None."""
    call_id: str | None = None
    """A tool call id the envelope carried (LangChain's ``tool_call_id``, Strands' ``toolUseId``)."""
    problem: str | None = None
    """Why a value that looks like an envelope was measured as given."""


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _blocks_text(blocks: list[Any]) -> tuple[str | None, str | None]:
    """The text of a content-block list, or (None, why) when it is not one."""
    if not blocks:
        return None, None
    texts: list[str] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            return None, None
        kind = block.get("type")
        if isinstance(block.get("text"), str) and kind in (None, "text") and block.keys() <= _TEXT_BLOCK_KEYS:
            texts.append(block["text"])
        elif kind is None and "json" in block and len(block) == 1:  # Strands' {"json": {...}}
            texts.append(_as_text(block["json"]))
        elif isinstance(kind, str) and kind != "text":
            return None, f"content blocks of type {kind!r} (not text)"
        else:
            return None, None
    return "\n".join(texts), None


def _content(value: Any) -> tuple[str | None, str | None]:
    """A message's ``content``: a string, or content blocks joined."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        return _blocks_text(value)
    return None, None


def _open(value: Any, key: str | None, depth: int = 0) -> tuple[str | None, str | None, str | None, str | None]:
    """(text, wrapper, call id, problem) for a decoded JSON value."""
    if isinstance(value, list):
        text, problem = _blocks_text(value)
        if text is not None:
            return text, "content_blocks", None, None
        return None, None, None, (f"{problem}: measured as given" if problem else None)
    if not isinstance(value, Mapping):
        return None, None, None, None
    if value.get("lc") == 1 and value.get("type") == "constructor":
        ident = value.get("id")
        kwargs = value.get("kwargs")
        if isinstance(ident, list) and ident and ident[-1] == "ToolMessage" and isinstance(kwargs, Mapping):
            text, problem = _content(kwargs.get("content"))
            if text is not None:
                return text, "langchain_constructor", _id(kwargs.get("tool_call_id")), None
            return None, None, None, f"LangChain ToolMessage whose content is not text ({problem or 'no content'})"
        return None, None, None, None
    data = value.get("data")
    if value.get("type") == "tool" and isinstance(data, Mapping) and "content" in data:
        text, problem = _content(data.get("content"))
        if text is not None:
            return text, "langchain_message", _id(data.get("tool_call_id")), None
        return None, None, None, f"LangChain ToolMessage whose content is not text ({problem or 'no content'})"
    blocks = value.get("content")
    if isinstance(blocks, list) and "toolUseId" in value:
        text, problem = _blocks_text(blocks)
        if text is not None:
            return text, "strands_tool_result", _id(value.get("toolUseId")), None
        return None, None, None, f"Strands tool result with {problem or 'no text content'}"
    if isinstance(blocks, list) and ("isError" in value or "structuredContent" in value or "_meta" in value):
        text, problem = _blocks_text(blocks)
        if text is not None:
            return text, "mcp_call_tool_result", None, None
        if not blocks and value.get("structuredContent") is not None:
            return _as_text(value["structuredContent"]), "mcp_call_tool_result", None, None
        return None, None, None, f"MCP CallToolResult with {problem or 'no text content'}"
    if isinstance(value.get("blocks"), list) and "raw_output" in value and "tool_name" in value:
        text, problem = _blocks_text(value["blocks"])  # LlamaIndex's ToolOutput: the blocks are its content
        if text is not None:
            return text, "llamaindex_tool_output", None, None
        return None, None, None, f"LlamaIndex ToolOutput with {problem or 'no text blocks'}"
    if key == ADK_TOOL_RESPONSE and set(value) == {"result"}:
        return _as_text(value["result"]), "adk_function_response", None, None
    if depth == 0:
        # Traceloop's {"output": <ToolMessage>, "kwargs": {...}}; any single "output" key
        inner_key = "output" if "output" in value else "outputs" if "outputs" in value else None
        inner = value.get(inner_key) if inner_key else None
        if isinstance(inner, (Mapping, list)):
            text, wrapper, call_id, problem = _open(inner, key, depth + 1)
            if text is not None and (len(value) == 1 or (wrapper or "").startswith("langchain")):
                return text, wrapper, call_id, None
            return None, None, None, problem if len(value) == 1 else None
    return None, None, None, None


def _id(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def unwrap(value: Any, key: str | None = None, json_strings: bool = True) -> Unwrapped:
    """Remove a framework's envelope from a result attribute's value (see the module doc).

    ``value`` is the attribute as decoded from OTLP (a string, or a structured value);
    ``key`` the attribute it came from (some envelopes belong to one key). ``json_strings``
    False keeps a JSON string literal as given: for keys whose owners record a string result
    as it is (Langfuse, Pydantic AI, OpenInference's ``text/plain``), a tool that returned
    ``"quoted"`` returned the quotes too.
    """
    if isinstance(value, bytes):
        return Unwrapped(value)
    if not isinstance(value, str):
        text, wrapper, call_id, problem = _open(value, key)
        if text is not None:
            return Unwrapped(text, wrapper, call_id)
        return Unwrapped(_as_text(value), problem=problem)
    if len(value) > MAX_UNWRAP_CHARS:
        return Unwrapped(value)
    head = value[:_SNIFF].lstrip()
    first = head[:1]
    if first == '"':
        if not json_strings:
            return Unwrapped(value)
        try:
            decoded = json_value.loads(value)
        except (ValueError, RecursionError):
            return Unwrapped(value)
        if isinstance(decoded, str):
            return Unwrapped(decoded, "json_string")
        return Unwrapped(value)
    if first not in ("{", "[") or not _ENVELOPE_START.match(head):
        return Unwrapped(value)
    try:
        parsed = json_value.loads(value)
    except (ValueError, RecursionError):
        return Unwrapped(value)
    text, wrapper, call_id, problem = _open(parsed, key)
    if text is not None:
        return Unwrapped(text, wrapper, call_id)
    return Unwrapped(value, problem=problem)
