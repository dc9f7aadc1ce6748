"""The receiver's spool: what is acknowledged survives a crash, a torn record does not come back."""

from __future__ import annotations

import errno
import os
import struct
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from collector.errors import StoreError
from collector.serve.spool import SPARES, TRACES_JSON, TRACES_PROTOBUF, Spool


def test_records_replay_in_order_from_any_position_and_across_segments(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "s"), segment_bytes=64)
    positions = [spool.append(TRACES_JSON if i % 2 else TRACES_PROTOBUF, f"body {i}".encode() * 5) for i in range(6)]
    spool.close()
    assert len({segment for segment, _ in positions}) > 1  # rolled over into new segments
    reopened = Spool(str(tmp_path / "s"), segment_bytes=64)
    everything = list(reopened.replay(0, 0))
    assert [body for *_, body in everything] == [f"body {i}".encode() * 5 for i in range(6)]
    assert [(s, e) for s, e, _, _ in everything] == positions
    after_two = list(reopened.replay(*positions[1]))
    assert [body for *_, body in after_two] == [f"body {i}".encode() * 5 for i in range(2, 6)]
    reopened.close()


def test_a_torn_last_record_is_cut_off_at_the_next_start(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder))
    spool.append(TRACES_JSON, b"acknowledged")
    _, end = spool.append(TRACES_JSON, b"torn by a crash during append")
    spool.close()
    segment = folder / sorted(os.listdir(folder))[-1]
    with open(segment, "r+b") as f:
        f.truncate(end - 5)  # the crash hit before the fsync returned: never acknowledged
    reopened = Spool(str(folder))
    assert [body for *_, body in reopened.replay(0, 0)] == [b"acknowledged"]
    reopened.append(TRACES_JSON, b"after the restart")  # appended after the good part, not after the torn bytes
    assert [body for *_, body in reopened.replay(0, 0)] == [b"acknowledged", b"after the restart"]
    reopened.close()


def test_release_lets_go_of_written_segments_but_never_the_current_one(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder), segment_bytes=16)
    last = [spool.append(TRACES_JSON, b"x" * 20)[0] for _ in range(5)][-1]
    spool.release(last + 10)
    assert spool.segments() == [last]
    assert len(os.listdir(folder)) == 1 + SPARES  # the others deleted: the spares are bounded
    spool.close()
    assert os.listdir(folder) == [f"spool-{last:08d}.log"]  # a stopped spool keeps no spares


def _crash(spool: Spool) -> None:
    """Leave ``spool`` as a killed receiver would: its file closed, its spares still on disk."""
    spool._file.close()


def test_a_recycled_segment_replays_only_its_new_records(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder), segment_bytes=200)
    first = [spool.append(TRACES_PROTOBUF, f"old {i:03d}".encode() * 20) for i in range(3)]
    spool.release(first[-1][0])  # written to the store: segments 0 and 1 become spares
    assert any(name.startswith("spare-") for name in os.listdir(folder))
    # the next segments are written over the spares, with shorter records: the old ones lie
    # after them, aligned or not, and must never come back
    later = [spool.append(TRACES_JSON, f"new {i}".encode() * (3 + i % 5)) for i in range(12)]
    assert len({segment for segment, _ in later}) > 2
    _crash(spool)
    reopened = Spool(str(folder), segment_bytes=200)
    replayed = list(reopened.replay(*first[-1]))
    assert [body for *_, body in replayed] == [f"new {i}".encode() * (3 + i % 5) for i in range(12)]
    assert [(s, e) for s, e, _, _ in replayed] == later
    reopened.append(TRACES_JSON, b"after the restart")
    assert [body for *_, body in reopened.replay(*later[-1])] == [b"after the restart"]
    reopened.close()


