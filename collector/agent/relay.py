"""The forwarding helper: a child process that encodes spans as OTLP and sends them.

Building OTLP protobuf is Python work (one message object per attribute), and in the
agent's interpreter it competes with the agent for the GIL. So in forwarding mode the
processor reads each finished span into plain values as it ends, its worker thread puts a
batch of them in one list and writes it, serialised, to this helper's stdin
(:mod:`collector.agent.frames`); the
helper encodes them as the SDK's OTLP encoder would and POSTs them
(:class:`collector.agent.forward.Forwarder`: retries, bearer token, gzip off loopback).

The protocol on the pipes:

- agent to helper: frames of a header (the body's length and format, see
  :data:`collector.agent.frames.HEADER`) and a body, ``("spans", seq, resources, scopes, spans)``
  or ``("flush", seq)`` as MessagePack (marshal for what MessagePack cannot carry);
- helper to agent: one line per frame, ``sent SEQ N``, ``failed SEQ N`` or ``flushed SEQ``.

Lifetime: the helper ends when its stdin closes (the processor shut down, or the agent's
process died: the pipe closes with it), after sending what it holds; it ignores Ctrl+C,
which reaches the whole process group, so an interrupted agent's last spans still go out
while the agent shuts down. The receiver's token travels in the environment, not in the
command line that ``ps`` shows. The helper runs at a lower CPU priority than the agent
(:data:`HELPER_NICENESS`).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, Final

from collector.agent.frames import HEADER, encode, flatten, frame, span_count, unframe
from collector.config import RELAY_ENDPOINT_ENV, RELAY_TOKEN_ENV

logger = logging.getLogger("toolmeter")

HELPER_NICENESS: Final = 19
"""How much lower than the agent the helper's CPU priority is (``nice``). The lowest: where the
two share a busy core, Linux's scheduler gives a nice-19 process about 1.5 % of it against a
nice-0 agent (weights 15 and 1024), where nice 10 took about 10 % (110)."""
PIPE_BYTES: Final = 1 << 20
"""The pipe's buffer (Linux's default ceiling for an unprivileged process)."""
OUTBOX_BYTES: Final = 64 << 20
"""Marshalled frames waiting for the pipe, at most (about 50,000 spans of 1 KB results)."""


@dataclass
class _Helper:
    """One helper process and what it was handed and has answered for."""

    proc: subprocess.Popen[bytes]
    handed: int = 0
    answered: int = 0
    last_seq: int = 0
    """The last frame written to it: a flush asked up to there is lost if it dies."""


class Relay:
    """The agent's end: starts the helper on first use and hands it batches.

    ``send`` runs on the processor's worker thread. It flattens and serialises the batch there and
    puts the frame in an outbox that a writer thread empties into the pipe: the batch's spans are
    then released at once, while a slow helper catches up from compact bytes the garbage
    collector never walks (held as spans, a burst of 10,000 costs the agent's every later
    allocation). The outbox holds :data:`OUTBOX_BYTES` at most; when full, ``send`` waits, the
    worker with it (not the agent's thread), and the processor's queue then fills and counts
    drops, as when a receiver is slow. Spans handed to a helper that dies before answering
    for them, or that no helper could be started for, are counted as failed.
    """

    def __init__(self, endpoint: str, token: str | None = None) -> None:
        self.endpoint = endpoint
        self.token = token
        self.sent = 0
        self.failed = 0
        self.exits: list[int] = []
        """Exit codes of helpers that ended with spans unanswered for, or not cleanly."""
        self._helper: _Helper | None = None
        self._pid = os.getpid()
        self._seq = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        """Notified on every change below: an answer, a frame written or put, a helper's end."""
        self._outbox: collections.deque[tuple[int, tuple[bytes, bytes], int]] = collections.deque()
        self._outbox_bytes = 0
        self._flushed = 0
        """The last flush frame a helper answered for."""
        self._lost = 0
        """Frames up to this one will never be answered for (their helper died, or none started)."""
        self._broken: OSError | None = None
        self._stopping = False
        self._writer: threading.Thread | None = None
        self._putting = threading.Lock()
        """Frames enter the outbox in the order of their numbers: the worker sends while
        force_flush (any thread) asks."""
        self._starting = threading.Lock()

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
        env = dict(os.environ, **{RELAY_ENDPOINT_ENV: self.endpoint})
        env.pop(RELAY_TOKEN_ENV, None)
        if self.token:
            env[RELAY_TOKEN_ENV] = self.token
        # the helper imports this package from where the agent found it, whatever its sys.path;
        # -P: not from the working directory, which -c puts first (a project's own "collector")
        home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (home, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen(
            [sys.executable, "-P", "-c", "import sys; from collector.agent.relay import run_helper; sys.exit(run_helper())"],
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
                        self._flushed = max(self._flushed, int(rest))
                    self._changed.notify_all()
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
            self._lost = max(self._lost, helper.last_seq)
            self._changed.notify_all()

    def _put(self, kind: str, body: tuple[Any, ...], spans: int = 0) -> int:
        """Number, serialise and queue one frame; its number. Raises OSError when no helper can run."""
        if self._broken is not None:
            raise self._broken
        if self._helper is None:
            with self._starting:
                self._start()  # the first one here: an interpreter that cannot start one says so now
        with self._putting:
            seq = self._seq = self._seq + 1
            parts = frame((kind, seq, *body))
            size = len(parts[1])
            with self._lock:
                # a frame waits for room; one alone always fits, and a flush never waits
                self._changed.wait_for(lambda: not self._outbox or not spans or self._stopping
                                       or self._outbox_bytes + size <= OUTBOX_BYTES)  # fmt: skip
                self._outbox.append((seq, parts, spans))
                self._outbox_bytes += size
                self._changed.notify_all()
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_out, name="toolmeter-relay-writer", daemon=True)
                self._writer.start()
        return seq

    def _write_out(self) -> None:
        """The writer thread: frames from the outbox into the helper's pipe, in order."""
        while True:
            with self._lock:
                self._changed.wait_for(lambda: self._outbox or self._stopping)
                if not self._outbox or (self._stopping and self._broken is not None):
                    return
                seq, parts, spans = self._outbox[0]
                broken = self._broken
            if broken is None:
                try:
                    self._write_frame(parts, spans, seq)
                except OSError as e:
                    logger.warning("toolmeter: %s; spans handed to it are counted as failed", e)
                    broken = e
            with self._lock:
                if self._outbox and self._outbox[0][0] == seq:  # abandon() may have emptied it meanwhile
                    self._outbox.popleft()
                    self._outbox_bytes -= len(parts[1])
                if broken is not None:  # no helper runs: this frame and every later one are lost
                    self._broken = broken
                    self.failed += spans
                    self._lost = max(self._lost, seq)
                self._changed.notify_all()

    def _write_frame(self, parts: tuple[bytes, bytes], spans: int, seq: int) -> None:
        for attempt in (1, 2):  # a helper that died is started again, once
            with self._starting:
                helper = self._helper
                if self._stopping and (helper is None or helper.proc.poll() is not None):
                    raise OSError("the forwarding helper was closed")  # closing: none is started again
                helper = self._start()
            stdin = helper.proc.stdin
            assert stdin is not None
            with self._lock:
                helper.handed += spans
                helper.last_seq = seq  # before the write: if it dies meanwhile, a flush of seq is lost
            try:
                for part in parts:
                    stdin.write(part)
                stdin.flush()
                return
            except (ValueError, OSError) as e:  # BrokenPipeError is an OSError
                with self._lock:
                    helper.handed -= spans  # never reached it: counted by the caller
                if attempt == 2:
                    raise OSError(f"the forwarding helper stopped (exit {helper.proc.poll()}): {e}") from e

    def send(self, records: Iterable[tuple[Any, ...]]) -> None:
        """Hand spans, as :func:`collector.agent.frames.record` made them, to the helper (raises
        OSError when it cannot be started or keeps dying)."""
        resources, scopes, flat = flatten(records)
        self._put("spans", (resources, scopes, flat), span_count(flat))

    def flush(self, timeout_s: float) -> bool:
        """Wait until the helper has answered for everything handed to it so far."""
        if self._helper is None and self._writer is None:
            return True
        try:
            seq = self._put("flush", ())
        except OSError:
            return False
        with self._lock:
            return self._changed.wait_for(lambda: self._flushed >= seq or self._lost >= seq, timeout_s) and (
                self._flushed >= seq
            )

    def abandon(self) -> None:
        """Let go of the helper without waiting: close this process's ends of its pipes (in a
        forked child, where the parent still owns the helper and its writer thread is gone; or
        after the helper failed). Takes no lock: a forked child may hold them copied held."""
        helper, self._helper = self._helper, None
        self._stopping = True
        self._outbox = collections.deque()
        if os.getpid() == self._pid and self._writer is not None:
            with self._lock:  # this process's writer: it ends
                self._changed.notify_all()
        if helper is not None:
            for pipe in (helper.proc.stdin, helper.proc.stdout):
                with contextlib.suppress(OSError, ValueError):
                    if pipe is not None:
                        pipe.close()

    def close(self, timeout_s: float) -> None:
        """Write out the outbox, close the helper's stdin and wait for it to send what it holds
        (killed after ``timeout_s``; what it could not take is counted as failed)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            self._changed.wait_for(lambda: not self._outbox, timeout_s)
            self._stopping = True
            self._changed.notify_all()
        writer = self._writer
        if writer is not None:
            writer.join(max(0.0, deadline - time.monotonic()))
            if writer.is_alive():  # blocked on a pipe the helper stopped reading: ending it frees the write
                with self._starting:
                    helper = self._helper
                if helper is not None:
                    logger.warning("toolmeter: the forwarding helper did not take its input within %.0f s; "
                                   "stopping it", timeout_s)  # fmt: skip
                    helper.proc.kill()
                writer.join(5)
        with self._lock:
            left = sum(spans for _, _, spans in self._outbox)
            self._outbox.clear()
            self._outbox_bytes = 0
            self.failed += left
        with self._starting:
            helper, self._helper = self._helper, None
        if helper is None:
            return
        with contextlib.suppress(OSError, ValueError):
            assert helper.proc.stdin is not None
            helper.proc.stdin.close()
        try:
            helper.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("toolmeter: the forwarding helper did not finish within %.0f s; stopping it", timeout_s)
            helper.proc.kill()
            helper.proc.wait()
        # its answers are read to the end before counters are read
        with self._lock:
            self._changed.wait_for(lambda: helper.answered >= helper.handed, 5)


# --- the helper process ------------------------------------------------------------------------


def _read_frames(stdin: IO[bytes], inbox: queue.Queue[Any], eof: threading.Event) -> None:
    try:
        while True:
            head = stdin.read(HEADER.size)
            if len(head) < HEADER.size:
                break
            size, kind = HEADER.unpack(head)
            data = stdin.read(size)
            if len(data) < size:
                break
            inbox.put(unframe(kind, data))
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
    endpoint = os.environ.get(RELAY_ENDPOINT_ENV)
    if not endpoint:
        print(f"toolmeter relay: {RELAY_ENDPOINT_ENV} is not set; this helper is started by ToolResultProcessor",
              file=sys.stderr)  # fmt: skip
        return 2
    forwarder = Forwarder(endpoint, os.environ.get(RELAY_TOKEN_ENV) or None)
    inbox: queue.Queue[Any] = queue.Queue(maxsize=4)
    eof = threading.Event()
    threading.Thread(target=_read_frames, args=(sys.stdin.buffer, inbox, eof), daemon=True).start()
    out = sys.stdout
    while (message := inbox.get()) is not None:
        if message[0] == "flush":
            print(f"flushed {message[1]}", file=out, flush=True)
            continue
        _, seq, resources, scopes, flat = message
        count = span_count(flat)
        ok = forwarder.send_encoded(encode(resources, scopes, flat), count, stop=eof)
        print(f"{'sent' if ok else 'failed'} {seq} {count}", file=out, flush=True)
    return 0
