"""Which tool response in the model's input belongs to which tool call, when no call id says so.

Many tool spans carry no call id (the OpenAI Agents SDK and LlamaIndex through OpenInference,
OpenLLMetry's event mode, smolagents, Langfuse, MLflow); the model's next input does. A call
and a response are matched within one trace by the conversation: the response is in the first
LLM call that started after the tool call ended, it is for a tool of the same name, calls and
responses of one name pair up in order (a call started earlier answers earlier), and the
content confirms it: the response is the raw result, a part of it, or the raw inside an
envelope. Never on a guess: with no raw to compare, a match is made only when exactly one
call and one response of that name meet in that LLM call (``order``); otherwise no view is
joined and the call says why.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

PROBE = 64
"""Bytes of one side looked up in the other to confirm that a response is a call's result."""


@dataclass(frozen=True)
class Call:
    """A tool call without a call id."""

    key: Any
    trace_id: str
    name: str
    start_ns: int
    end_ns: int
    raw: str | bytes | None
    """The raw result (as stored, or as received: not copied), or None when the span carried none."""


@dataclass(frozen=True)
class Offered:
    """A tool response in an LLM call's input."""

    trace_id: str
    call_id: str
    name: str | None
    llm_start_ns: int
    position: int
    text: str | bytes


def confirms(raw: str | bytes, view: str | bytes) -> bool:
    """Whether ``view`` is ``raw``, a part of it, or ``raw`` inside an envelope."""
    if isinstance(raw, bytes) and isinstance(view, str):
        view = view.encode("utf-8", errors="surrogatepass")
    elif isinstance(raw, str) and isinstance(view, bytes):
        view = view.decode("utf-8", errors="replace")
    if not raw or not view:
        return raw == view
    if raw == view:
        return True
    probe = view.strip()[:PROBE]
    if len(probe) >= min(16, len(raw)) and probe in raw:  # type: ignore[operator]
        return True
    head = raw[:4096].strip()[:PROBE]
    return len(head) >= min(16, len(view)) and head in view  # type: ignore[operator]


def match(calls: list[Call], offered: list[Offered]) -> dict[Any, tuple[Offered, str]]:
    """Pair id-less calls with responses: ``{call key: (response, "order_content" | "order")}``."""
    out: dict[Any, tuple[Offered, str]] = {}
    by_trace: dict[str, list[Offered]] = defaultdict(list)
    for o in offered:
        by_trace[o.trace_id].append(o)
    taken: set[tuple[str, str]] = set()
    for call in sorted(calls, key=lambda c: (c.trace_id, c.start_ns, c.end_ns)):
        later = [o for o in by_trace.get(call.trace_id, ()) if o.llm_start_ns >= call.end_ns]
        if not later:
            continue
        first = min(o.llm_start_ns for o in later)
        here = sorted((o for o in later if o.llm_start_ns == first), key=lambda o: o.position)
        same = [o for o in here if o.name == call.name and (o.trace_id, o.call_id) not in taken]
        unnamed = [o for o in here if o.name is None and (o.trace_id, o.call_id) not in taken]
        if call.raw is not None:
            chosen = next((o for o in same + unnamed if confirms(call.raw, o.text)), None)
            if chosen is not None:
                out[call.key] = (chosen, "order_content")
                taken.add((chosen.trace_id, chosen.call_id))
            continue
        rivals = [c for c in calls if c.trace_id == call.trace_id and c.name == call.name and c.end_ns <= first]
        if len(same) == 1 and len([o for o in here if o.name == call.name]) == 1 and len(rivals) == 1:
            out[call.key] = (same[0], "order")
            taken.add((same[0].trace_id, same[0].call_id))
    return out
