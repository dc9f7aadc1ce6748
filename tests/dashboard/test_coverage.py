"""The Coverage page: the `toolmeter doctor` table and its hints, with the sidebar filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.cli import main
from tests.collector.test_doctor import ROWS, chat, resource, tool, trace_id
from tests.dashboard.test_app import run_app

PAGE = "app_pages/coverage.py"


def test_coverage_table_and_hints_on_the_samples(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    at = run_app(monkeypatch, sample_store, PAGE)
    assert at.title[0].value == "Coverage"
    table = at.dataframe[0].value
    assert list(table.columns) == ["service", "dialect", "calls", "raw", "view", "call id", "joined by id",
                                   "by order+content", "by order", "from messages", "envelopes removed", "LLM calls"]  # fmt: skip
    assert {"research-agent", "sre-agent", "support-agent"} <= set(table["service"])
    assert set(table.loc[table["service"] == "research-agent", "dialect"]) == {"openinference"}
    assert (table["raw"] == "100%").all()
    text = " ".join(m.value for m in at.markdown)
    assert "research-agent · openinference" in text and "OPENINFERENCE_HIDE_INPUT_MESSAGES" in text
    assert "OPENINFERENCE_HIDE_OUTPUTS" not in text  # the raws are all there

    at.multiselect(key="f_services").set_value(["sre-agent"]).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert set(table["service"]) == {"sre-agent"}
    text = " ".join(m.value for m in at.markdown)
    assert "research-agent" not in text and "sre-agent · gen_ai" in text


def test_full_coverage_says_nothing_to_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    t = trace_id(1)
    doc = {"resourceSpans": [resource("full-agent", tool(t, 1, call_id="c1", result=ROWS[0]),
                                      chat(t, 2, [("c1", "lookup", ROWS[0])]))]}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    db = str(tmp_path / "full.duckdb")
    assert main(["ingest", str(path), "--db", db, "--quiet"]) == 0
    at = run_app(monkeypatch, db, PAGE)
    table = at.dataframe[0].value
    assert table[["raw", "view", "call id"]].iloc[0].tolist() == ["100%", "100%", "100%"]
    assert "nothing to set" in at.success[0].value
    assert not any("Hints" in s.value for s in at.subheader)