def test_a_record_whose_end_lands_on_an_old_record_start_stops_replay_there(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder), segment_bytes=30)  # two 10-byte records a segment
    spool.append(TRACES_JSON, b"a" * 10)
    spool.append(TRACES_JSON, b"b" * 10)
    spool.append(TRACES_JSON, b"c" * 10)
    written = spool.append(TRACES_JSON, b"d" * 10)
    spool.release(written[0])  # segment 0, holding a and b, becomes a spare
    # as long as a: it ends exactly where b begins, whose header and CRC are intact
    assert spool.append(TRACES_JSON, b"e" * 10) == (2, 19)
    _crash(spool)
    reopened = Spool(str(folder), segment_bytes=30)
    assert [body for *_, body in reopened.replay(*written)] == [b"e" * 10]
    reopened.close()


def test_records_of_a_spool_from_before_recycling_are_replayed_and_their_segment_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    bodies = [b"written by an older receiver", b"not yet in the store"]
    with open(folder / "spool-00000007.log", "wb") as f:
        for body in bodies:  # the format before recycling: the CRC starts from 0
            f.write(struct.pack(">IBI", len(body), TRACES_JSON, zlib.crc32(body)) + body)
    spool = Spool(str(folder), segment_bytes=16)
    assert [body for *_, body in spool.replay(7, 0)] == bodies
    segment, _ = spool.append(TRACES_JSON, b"x" * 20)  # in a new segment: the old one is full
    assert segment == 8
    spool.release(8)
    assert sorted(os.listdir(folder)) == ["spool-00000008.log"]  # deleted, never written over
    spool.close()


class _DiskFullOnBody:
    """The spool's file, whose disk fills up after the header of the next record was written."""

    def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
        self.real = real

    def write(self, data: bytes) -> int:
        if len(data) == 100:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return int(self.real.write(data))

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.real, name)


def test_a_full_disk_is_a_store_error_and_leaves_no_half_record_behind(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder))
    spool.append(TRACES_JSON, b"before")
    spool._file = _DiskFullOnBody(spool._file)  # type: ignore[assignment]
    with pytest.raises(StoreError, match=r"cannot write to the spool in .*No space left"):
        spool.append(TRACES_JSON, b"x" * 100)  # the receiver answers 503: the request is not acknowledged
    spool.append(TRACES_JSON, b"after")  # the disk has room again: the half record must not hide this one
    spool.close()
    reopened = Spool(str(folder))
    assert [body for *_, body in reopened.replay(0, 0)] == [b"before", b"after"]
    reopened.close()


