"""What-if budgets on the sample traces: the command and the page give the same figures."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from collector.cli import main
from tests.dashboard.test_app import run_app


def whatif_json(db: str, *args: str) -> dict[str, list[dict[str, object]]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["whatif", "--db", db, "--json", *args]) == 0
    return json.loads(out.getvalue())


def test_a_budget_that_halves_search_orders_p99_is_reported_with_its_window_cost_saving(sample_store: str) -> None:
    (recorded,) = whatif_json(sample_store, "--budget", "search_orders=1000000")["budgets"]
    half = int(recorded["p99_before"]) // 2  # type: ignore[call-overload]
    (halved,) = whatif_json(sample_store, "--budget", f"search_orders={half}")["budgets"]
    assert halved["replayed"] == recorded["replayed"] and halved["p99_before"] == recorded["p99_before"]
    assert halved["p99_after"] <= half  # type: ignore[operator]
    assert 0 < halved["window_cost_saved"] < halved["window_cost_before"]  # type: ignore[operator]
    assert halved["window_cost_after"] == halved["window_cost_before"] - halved["window_cost_saved"]  # type: ignore[operator]
    assert halved["lost_items"] > 0 and halved["truncated_rate_after"] >= halved["truncated_rate_before"]  # type: ignore[operator]
    # calls whose raw result was stored cut are counted with the reason, not replayed
    assert halved["replayed"] + sum(halved["not_replayed"].values()) == halved["calls"]  # type: ignore[attr-defined]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["whatif", "--db", sample_store, "--budget", f"search_orders={half}"])
    assert "search_orders" in out.getvalue() and "not replayed" in out.getvalue()


def test_the_page_shows_the_figures_the_command_prints(monkeypatch: pytest.MonkeyPatch, sample_store: str) -> None:
    suggested = whatif_json(sample_store)["suggestions"]
    over = [s for s in suggested if s["suggested_budget"]]
    assert over, "the samples have tools over 5 % of a 128k window"
    cli = whatif_json(sample_store, *[f"--budget={s['tool']}={s['suggested_budget']}" for s in over])["budgets"]
    at = run_app(monkeypatch, sample_store, "app_pages/whatif.py")
    assert at.title[0].value == "What-if budgets"
    table = next(d.value for d in at.dataframe if "p99 after" in d.value.columns)
    assert list(table["tool"]) == [f["tool"] for f in cli]
    for column, key in (("p99 after", "p99_after"), ("window cost before", "window_cost_before"),
                        ("window cost after", "window_cost_after"), ("items left out", "lost_items")):  # fmt: skip
        assert list(table[column]) == [f[key] for f in cli], column
    text = " ".join(m.value for m in at.markdown)
    assert "Suggested budgets" in text and over[0]["tool"] in text
