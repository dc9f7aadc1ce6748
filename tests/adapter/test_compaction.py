"""Compaction of old tool results: stubs that keep the summary and the handle, deterministic, logged."""

from __future__ import annotations

import copy
import json
import logging

import pytest

from collector.adapter import MemoryHandles, Policy, Scope, shape
from collector.adapter.compaction import compact
from tests.adapter.test_shaping import orders


def openai_history() -> tuple[list[dict[str, object]], str]:
    listed = shape(orders(), Policy(1500, "list", fields=("id", "status")), Scope("r"), store=MemoryHandles())
    history: list[dict[str, object]] = [{"role": "user", "content": "where is my refund?"}]

    def step(call_id: str, tool: str, args: dict[str, object], result: str) -> None:
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": call_id, "content": result})

    step("c1", "list_orders", {"customer_id": "c-17"}, listed.view)
    step("c2", "charge_card", {"order": "ord-0090"}, "Error: card declined by the issuer (code 51) " * 3)
    step("c3", "get_status", {"order": "ord-0001"}, json.dumps({"status": "shipped", "eta": "2026-12-03"}) * 20)
    step("c4", "get_status", {"order": "ord-0002"}, "delivered to the front desk on 2026-11-28 " * 30)
    step("c5", "list_orders", {"customer_id": "c-17"}, listed.view)  # the same call again
    step("c6", "get_status", {"order": "ord-0003"}, "in transit " * 40)
    step("c7", "get_status", {"order": "ord-0004"}, "in transit " * 40)
    history.append({"role": "assistant", "content": "The refund for ord-0090 is pending."})
    return history, str(listed.handle)


def test_old_results_become_stubs_that_keep_the_summary_and_the_handle(caplog: pytest.LogCaptureFixture) -> None:
    history, handle = openai_history()
    before = copy.deepcopy(history)
    with caplog.at_level(logging.INFO, logger="toolmeter"):
        compacted, replaced = compact(history, keep_last=4, pins=["c4"])
    assert history == before, "the history given is not changed"
    results = {m["tool_call_id"]: m["content"] for m in compacted if m.get("role") == "tool"}
    reasons = {r.call_id: r.reason for r in replaced}
    assert reasons == {"c1": "superseded", "c3": "aged"}
    assert results["c1"].startswith("[superseded: list_orders(")
    assert "card declined" in results["c2"], "an error stays whole for twice as many steps"
    assert results["c3"].startswith("[compacted: get_status(")
    assert results["c4"] == before[8]["content"], "a pinned result is never replaced"
    assert results["c5"] == before[10]["content"] and "c6" not in reasons
    assert all(r.tokens_after < r.tokens_before for r in replaced)
    assert compact(history, keep_last=4, pins=["c4"]) == (compacted, replaced), "deterministic"
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2 and "list_orders (call c1" in logged[0] and "get_status (call c3" in logged[1]
    # once the latest list_orders is old too, its stub keeps what its envelope said, and the handle
    later, _ = compact(history, keep_last=1, keep_errors_last=1)
    stub = next(m["content"] for m in later if m.get("tool_call_id") == "c5")
    assert "312 items" in stub and "refund_pending 1" in stub and handle in stub
    assert next(m["content"] for m in later if m.get("tool_call_id") == "c2").startswith("[compacted")


def test_anthropic_tool_result_blocks_are_compacted_too() -> None:
    history = [{"role": "user", "content": "check the pods"}]
    for k in range(5):
        history.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{k}", "name": "fetch_logs", "input": {"pod": f"api-{k}"}}],
            }
        )
        history.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"t{k}",
                        "content": [{"type": "text", "text": "INFO ok\n" * 200}],
                    }
                ],
            }
        )
    compacted, replaced = compact(history, keep_last=2)
    assert [r.call_id for r in replaced] == ["t0", "t1", "t2"]
    assert compacted[2]["content"][0]["content"].startswith("[compacted: fetch_logs(")
    assert compacted[-1] == history[-1]
