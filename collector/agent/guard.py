"""The one guard for code that runs on the observed agent's thread.

``on_end``, :func:`collector.record_tool_result` and :func:`collector.measured_tool` run
inside the agent: a failure there must never become the agent's failure. Every such
``except`` block calls :func:`contain`, which logs the first failure of each kind at
warning (with its traceback) and later ones at debug, so a hot loop cannot flood the log.

With ``TOOLMETER_STRICT=1`` (toolmeter's own test suite sets it) :func:`contain` re-raises
instead, so a bug that would be swallowed in production fails the test that found it.
"""

from __future__ import annotations

import logging
import threading

from collector.config import strict

logger = logging.getLogger("toolmeter")

_seen: set[str] = set()
_seen_lock = threading.Lock()


def contain(where: str, consequence: str) -> None:
    """Call from an ``except`` block on the agent's thread: log once per ``where``, or re-raise
    the exception being handled when strict. ``consequence`` tells the user what happened instead."""
    if strict():
        raise
    with _seen_lock:
        first = where not in _seen
        _seen.add(where)
    if first:
        logger.warning("toolmeter: %s failed; %s (later failures of this kind are logged at debug)",
                       where, consequence, exc_info=True)  # fmt: skip
    else:
        logger.debug("toolmeter: %s failed; %s", where, consequence, exc_info=True)
