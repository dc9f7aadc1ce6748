"""The budget adapter: views within budget, summaries over the full data, handles that page and refuse."""

from __future__ import annotations

import json
import random
import re
from datetime import date, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.adapter import (
    DirectoryHandles,
    HandleError,
    MemoryHandles,
    Policy,
    Scope,
    filter_result,
    read_result,
    shape,
    summarize,
)
from collector.errors import ConfigError, InputError
from collector.measure.tokens import TokenCounter

RUN = Scope("run-1", "user-1")
COUNTER = TokenCounter()

rows = st.lists(
    st.fixed_dictionaries(
        {"id": st.integers(0, 10**6), "status": st.sampled_from(["paid", "shipped", "refund_pending"]),
         "amount": st.floats(0, 1e4, allow_nan=False), "note": st.text(max_size=80)},
        optional={"date": st.dates().map(str), "tags": st.lists(st.text(max_size=5), max_size=3)},
    ),
    max_size=300,
)  # fmt: skip
budgets = st.integers(64, 3000)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def tokens(text: str) -> int:
    return COUNTER.count(text).tokens


def orders(n: int = 312, refund_at: int = 90) -> list[dict[str, Any]]:
    """``n`` orders, one a day back from 2026-11-30 in a shuffled order, one of them a pending refund."""
    rng = random.Random(7)
    out = [{"id": f"ord-{i:04d}", "date": f"{date(2026, 11, 30) - timedelta(days=i)}T10:00:00Z",
            "status": rng.choice(["paid", "shipped", "delivered"]), "amount": round(rng.uniform(5, 400), 2),
            "customer": "c-17", "notes": "handled by the night shift, see ticket history " * 2}
           for i in range(n)]  # fmt: skip
    out[refund_at % n]["status"] = "refund_pending"
    rng.shuffle(out)
    return out


@PROPERTY
@given(rows, budgets, st.sampled_from([None, ("id", "status"), ("amount",)]), st.sampled_from([None, "amount", "date"]))
def test_no_envelope_is_ever_over_its_budget(items, budget, fields, sort_key) -> None:  # type: ignore[no-untyped-def]
    shaped = shape(items, Policy(budget, "list", fields=fields, sort_key=sort_key), RUN, store=MemoryHandles())
    assert tokens(shaped.view) == shaped.view_tokens <= budget
    envelope = json.loads(shaped.view)
    assert envelope["total"] == len(items)
    assert envelope["truncated"] == (len(envelope["items"]) < len(items))


@PROPERTY
@given(rows, budgets, st.sampled_from([None, "amount", "id"]))
def test_the_summary_of_a_truncated_list_is_the_summary_of_all_of_it(items, budget, sort_key) -> None:  # type: ignore[no-untyped-def]
    shaped = shape(items, Policy(budget, "list", fields=("id",), sort_key=sort_key), RUN, store=MemoryHandles())
    envelope = json.loads(shaped.view)
    if "summary" in envelope and not envelope.get("summary_cut"):
        assert envelope["summary"] == json.loads(json.dumps(summarize(items)))


@PROPERTY
@given(rows, st.integers(1, 40), st.sampled_from([None, "amount", "status"]), st.booleans())
def test_pages_through_a_handle_never_overlap_or_skip(items, limit, sort_key, descending) -> None:  # type: ignore[no-untyped-def]
    store = MemoryHandles()
    policy = Policy(200, "list", sort_key=sort_key, descending=descending)
    shaped = shape(items, policy, RUN, store=store)
    assert shaped.handle is not None
    seen = [json.dumps(i, sort_keys=True) for i in json.loads(shaped.view)["items"]]
    offset = len(seen)
    while offset < len(items):
        page = read_result(store, shaped.handle, RUN, offset=offset, limit=limit)
        assert page["offset"] == offset and page["items"]
        seen += [json.dumps(i, sort_keys=True) for i in page["items"]]
        offset += len(page["items"])
        assert (page["next"] is None) == (offset >= len(items))
    assert sorted(seen) == sorted(json.dumps(i, sort_keys=True) for i in items)
    assert len(seen) == len(items)


