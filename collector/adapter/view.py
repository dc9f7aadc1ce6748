"""What one shaping produced, and the exact token count every budget is held to."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from collector.measure.tokens import TokenCounter

_counter: TokenCounter | None = None
_counter_lock = threading.Lock()


def counter() -> TokenCounter:
    """The collector's exact counter (quicktok when installed, else tiktoken), loaded once."""
    global _counter
    with _counter_lock:
        if _counter is None:
            _counter = TokenCounter()
        return _counter


def tokens(text: str) -> int:
    return counter().count(text).tokens


def render(value: Any) -> str:
    """The JSON the model is shown: compact (spaces cost tokens), non-ASCII as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass
class View:
    """The model-facing text of one result and what it declares about the raw one.

    ``spans`` are character spans of the raw text the view keeps (turned into the byte
    ranges recorded on the span); ``items`` are the indices (in the tool's order) of the
    list items shown.
    """

    text: str
    truncated: bool
    spans: list[tuple[int, int]]
    envelope: dict[str, Any] | None = None
    items_total: int | None = None
    items: list[int] = field(default_factory=list)
    handle: str | None = None
