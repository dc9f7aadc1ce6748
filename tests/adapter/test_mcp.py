"""An MCP tool bounded by the adapter: the MCP SDK's own server and client, its own tools/call spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collector.adapter import MemoryHandles, Policy, Scope
from collector.adapter.mcp import URI_PREFIX, shape_call_result
from collector.store.database import read_connection
from tests.adapter.test_shaping import orders

HERE = Path(__file__).resolve().parent


def test_text_and_structured_content_are_counted_once_and_the_handle_is_a_resource_link() -> None:
    rows = orders()
    text = json.dumps({"orders": rows})
    result = {"content": [{"type": "text", "text": text}, {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
              "structuredContent": {"orders": rows}}  # fmt: skip
    store = MemoryHandles()
    shaped_result, shaped = shape_call_result(result, Policy(800, "list"), Scope("r"), store=store, tool_name="t")
    blocks = shaped_result["content"]
    assert [b["type"] for b in blocks] == ["text", "image", "resource_link"]
    assert json.loads(blocks[0]["text"]) == shaped_result["structuredContent"] == shaped.envelope
    assert shaped.view_tokens <= 800 and shaped.items_total == 312
    assert blocks[2]["uri"] == URI_PREFIX + str(shaped.handle) and blocks[2]["size"] == len(
        json.dumps({"orders": rows})
    )
    # an error result is bounded as a document and stays an error
    error, _ = shape_call_result({"content": [{"type": "text", "text": "boom " * 2000}], "isError": True},
                                 Policy(100, "list"), Scope("r"), store=store)  # fmt: skip
    assert error["isError"] is True and "not shown" in error["content"][0]["text"]


@pytest.mark.slow
def test_an_mcp_server_shaping_its_results_is_recorded_on_its_own_spans(tmp_path: Path) -> None:
    db = str(tmp_path / "mcp.duckdb")
    done = subprocess.run([sys.executable, str(HERE / "mcp_client.py"), db], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    envelope = got["listed"]["structuredContent"]
    assert envelope["total"] == 312 and envelope["truncated"] is True
    assert envelope["summary"]["status"]["counts"]["refund_pending"] == 1
    page, found = (json.loads(got[k]["content"][0]["text"]) for k in ("page", "found"))
    assert page["offset"] == len(envelope["items"]) and len(page["items"]) == 5
    assert [i["id"] for i in found["items"]] == ["ord-0090"]
    assert got["refused"]["isError"] is True and "another run" in got["refused"]["content"][0]["text"]
    with read_connection(db) as con:
        cur = con.execute(
            """SELECT tool_name, truncated, truncation_source, budget_tokens, view_tokens, items_total, items_shown,
                      handle, shape FROM tool_calls ORDER BY start_ns"""
        )
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    listed = rows[0]
    assert listed["tool_name"] == "list_orders" and listed["truncated"] is True
    assert listed["truncation_source"] == "declared" and listed["budget_tokens"] == 1500 >= listed["view_tokens"]
    assert listed["items_total"] == 312 and listed["items_shown"] == len(envelope["items"])
    assert listed["handle"] == got["handle"] and listed["shape"] == "list"
    assert [r["tool_name"] for r in rows] == ["list_orders", "read_result", "filter_result", "read_result"]
