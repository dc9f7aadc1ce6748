"""The store's ownership rules with real processes: readers wait out writers, nothing is lost."""

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collector.errors import StoreError
from collector.store.database import Store, read_connection

AGENT = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from collector import ToolResultProcessor
    provider = TracerProvider()
    provider.add_span_processor(ToolResultProcessor(db=sys.argv[1], flush_interval=0.05, max_batch_size=50))
    tracer = provider.get_tracer("agent")
    for i in range(int(sys.argv[2])):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"tool_{i % 3}",
                 "gen_ai.tool.call.result": "row " * (i % 200)}
        with tracer.start_as_current_span("execute_tool", attributes=attrs):
            pass
    provider.shutdown()
    """
)

HOLD = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    """
)


def test_dashboard_reads_while_an_agent_writes_and_nothing_is_lost(db_path: str) -> None:
    Store(db_path).ensure_schema()
    agent = subprocess.Popen([sys.executable, "-c", AGENT, db_path, "3000"])
    reads = 0
    seen = []
    while agent.poll() is None:
        with read_connection(db_path) as con:
            n = con.execute("SELECT count(*) FROM tool_calls").fetchone()[0]  # type: ignore[index]
            # a batch is one transaction: counters and rows always agree
            written = con.execute("SELECT coalesce(sum(tool_calls_written), 0) FROM collector_stats").fetchone()[0]  # type: ignore[index]
        assert n == written
        seen.append(n)
        reads += 1
    assert agent.returncode == 0
    assert reads > 3 and seen == sorted(seen)
    with read_connection(db_path) as con:
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (3000,)
        assert con.execute("SELECT sum(dropped), sum(failed) FROM collector_stats").fetchone() == (0, 0)


def test_reader_waits_for_a_short_lock_and_names_a_long_one(tmp_path: Path) -> None:
    db = str(tmp_path / "locked.duckdb")
    Store(db).ensure_schema()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, db, "1.0"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    t0 = time.monotonic()
    with read_connection(db, wait_s=20) as con:  # waits until the holder lets go
        assert con.execute("SELECT count(*) FROM tool_calls").fetchone() == (0,)
    assert time.monotonic() - t0 < 15
    holder.wait()
    holder.stdout.close()

    holder = subprocess.Popen([sys.executable, "-c", HOLD, db, "5"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    with pytest.raises(StoreError, match="locked by another process"), read_connection(db, wait_s=0.5):
        pass
    holder.kill()
    holder.wait()
    holder.stdout.close()


def test_missing_store_is_named(tmp_path: Path) -> None:
    with (
        pytest.raises(StoreError, match=r"no toolmeter store at .*toolmeter demo"),
        read_connection(tmp_path / "x.duckdb"),
    ):
        pass
