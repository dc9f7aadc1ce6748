"""The ``anthropic`` client against a fake Messages API with prompt caching and context editing,
its model calls traced by OpenInference and by OpenLLMetry (``fw-anthropic``), into toolmeter.

The fake reports usage as Anthropic does (``input_tokens`` without the cached parts), reads
each request's predecessor from the cache, and from the third request on reports that context
editing cleared the oldest tool result. Each instrumentation has its own way of passing that on.

The SDK (2.15) traces its own calls too (``anthropic.messages.create``, GenAI conventions, with
``gen_ai.usage.cache_write.input_tokens``), inside the instrumentation's span: one model call,
whose row keeps what each of the two spans read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from collector.store.database import read_connection
from tests.frameworks.expect import check_run
from tests.frameworks.fake_anthropic import FakeAnthropic, prompt_tokens

pytestmark = pytest.mark.frameworks


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    yield fake
    fake.stop()


def _rows(db: str, sql: str) -> list[tuple[Any, ...]]:
    with read_connection(db) as con:
        return con.execute(sql).fetchall()


@pytest.mark.parametrize("instrumentation", ["openinference", "traceloop"])
def test_cache_reads_and_cleared_results_reach_the_window_cost(
    run_framework: Any, counter: Any, fake_anthropic: FakeAnthropic, instrumentation: str
) -> None:
    env = {"DRIVER_INSTRUMENTATION": instrumentation, "ANTHROPIC_BASE_URL": fake_anthropic.base_url,
           "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key"}  # fmt: skip
    run = run_framework("fw-anthropic", "anthropic_loop.py", name=f"anthropic_{instrumentation}", env=env)
    rows = check_run(run, counter, raw=True, view=False)
    assert [r["tool_name"] for r in rows] == ["search_orders", "fetch_logs", "get_status"]
    llm = _rows(run.db, "SELECT input_tokens, cache_read_tokens, cache_write_tokens, cleared_tool_uses, "
                        "cleared_input_tokens FROM llm_calls ORDER BY start_ns")  # fmt: skip
    assert len(llm) == len(fake_anthropic.requests) == 4
    # input tokens hold the cached parts, whichever way the instrumentation reported them
    assert [r[0] for r in llm] == [prompt_tokens(b) for b in fake_anthropic.requests]
    assert [r[1] for r in llm] == [u["cache_read_input_tokens"] for u in fake_anthropic.usages]
    assert [r[2] for r in llm] == [u["cache_creation_input_tokens"] for u in fake_anthropic.usages]
    reads = dict((t, (n, c, by)) for t, n, c, by in _rows(
        run.db, "SELECT tool_name, later_llm_calls, cached_reads, cleared_by FROM tool_calls"))  # fmt: skip
    if instrumentation == "openinference":
        # the response body (output.value) carries context_management: requests 3 and 4 left the
        # oldest result out, so search_orders was read once, by request 2
        assert [r[3:] for r in llm] == [(None, None), (None, None), (1, 400), (1, 400)]
        assert reads == {"search_orders": (1, 0, "context_edit"), "fetch_logs": (2, 1, None),
                         "get_status": (1, 0, None)}  # fmt: skip
    else:
        # OpenLLMetry records no response body: the clearing is not seen, every later call counts
        assert [r[3:] for r in llm] == [(None, None)] * 4
        assert reads == {"search_orders": (3, 2, None), "fetch_logs": (2, 1, None), "get_status": (1, 0, None)}
