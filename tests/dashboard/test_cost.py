"""Tokens as billed: the page and `toolmeter cost` give the same figures; cache reads, clearing
and compaction show on the cost page and on the trace replay."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from collector.cli import main
from tests.collector.test_window_cost import run_cached_and_cleared
from tests.dashboard.test_app import run_app


def cost_json(db: str, *args: str) -> dict[str, object]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["cost", "--db", db, "--json", *args]) == 0
    return json.loads(out.getvalue())


def test_the_page_shows_what_the_command_prints(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    cli = cost_json(sample_store)
    tools = cli["tools"]
    assert isinstance(tools, list) and tools[0]["tool"] == "search_orders"
    # the samples' model calls report input tokens: every model is calibrated, on hundreds of turns
    overall = [c for c in cli["calibrations"] if c["shape"] is None]  # type: ignore[attr-defined]
    assert overall and all(c["ratio"] and c["turns"] >= 100 and c["low"] <= c["ratio"] <= c["high"] for c in overall)
    at = run_app(monkeypatch, sample_store, "app_pages/cost.py")
    assert at.title[0].value == "Tokens as billed"
    table = next(d.value for d in at.dataframe if "model tokens" in d.value.columns)
    assert list(table["tool"]) == [t["tool"] for t in tools]
    assert list(table["window cost"]) == [t["window_cost_tokens"] for t in tools]
    assert list(table["model tokens"]) == [t["provider_tokens"] for t in tools]
    assert list(table["USD with cache"]) == pytest.approx([t["cost_with_cache"] for t in tools])
    calibration = next(d.value for d in at.dataframe if "turns" in d.value.columns)
    assert set(calibration["model"]) == {c["model"] for c in overall}
    runs = next(d.value for d in at.dataframe if "runs" in d.value.columns)
    assert set(runs["service"]) == {"support-agent", "sre-agent", "research-agent"}
    assert any("Prices taken" in c.value for c in at.caption)
    # the samples' model calls report no cached tokens: said, with what would give them
    assert cli["no_cache_figures"] == sorted(c["model"] for c in overall)
    assert any("report no cached input tokens" in c.value for c in at.caption)


def test_cache_and_clearing_on_the_cost_page_and_the_replay(monkeypatch: pytest.MonkeyPatch, db_path: str) -> None:
    run_cached_and_cleared(db_path)
    at = run_app(monkeypatch, db_path, "app_pages/cost.py")
    table = next(d.value for d in at.dataframe if "model tokens" in d.value.columns)
    row = table.set_index("tool")
    assert row.loc["a", "from cache"] > 0 and row.loc["a", "cleared"] == 1
    assert row.loc["a", "USD with cache"] != row.loc["a", "USD without cache"]
    calibration = next(d.value for d in at.dataframe if "turns" in d.value.columns)
    assert (
        list(calibration["ratio"]) == ["uncalibrated"] and "consecutive" in calibration["why"].iloc[0]
    )  # no output tokens reported

    at.switch_page("app_pages/replay.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    notes = [c.value for c in at.caption]
    assert any("LLM call 4: context editing cleared 1 tool result(s); 1 result(s) leave the window" in n for n in notes)
    assert any("LLM call 5: the conversation before it was compacted; 2 result(s)" in n for n in notes)
