"""The Streamlit pages, run with AppTest on the sample store."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "streamlit_app.py")


def run_app(db: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLMETER_DB", db)
        at.run()
    return at


def test_window_eaters_ranks_the_sample_tools(sample_store: str) -> None:
    at = run_app(sample_store)
    assert not at.exception
    assert at.title[0].value == "Window eaters"
    labels = [m.label for m in at.metric]
    assert "tool calls" in labels and "window cost" in labels
    table = at.dataframe[0].value
    assert {"search_orders", "fetch_pod_logs", "list_github_issues"} <= set(table["tool"])


def test_missing_store_says_what_to_do(tmp_path: Path) -> None:
    at = run_app(str(tmp_path / "nothing.duckdb"))
    assert not at.exception
    assert any("toolmeter demo" in e.value for e in at.error)
