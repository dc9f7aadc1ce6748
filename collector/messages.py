"""Tool responses as the model saw them, read from an LLM span's input messages.

A tool span carries what the tool produced; the next LLM call's input messages carry what
the model was actually shown for the same tool call id. Joining the two gives the view
(and so truncation and retained ranges) for unmodified agents. Read here:

* OpenTelemetry GenAI: ``gen_ai.input.messages``, a JSON list of ``{role, parts}`` whose
  parts of ``type: "tool_call_response"`` carry ``id`` and ``response``;
* OpenInference: ``llm.input_messages.{i}.message.role = "tool"`` with
  ``.message.tool_call_id`` and ``.message.content``;
* Traceloop: ``gen_ai.prompt.{i}.role = "tool"`` with ``.tool_call_id`` and ``.content``.

A response that is not a string is measured as its JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from collector.measure import without_surrogates

GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
_OI = re.compile(r"^llm\.input_messages\.(\d{1,9})\.message\.(role|tool_call_id|content)$")
_TL = re.compile(r"^gen_ai\.prompt\.(\d{1,9})\.(role|tool_call_id|content)$")


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


def _from_gen_ai(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return []
    out = []
    for message in value if isinstance(value, list) else []:
        if not isinstance(message, dict):
            continue
        parts = message.get("parts")
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict) and part.get("type") == "tool_call_response" and part.get("id"):
                out.append((_call_id(part["id"]), _text(part.get("response", part.get("result", "")))))
    return out


def _from_flattened(attrs: Mapping[str, Any], pattern: re.Pattern[str], prefix: str) -> list[tuple[str, str]]:
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        m = pattern.match(key)
        if m:
            messages.setdefault(int(m.group(1)), {})[m.group(2)] = value
    return [
        (_call_id(msg["tool_call_id"]), _text(msg.get("content", "")))
        for _, msg in sorted(messages.items())
        if msg.get("role") == "tool" and msg.get("tool_call_id")
    ]


def tool_responses(attrs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(tool call id, text the model was shown) for each tool response in the input messages."""
    found: list[tuple[str, str]] = []
    if GEN_AI_INPUT_MESSAGES in attrs:
        found += _from_gen_ai(attrs[GEN_AI_INPUT_MESSAGES])
    if not found:
        found += _from_flattened(attrs, _OI, "llm.input_messages.")
    if not found:
        found += _from_flattened(attrs, _TL, "gen_ai.prompt.")
    seen: set[str] = set()
    unique = []
    for call_id, text in found:
        if call_id not in seen:  # the first time the model saw it
            seen.add(call_id)
            unique.append((call_id, text))
    return unique
