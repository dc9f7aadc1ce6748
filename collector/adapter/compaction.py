"""Compacting old tool results in a conversation: one-line stubs that keep the summary and the handle.

Bounding each result stops the spike; it does not stop twenty bounded results from filling
the window. :func:`compact` replaces, deterministically:

* a result superseded by a later call of the same tool with the same arguments (whatever
  its age): only the latest is meaningful;
* a result more than ``keep_last`` steps old (a step is one assistant turn) with a stub that
  keeps what the envelope said (total, summary figures) and its handle, so it can be re-read;
* an error result only after ``keep_errors_last`` steps (errors are why the agent does what it
  does now: evicting them invites a retry of what already failed).

A result whose call id or handle is in ``pins`` is never replaced. Both message formats are
read: OpenAI chat (``role: tool`` messages, ``tool_calls`` on the assistant's) and Anthropic
(``tool_result`` and ``tool_use`` blocks). Each replacement is returned and logged.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from collector.adapter.view import tokens

logger = logging.getLogger("toolmeter")

_ERROR_WORDS = ("error", "exception", "traceback", "failed", "denied", "not found", "timed out")


@dataclass(frozen=True)
class Replacement:
    """One result :func:`compact` replaced."""

    call_id: str
    tool: str
    step: int
    reason: str
    """``superseded``, ``aged`` or ``aged_error``."""
    tokens_before: int
    tokens_after: int


@dataclass
class _Result:
    index: int
    block: int | None  # the block of an Anthropic message, None for an OpenAI tool message
    call_id: str
    text: str
    step: int
    tool: str = "tool"
    arguments: str = ""
    error: bool = False


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def _calls_and_results(history: list[dict[str, Any]]) -> list[_Result]:
    calls: dict[str, tuple[str, str]] = {}
    results: list[_Result] = []
    step = 0
    for i, message in enumerate(history):
        role = message.get("role")
        content = message.get("content")
        if role == "assistant":
            step += 1
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                calls[call.get("id", "")] = (function.get("name", "tool"), _canonical(function.get("arguments")))
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls[block.get("id", "")] = (block.get("name", "tool"), _canonical(block.get("input")))
        elif role == "tool":
            results.append(_Result(i, None, str(message.get("tool_call_id", "")), _text(content), step))
        elif role == "user" and isinstance(content, list):
            for j, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results.append(_Result(i, j, str(block.get("tool_use_id", "")), _text(block.get("content")), step,
                                           error=bool(block.get("is_error"))))  # fmt: skip
    for r in results:
        r.tool, r.arguments = calls.get(r.call_id, ("tool", ""))
        r.error = r.error or _looks_like_error(r.text)
    return results


def _canonical(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return str(arguments)
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


def _looks_like_error(text: str) -> bool:
    head = text[:300].lower()
    return any(w in head for w in _ERROR_WORDS) and len(text) < 20_000


def stub(result_text: str, tool: str, arguments: str, step: int) -> str:
    """The one line that stands for an old result: what its envelope said, and its handle."""
    call = f"{tool}({_short(arguments)})"
    try:
        envelope = json.loads(result_text)
    except ValueError:
        envelope = None
    facts: list[str] = []
    handle = None
    if isinstance(envelope, dict):
        handle = envelope.get("handle")
        if isinstance(envelope.get("total"), int):
            facts.append(f"{envelope['total']:,} items")
        for name, figures in (envelope.get("summary") or {}).items():
            if isinstance(figures, dict) and "counts" in figures:
                facts.append(f"{name} " + ", ".join(f"{k} {v}" for k, v in list(figures["counts"].items())[:4]))
            elif isinstance(figures, dict) and "sum" in figures:
                facts.append(f"{name} sum {figures['sum']:g}, max {figures['max']:g}")
    if not facts:
        facts.append(f"{len(result_text.encode()):,} bytes")
    where = (f"handle {handle}; read_result(handle='{handle}') re-reads it" if handle
             else "not kept: call the tool again if it is needed")  # fmt: skip
    return f"[compacted: {call} at step {step}: {'; '.join(facts)}; {where}]"


def _short(arguments: str) -> str:
    return arguments if len(arguments) <= 80 else arguments[:77] + "..."


def compact(
    history: list[dict[str, Any]],
    keep_last: int = 3,
    pins: Iterable[str] = (),
    keep_errors_last: int | None = None,
) -> tuple[list[dict[str, Any]], list[Replacement]]:
    """A copy of ``history`` with old and superseded tool results replaced by stubs, and what was replaced.

    Args:
        history: the conversation (OpenAI chat or Anthropic messages); not changed.
        keep_last: results of the last ``keep_last`` steps stay whole.
        pins: call ids or handles of results never replaced.
        keep_errors_last: steps an error result stays whole (default: twice ``keep_last``).
    """
    keep_errors = keep_last * 2 if keep_errors_last is None else keep_errors_last
    pinned = set(pins)
    results = _calls_and_results(history)
    steps = max((r.step for r in results), default=0)
    steps = max(steps, sum(1 for m in history if m.get("role") == "assistant"))
    latest: dict[tuple[str, str], int] = {}
    for r in results:
        latest[(r.tool, r.arguments)] = r.index * 1000 + (r.block or 0)
    out = copy.deepcopy(history)
    done: list[Replacement] = []
    for r in results:
        if r.call_id in pinned or any(p in r.text for p in pinned if p.startswith("tmh_")):
            continue
        age = steps - r.step
        if latest[(r.tool, r.arguments)] != r.index * 1000 + (r.block or 0) and r.arguments:
            reason, text = "superseded", f"[superseded: {r.tool}({_short(r.arguments)}) was called again later]"
        elif age >= (keep_errors if r.error else keep_last) and not r.text.startswith("[compacted"):
            reason, text = ("aged_error" if r.error else "aged"), stub(r.text, r.tool, r.arguments, r.step)
        else:
            continue
        before, after = tokens(r.text), tokens(text)
        if after >= before:
            continue  # a stub longer than the result saves nothing
        if r.block is None:
            out[r.index]["content"] = text
        else:
            out[r.index]["content"][r.block]["content"] = text
        done.append(Replacement(r.call_id, r.tool, r.step, reason, before, after))
        logger.info("toolmeter: compacted %s (call %s, step %d, %s): %d -> %d tokens",
                    r.tool, r.call_id, r.step, reason, before, after)  # fmt: skip
    return out, done