@pytest.mark.parametrize("make_store", [MemoryHandles, "directory"])
def test_a_handle_from_one_run_is_refused_in_another(make_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = DirectoryHandles(tmp_path / "handles") if make_store == "directory" else make_store()
    shaped = shape(orders(), Policy(500, "list"), RUN, store=store)
    assert shaped.handle is not None
    assert read_result(store, shaped.handle, RUN, offset=0, limit=2)["total"] == 312
    for other in (Scope("run-2", "user-1"), Scope("run-1", "user-2")):
        with pytest.raises(HandleError, match="another run or principal"):
            read_result(store, shaped.handle, other)
        with pytest.raises(HandleError):
            filter_result(store, shaped.handle, other, "status == 'paid'")
    with pytest.raises(HandleError, match="unknown"):
        read_result(store, "tmh_" + "0" * 24, RUN)
    with pytest.raises(HandleError, match="not a result handle"):
        read_result(store, "../../etc/passwd", RUN)


def test_the_worked_example_shows_the_one_refund_on_page_three() -> None:
    store = MemoryHandles()
    policy = Policy(1500, "list", fields=("id", "date", "status", "amount"), sort_key="date", descending=True)
    shaped = shape(orders(), policy, RUN, store=store)
    envelope = json.loads(shaped.view)
    assert shaped.view_tokens <= 1500 and envelope["total"] == 312 and envelope["truncated"]
    assert envelope["summary"]["status"]["counts"]["refund_pending"] == 1
    shown = [i["id"] for i in envelope["items"]]
    assert "ord-0090" not in shown  # the refund is not on the first page
    # it is on page three of pages the size of the first
    pages = [shown]
    while "ord-0090" not in pages[-1]:
        page = read_result(store, shaped.handle, RUN, offset=sum(map(len, pages)), limit=len(shown))  # type: ignore[arg-type]
        pages.append([i["id"] for i in page["items"]])
    assert len(pages) == 3
    # the guidance names the filter that finds it, and following it finds it at once
    assert "filter_result" in envelope["next"] and "status == 'refund_pending'" in envelope["next"]
    found = filter_result(store, shaped.handle, RUN, "status == 'refund_pending'")  # type: ignore[arg-type]
    assert [i["id"] for i in found["items"]] == ["ord-0090"] and found["total"] == 1
    # a filter already applied is not suggested again
    again = shape(orders(), policy, RUN, store=store, applied_filter="status == 'refund_pending'")
    assert "status == 'refund_pending'" not in json.loads(again.view)["next"]


def test_retained_ranges_and_items_are_exact_for_a_list() -> None:
    raw = json.dumps(orders(60), indent=2)  # the tool's own formatting, not ours
    shaped = shape(raw, Policy(600, "list", sort_key="amount"), RUN, store=MemoryHandles())
    data = raw.encode()
    items = json.loads(raw)
    shown = json.loads(shaped.view)["items"]
    indices = [i for a, b in shaped.retained_items for i in range(a, b)]
    assert sorted(json.dumps(items[i]) for i in indices) == sorted(json.dumps(i) for i in shown)
    # each byte range is whole items of the raw text
    kept = [json.loads(b"[" + data[a:b] + b"]") for a, b in shaped.retained]
    assert sorted(json.dumps(i) for part in kept for i in part) == sorted(json.dumps(i) for i in shown)
    assert shaped.items_total == 60 and shaped.items_shown == len(shown)


def test_the_same_result_gets_the_same_view_whatever_its_handle() -> None:
    record = {"id": "c-17", "name": "Ada", "address": "1 Main St", "history": ["x" * 50] * 200}
    policy = Policy(100, "record", fields=("id", "name", "history", "address"))
    views = [shape(json.dumps(record), policy, RUN, store=MemoryHandles()) for _ in range(200)]
    assert len({v.handle for v in views}) == 200, "a new handle each time"
    assert len({(v.view_tokens, json.dumps(json.loads(v.view)["record"])) for v in views}) == 1, (
        "a handle's tokens do not depend on the draw, so neither does what fits the budget"
    )


def test_a_list_inside_an_object_and_a_record_projected() -> None:
    wrapped = {"orders": orders(40), "next_page": None}
    shaped = shape(wrapped, Policy(400, "list", fields=("id", "status")), RUN, store=MemoryHandles())
    assert shaped.shape == "list" and json.loads(shaped.view)["total"] == 40
    record = {"id": "c-17", "name": "Ada", "address": "1 Main St", "history": ["x" * 50] * 200}
    text = json.dumps(record)
    shaped = shape(text, Policy(100, "record", fields=("id", "name", "history", "address")), RUN, store=MemoryHandles())
    view = json.loads(shaped.view)
    assert shaped.shape == "record" and shaped.truncated and shaped.view_tokens <= 100
    assert view["record"] == {"id": "c-17", "name": "Ada", "address": "1 Main St"}
    assert view["omitted_fields"] == ["history"]
    for a, b in shaped.retained:  # whole members of the raw object
        assert text.encode()[a:b].decode().split(":")[0].strip('"') in view["record"]


def _filler(size: int) -> str:
    words = [
        "the",
        "service",
        "answered",
        "within",
        "its",
        "usual",
        "latency",
        "and",
        "nothing",
        "else",
        "of",
        "note",
        "happened",
    ]
    rng = random.Random(size)
    lines, length = [], 0
    while length < size:
        line = " ".join(rng.choice(words) for _ in range(12)) + "\n"
        lines.append(line)
        length += len(line)
    return "".join(lines)


FACT = "ORDER-7731 was refunded on 2026-03-14 by agent 42\n"
SURVIVES = {  # (strategy, where the fact is) -> kept, for results too large for the budget
    ("head", "beginning"): True, ("head", "middle"): False, ("head", "end"): False,
    ("tail", "beginning"): False, ("tail", "middle"): False, ("tail", "end"): True,
    ("head_tail", "beginning"): True, ("head_tail", "middle"): False, ("head_tail", "end"): True,
    ("relevant", "beginning"): True, ("relevant", "middle"): True, ("relevant", "end"): True,
}  # fmt: skip


@pytest.mark.parametrize("size", [1_000, 100_000, 1_000_000])
@pytest.mark.parametrize("where", ["beginning", "middle", "end"])
@pytest.mark.parametrize("strategy", ["head", "tail", "head_tail", "relevant"])
def test_a_decisive_fact_survives_where_the_strategy_keeps_it_and_the_marker_says_when_not(
    size: int, where: str, strategy: str
) -> None:
    filler = _filler(size)
    cut = {"beginning": 0, "middle": filler.index("\n", len(filler) // 2) + 1, "end": len(filler)}[where]
    text = filler[:cut] + FACT + filler[cut:]
    shaped = shape(text, Policy(800, "document", strategy=strategy), RUN, store=MemoryHandles(),
                   query="refund ORDER-7731")  # fmt: skip
    assert shaped.view_tokens <= 800
    expected = size < 2_000 or SURVIVES[(strategy, where)]
    assert (FACT.strip() in shaped.view) == expected
    fact_at = len(text[:cut].encode())
    for a, b in shaped.retained:  # every retained range is the raw's own bytes, shown as they are
        assert text.encode()[a:b].decode().strip() in shaped.view
    if not expected:
        # the marker over the omitted bytes says the fact's bytes were not shown
        gaps = [(int(a.replace(",", "")), int(b.replace(",", "")))
                for a, b in re.findall(r"bytes ([\d,]+)-([\d,]+) of [\d,]+ not shown", shaped.view)]  # fmt: skip
        assert any(a <= fact_at < b for a, b in gaps)


def test_a_log_shows_its_distinct_error_lines_with_their_counts() -> None:
    lines = [f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d} INFO request {i} ok" for i in range(5000)]
    for i in range(100, 5000, 250):
        lines[i] = f"2026-01-01T00:00:00 ERROR payment gateway timeout after {i} ms"
    lines[4321] = "Traceback (most recent call last): KeyError 'customer'"
    shaped = shape("\n".join(lines), Policy(600, "diagnostic"), RUN, store=MemoryHandles())
    assert shaped.view_tokens <= 600 and shaped.truncated
    assert "payment gateway timeout" in shaped.view and "(x20)" in shaped.view
    assert "KeyError 'customer'" in shaped.view
    assert "INFO request 0 ok" in shaped.view and "INFO request 4999 ok" in shaped.view
    assert re.search(r"lines [\d,]+-[\d,]+, bytes [\d,]+-[\d,]+ of [\d,]+ not shown; read_result", shaped.view)


def test_a_result_within_budget_is_shown_as_it_is_and_still_kept() -> None:
    store = MemoryHandles()
    shaped = shape("short answer", Policy(100, "document"), RUN, store=store)
    assert shaped.view == "short answer" and not shaped.truncated and shaped.retained == ((0, 12),)
    assert shaped.handle is not None
    assert read_result(store, shaped.handle, RUN)["text"] == "short answer"


def test_bad_policies_and_filters_name_the_field() -> None:
    with pytest.raises(ConfigError, match="budget_tokens"):
        Policy(10)
    with pytest.raises(ConfigError, match="shape"):
        Policy(100, "table")
    with pytest.raises(ConfigError, match="strategy"):
        Policy(100, "document", strategy="middle")
    with pytest.raises(ConfigError, match="run_id"):
        Scope("")
    store = MemoryHandles()
    shaped = shape(orders(30), Policy(200, "list"), RUN, store=store)
    with pytest.raises(InputError, match="not allowed"):
        filter_result(store, shaped.handle, RUN, "__import__('os').system('true')")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="offset"):
        read_result(store, shaped.handle, RUN, offset=-1)  # type: ignore[arg-type]
    narrowed = filter_result(store, shaped.handle, RUN, "amount > 100 and status in ['paid', 'shipped']")  # type: ignore[arg-type]
    assert all(i["amount"] > 100 and i["status"] in ("paid", "shipped") for i in narrowed["items"])


def test_the_memory_store_is_bounded_and_an_expired_handle_says_so() -> None:
    store = MemoryHandles(max_bytes=50_000)
    policy = Policy(200, "document")
    first = shape("x " * 20_000, policy, RUN, store=store)  # 40 KB
    second = shape("y " * 20_000, policy, RUN, store=store)
    assert store.expired == 1
    with pytest.raises(HandleError, match="expired"):
        read_result(store, first.handle, RUN)  # type: ignore[arg-type]
    assert read_result(store, second.handle, RUN)["total_bytes"] == 40_000  # type: ignore[arg-type]
