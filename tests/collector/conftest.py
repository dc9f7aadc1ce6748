"""Fixtures for the collector tests: a receiver served in this process on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.config import CollectorConfig
from collector.serve.receiver import ReceiverConfig, RunningReceiver

TOKEN = "s3cret"


@pytest.fixture
def serve(db_path: str) -> Iterator:  # type: ignore[type-arg]
    started: list[RunningReceiver] = []

    def start(**kw: object) -> RunningReceiver:
        rc = ReceiverConfig(host="127.0.0.1", port=0, grpc_port=0, **kw)  # type: ignore[arg-type]
        r = RunningReceiver(CollectorConfig(db=db_path, flush_interval=0.1), rc)
        started.append(r)
        return r

    yield start
    for r in started:
        r.stop()
