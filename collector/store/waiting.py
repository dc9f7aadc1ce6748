"""Waiting for a DuckDB file that another process, or another thread of this one, holds.

DuckDB lets one process hold a database file for writing, and while it does no other can open
it, not even read-only; in one process, a file attached for writing and for reading conflict
too. Every opener retries while the file is held (:func:`retry_locked`), and a thread reading
in a series lets a waiting one in between its reads (:func:`let_waiting_in`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import duckdb

from collector.errors import StoreError

LOCK_RETRY_SECONDS = 30.0
"""How long a writer or reader waits for another process to release the file."""
LOCK_RETRY_MAX_PAUSE_S = 0.05
"""The longest pause between two tries of a locked file (from 10 ms, doubling). A try costs
~0.25 ms of CPU here, so waiting out a writer costs at most ~0.5 % of a core; a read gets in
within 50 ms of the writer letting go (with 250 ms, in one-off timelines of ``bench_peers.py``'s
workload, its last write became queryable 0.01-0.22 s after the writer let go)."""


class WriteAbandoned(StoreError):
    """A retry (a locked file, a failed lake commit) was given up because shutdown was asked for.

    Nothing of the batch is stored. A receiver still has it in its spool and writes it at
    its next start, so shutting down does not wait out a lock or a catalog outage.
    """


def pause(delay: float, stop: threading.Event | None, waiting_for: str) -> None:
    """Sleep ``delay`` seconds before a retry, or raise :class:`WriteAbandoned` once ``stop`` is set.

    ``waiting_for`` says what the retry waits for, for the message.
    """
    if stop is None:
        time.sleep(delay)
        return
    if stop.wait(delay):
        raise WriteAbandoned(
            f"store write abandoned at shutdown while waiting for {waiting_for}; nothing of the batch "
            "was stored (a receiver keeps it in its spool and writes it at its next start)"
        )


def is_lock_error(e: Exception) -> bool:
    text = str(e)
    # the last: this process has the file open already, through another connection (a writer
    # attaches it with its own row-group size, so it never shares DuckDB's instance cache); it
    # is waited out like another process's lock
    return "Could not set lock" in text or "Conflicting lock" in text or "Unique file handle conflict" in text


_waiting: collections.Counter[str] = collections.Counter()
"""Threads of this process waiting for a file another of its threads holds, by path."""
_waiting_lock = threading.Lock()


def retry_locked(
    path: str, open_: Callable[[], duckdb.DuckDBPyConnection], wait_s: float, stop: threading.Event | None
) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait_s
    delay, waiting = 0.01, 0
    try:
        while True:
            try:
                return open_()
            except duckdb.Error as e:
                if not is_lock_error(e):
                    raise StoreError(f"cannot open the toolmeter store {path}: {e}") from e
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"the toolmeter store {path} stayed locked by another process for {wait_s:.0f} s. "
                        "Only one process may hold a DuckDB file at a time: stop the process that keeps it open "
                        "(a DuckDB shell or notebook), or give this one another --db."
                    ) from e
                waiting = waiting or _count_waiting(path, 1)
                pause(delay, stop, f"another process to release {path}")
                delay = min(delay * 2, LOCK_RETRY_MAX_PAUSE_S)
    finally:
        _count_waiting(path, -waiting)


def _count_waiting(path: str, n: int) -> int:
    with _waiting_lock:
        _waiting[path] += n
    return n


def waiting_for(path: str) -> bool:
    """Whether a thread of this process waits for the file ``path``."""
    return _waiting[path] > 0


def let_waiting_in(path: str) -> None:
    """Between two reads of a series, let in a thread of this process waiting for the file (``serve``'s
    writer, while alert rules are evaluated): back-to-back reads would seldom leave it a moment to get
    in between its tries. Returns at once when none waits, else after two of its tries at most."""
    deadline = time.monotonic() + 2 * LOCK_RETRY_MAX_PAUSE_S + 0.01
    while _waiting[path] > 0 and time.monotonic() < deadline:
        time.sleep(0.005)
