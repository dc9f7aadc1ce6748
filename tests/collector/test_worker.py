"""The batching worker shared by the processor and the receiver: bounds, retries, shutdown."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from collector.errors import StoreError
from collector.worker import BatchWorker


def make(export, **kw):  # type: ignore[no-untyped-def]
    given_up: list[tuple[list[int], BaseException]] = []
    settings = dict(max_items=4, max_bytes=100, batch_items=2, interval=3600, retry_on=(StoreError,))
    settings.update(kw)
    w: BatchWorker[int] = BatchWorker("test-worker", export, give_up=lambda b, e: given_up.append((b, e)), **settings)
    return w, given_up


def test_the_queue_is_bounded_by_count_and_by_bytes_and_one_large_item_goes_through() -> None:
    w, _ = make(lambda batch: None)
    w.paused = True
    try:
        assert w.offer(1, 500)  # larger than max_bytes, but nothing else is held
        assert not w.offer(2, 1)  # now the large one is held
        assert w.dropped == 1
    finally:
        w.paused = False
    assert w.flush(10)
    w.paused = True
    for i in range(4):
        assert w.offer(i, 1)
    assert not w.offer(9, 1)  # count bound
    w.paused = False
    assert w.shutdown(10)
    assert w.dropped == 2 and w.offered == 7


def test_batches_keep_order_and_bounds() -> None:
    seen: list[list[int]] = []
    w, _ = make(seen.append, max_items=100, max_bytes=10_000, batch_items=3, batch_bytes=25)
    w.paused = True
    for i in range(7):
        w.offer(i, 10)
    w.paused = False
    assert w.shutdown(10)
    assert seen == [[0, 1, 2], [3, 4, 5], [6]]
    w2_seen: list[list[int]] = []
    w2, _ = make(w2_seen.append, max_items=100, max_bytes=10_000, batch_items=10, batch_bytes=25)
    w2.paused = True
    for i in range(5):
        w2.offer(i, 10)
    w2.paused = False
    assert w2.shutdown(10)
    assert w2_seen == [[0, 1, 2], [3, 4]]  # a batch closes once it holds 25 bytes or more


def test_a_failing_export_is_retried_logged_once_with_a_traceback_and_recovers(caplog) -> None:  # type: ignore[no-untyped-def]
    attempts: list[int] = []
    done = threading.Event()

    def export(batch: list[int]) -> None:
        attempts.append(len(batch))
        if len(attempts) <= 2:
            raise StoreError("the file is held")
        done.set()

    w, given_up = make(export)
    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        w.offer(1, 1)
        assert w.flush(30)
    assert done.is_set() and len(attempts) == 3 and not given_up
    lines = [r for r in caplog.records if "write" in r.getMessage()]
    assert [bool(r.exc_info) for r in lines] == [True, False, False]
    assert "still cannot write (2 tries)" in lines[1].getMessage()
    assert "writes again after 2 failed tries" in lines[2].getMessage()
    assert w.shutdown(10)


def test_shutdown_cuts_a_retry_backoff_short_and_gives_the_batch_up() -> None:
    failing = threading.Event()

    def export(batch: list[int]) -> None:
        failing.set()
        raise StoreError("the lake is away")

    w, given_up = make(export)
    w.offer(1, 1)
    w.offer(2, 1)  # a full batch wakes the worker at once
    assert failing.wait(10)
    started = time.monotonic()
    assert w.shutdown(30)
    assert time.monotonic() - started < 5  # not the 30 s backoff
    assert [b for b, _ in given_up] == [[1, 2]] and w.given_up == 2
    assert isinstance(given_up[0][1], StoreError)


def test_an_error_that_retrying_cannot_fix_gives_the_batch_up_at_once(caplog) -> None:  # type: ignore[no-untyped-def]
    def export(batch: list[int]) -> None:
        raise KeyError("a bug in measuring")

    w, given_up = make(export)
    with caplog.at_level(logging.ERROR, logger="toolmeter"):
        w.offer(1, 1)
        assert w.flush(10)
    assert [b for b, _ in given_up] == [[1]]
    assert any("gave up a batch" in r.getMessage() and r.exc_info for r in caplog.records)
    assert w.shutdown(10)


def test_flush_says_when_it_could_not_finish() -> None:
    w, _ = make(lambda batch: None)
    w.paused = True
    w.offer(1, 1)
    assert not w.flush(0.2)
    w.paused = False
    assert w.flush(10)
    assert w.shutdown(10)


def test_shutdown_says_when_the_export_outlives_its_timeout(caplog) -> None:  # type: ignore[no-untyped-def]
    release = threading.Event()
    entered = threading.Event()

    def export(batch: list[int]) -> None:
        entered.set()
        release.wait(30)

    w, _ = make(export)
    w.offer(1, 1)
    w.offer(2, 1)
    assert entered.wait(10)
    w.offer(3, 1)
    with caplog.at_level(logging.ERROR, logger="toolmeter"):
        assert not w.shutdown(0.2)
    assert any("did not finish writing" in r.getMessage() and "1 item(s) not written" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    release.set()
    assert w.shutdown(10)


@pytest.mark.parametrize("episodes", [2])
def test_each_episode_of_drops_is_warned_and_reported(caplog, episodes: int) -> None:  # type: ignore[no-untyped-def]
    w, _ = make(lambda batch: None, max_items=1, batch_items=100)
    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        for _ in range(episodes):
            w.paused = True
            w.offer(1, 1)
            w.offer(2, 1)
            w.offer(3, 1)
            w.paused = False
            assert w.flush(10)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("queue is full" in m for m in messages) == episodes
    assert sum("room again" in m for m in messages) == episodes
    assert w.shutdown(10)


def test_with_fill_bytes_a_stream_of_puts_is_exported_in_full_batches_and_a_lone_one_soon() -> None:
    seen: list[list[int]] = []
    exported = threading.Event()

    def export(batch: list[int]) -> None:
        seen.append(batch)
        exported.set()

    w, _ = make(export, max_items=1000, max_bytes=10**6, batch_items=1000, batch_bytes=10**6, interval=30,
                fill_bytes=100, linger_s=0.2)  # fmt: skip
    try:
        for i in range(9):  # a stream: 90 bytes, short of the fill, items 10 ms apart
            w.put(i, 10)
            time.sleep(0.01)
        assert seen == []  # waiting for the fill while items keep coming
        w.put(9, 10)  # the fill: exported at once, as one batch
        assert exported.wait(10)
        assert seen == [list(range(10))]
        exported.clear()
        started = time.monotonic()
        w.put(10, 1)  # a lone item: out once the items stopped coming for linger_s, not after the interval
        assert exported.wait(10)
        assert 0.15 <= time.monotonic() - started < 10 and seen[-1] == [10]
        for i in range(11, 14):
            w.put(i, 1)
        assert w.flush(10) and seen[-1] == [11, 12, 13]  # a flush does not wait for the fill
    finally:
        assert w.shutdown(10)


def test_with_fill_bytes_items_that_keep_coming_wait_no_longer_than_the_interval() -> None:
    seen: list[list[int]] = []
    w, _ = make(seen.append, max_items=10**6, max_bytes=10**9, batch_items=10**6, batch_bytes=10**9,
                interval=0.3, fill_bytes=10**9, linger_s=0.1)  # fmt: skip
    try:
        started = time.monotonic()
        i = 0
        while not seen and time.monotonic() - started < 10:  # a stream that never fills
            w.put(i, 1)
            i += 1
            time.sleep(0.01)
        assert seen and 0.25 <= time.monotonic() - started < 5
    finally:
        assert w.shutdown(10)


def test_a_peek_holds_no_more_than_the_next_batch_takes() -> None:
    w, _ = make(lambda batch: None, max_items=100, max_bytes=10**6, batch_items=3, batch_bytes=10**6)
    w.paused = True
    try:
        for i in range(6):
            w.put(i, 1)
        assert w.peek(10**6) == [0, 1, 2], "tiny items: the batch's count, not the bytes, is the bound"
        assert w.peek(2) == [0, 1]
    finally:
        w.paused = False
        assert w.shutdown(10)