def test_segments_written_over_prepared_spares_replay_their_records_only(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    spool = Spool(str(folder), segment_bytes=100)
    spool.prepare_spares()
    assert len([name for name in os.listdir(folder) if name.startswith("spare-")]) == SPARES
    positions = [spool.append(TRACES_PROTOBUF, f"body {i}".encode() * 4) for i in range(6)]
    assert len({segment for segment, _ in positions}) > 1  # later segments began over the zeros
    _crash(spool)
    reopened = Spool(str(folder), segment_bytes=100)
    assert [body for *_, body in reopened.replay(0, 0)] == [f"body {i}".encode() * 4 for i in range(6)]
    reopened.close()
    assert [name for name in os.listdir(folder) if name.startswith("spare-")] == []


def slow_sync(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[int]:
    """The spool's sync, made as slow as a disk that honours it; returns the file sizes each sync
    covered (taken before the real sync, appended after it returned)."""
    import collector.serve.spool as spool_module

    real = spool_module._sync
    covered: list[int] = []

    def sync(fd: int) -> None:
        size = os.fstat(fd).st_size
        time.sleep(seconds)
        real(fd)
        covered.append(size)

    monkeypatch.setattr(spool_module, "_sync", sync)
    return covered


def test_concurrent_appends_share_syncs_and_each_returns_only_once_its_record_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    covered = slow_sync(monkeypatch, 0.01)
    spool = Spool(str(tmp_path / "s"))
    late: list[tuple[int, int]] = []
    handed_on: list[tuple[int, int]] = []

    def appender(t: int) -> list[tuple[int, int]]:
        ends = []
        for i in range(10):
            end = spool.append(TRACES_PROTOBUF, f"thread {t} body {i}".encode() * 50, handed_on.append)
            if not covered or max(covered) < end[1]:
                late.append(end)  # returned before a sync covered it
            ends.append(end)
        return ends

    with ThreadPoolExecutor(8) as pool:
        ends = [end for part in pool.map(appender, range(8)) for end in part]
    assert late == []
    assert spool.syncs == len(covered) and spool.syncs <= len(ends) // 2  # 80 appends, a sync shared by several
    # the appenders of one sync return in any order; the records are handed on in the spool's
    assert handed_on == sorted(ends)
    spool.close()
    reopened = Spool(str(tmp_path / "s"))
    replayed = list(reopened.replay(0, 0))
    assert sorted((s, e) for s, e, _, _ in replayed) == sorted(ends)
    assert sorted(body for *_, body in replayed) == sorted(
        f"thread {t} body {i}".encode() * 50 for t in range(8) for i in range(10)
    )
    reopened.close()


def test_concurrent_appends_across_segments_replay_every_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_sync(monkeypatch, 0.002)
    spool = Spool(str(tmp_path / "s"), segment_bytes=2000)
    spool.prepare_spares()

    handed_on: list[tuple[int, int]] = []

    def appender(t: int) -> list[tuple[int, int]]:
        return [spool.append(TRACES_JSON, f"thread {t} body {i}".encode() * 20, handed_on.append) for i in range(15)]

    with ThreadPoolExecutor(6) as pool:
        ends = [end for part in pool.map(appender, range(6)) for end in part]
    assert len({segment for segment, _ in ends}) > 10
    assert handed_on == sorted(ends)  # in order across segments too
    _crash(spool)
    reopened = Spool(str(tmp_path / "s"), segment_bytes=2000)
    assert sorted((s, e) for s, e, _, _ in reopened.replay(0, 0)) == sorted(ends)
    reopened.close()


def test_a_failed_sync_is_a_store_error_and_cuts_every_record_it_may_have_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collector.serve.spool as spool_module

    real = spool_module._sync
    folder = tmp_path / "s"
    spool = Spool(str(folder))
    spool.append(TRACES_JSON, b"before")
    in_sync = threading.Event()

    def failing(fd: int) -> None:
        size = os.fstat(fd).st_size
        in_sync.set()
        deadline = time.monotonic() + 10
        while os.fstat(fd).st_size == size and time.monotonic() < deadline:
            time.sleep(0.001)  # until the second appender has written its record behind this one
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(spool_module, "_sync", failing)
    errors: dict[str, str] = {}

    handed_on: list[tuple[int, int]] = []

    def append(name: str) -> None:
        try:
            spool.append(TRACES_JSON, name.encode(), handed_on.append)
        except StoreError as e:
            errors[name] = str(e)

    first = threading.Thread(target=append, args=("first",))
    first.start()
    assert in_sync.wait(10)
    second = threading.Thread(target=append, args=("second",))
    second.start()
    first.join(10)
    second.join(10)
    assert "cannot sync the spool" in errors["first"] and "Input/output error" in errors["first"]
    assert "an earlier sync failed" in errors["second"]  # written behind the failed sync: not acknowledged
    monkeypatch.setattr(spool_module, "_sync", real)
    after = spool.append(TRACES_JSON, b"after", handed_on.append)
    assert handed_on == [after]  # the records cut were never handed on
    spool.close()
    reopened = Spool(str(folder))
    assert [body for *_, body in reopened.replay(0, 0)] == [b"before", b"after"]
    reopened.close()


def test_no_descriptor_left_to_sync_with_is_a_store_error_and_the_next_append_still_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import collector.serve.spool as spool_module

    spool = Spool(str(tmp_path / "s"))
    real_dup = os.dup
    calls = []

    def dup(fd: int) -> int:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_dup(fd)

    monkeypatch.setattr(spool_module.os, "dup", dup)
    with pytest.raises(StoreError, match=r"cannot sync the spool .*Too many open files"):
        spool.append(TRACES_JSON, b"refused")
    pool = ThreadPoolExecutor(1)
    try:  # waits on no sync left running
        assert pool.submit(spool.append, TRACES_JSON, b"next").result(timeout=10) > (0, 0)
    finally:
        pool.shutdown(wait=False)
    assert spool.syncs == 1
    spool.close()
