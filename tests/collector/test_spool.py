"""The receiver's spool: what is acknowledged survives a crash, a torn record does not come back."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from collector.errors import StoreError
from collector.serve.spool import TRACES_JSON, TRACES_PROTOBUF, Spool


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


def test_release_deletes_written_segments_but_never_the_current_one(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "s"), segment_bytes=16)
    last = [spool.append(TRACES_JSON, b"x" * 20)[0] for _ in range(4)][-1]
    spool.release(last + 10)
    assert spool.segments() == [last]
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
