"""Calibration from reported usage, window cost in money with and without the prompt cache, run sizes.

Generated traces (real OpenTelemetry SDK spans into a DuckDB file) with a known ratio of
provider tokens to toolmeter's tokens.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import pytest

from collector.errors import ConfigError
from collector.measure.tokens import TokenCounter
from collector.query import calibration, prices
from collector.query.cost import window_costs
from collector.query.runs import run_distribution, run_sizes
from tests.collector.test_window_cost import Agent, run_cached_and_cleared

RATIO = 1.3
COUNTER = TokenCounter("o200k_base")


def result_text(rng: random.Random, shape: str) -> str:
    if shape == "list":
        return json.dumps([{"id": rng.randrange(10**6), "status": rng.choice(["paid", "late"])} for _ in range(20)])
    return "\n".join(f"line {i}: {rng.random():.6f} checked" for i in range(rng.randrange(10, 40)))


def run_known_ratio(db: str, traces: int = 4, turns: int = 4, with_usage: bool = True) -> None:
    """Agents whose model counts every tool result as RATIO x toolmeter's count (within 4 %)."""
    rng = random.Random(7)
    agent = Agent(db)
    for _ in range(traces):
        with agent.tracer.start_as_current_span("invoke_agent"):
            total, output = 1500, 40
            agent.llm(
                **({"gen_ai__usage__input_tokens": total, "gen_ai__usage__output_tokens": output} if with_usage else {})
            )
            for turn in range(turns):
                shown = 0
                for _ in range(2):
                    text = result_text(rng, "list" if turn % 2 else "document")
                    agent.tool(f"tool_{turn % 2}", text)
                    shown += COUNTER.count(text).tokens
                total += output + round(shown * RATIO * rng.uniform(0.96, 1.04))
                output = rng.randrange(20, 80)
                agent.llm(
                    **(
                        {"gen_ai__usage__input_tokens": total, "gen_ai__usage__output_tokens": output}
                        if with_usage
                        else {}
                    )
                )
    agent.close()


def test_calibration_recovers_a_known_ratio_within_its_interval(db_path: str) -> None:
    run_known_ratio(db_path)
    with duckdb.connect(db_path, read_only=True) as con:
        found = calibration.calibrate(con)
    overall = [c for c in found if c.shape is None]
    assert [c.model for c in overall] == ["claude-sonnet-4-5"]
    c = overall[0]
    assert c.turns == 16 and c.calibrated
    assert c.low is not None and c.high is not None and c.low <= RATIO <= c.high
    assert abs(c.ratio - RATIO) < 0.03 and c.high - c.low < 0.1  # type: ignore[operator]
    # every turn's results share one shape here: per shape too, each within its interval
    shaped = {x.shape: x for x in found if x.shape is not None}
    assert set(shaped) == {"list", "document"}
    assert all(x.low <= RATIO <= x.high for x in shaped.values())  # type: ignore[operator]


def test_without_usage_the_figures_say_uncalibrated(db_path: str) -> None:
    run_known_ratio(db_path, traces=2, with_usage=False)
    with duckdb.connect(db_path, read_only=True) as con:
        found = calibration.calibrate(con)
        costs = window_costs(con, prices.load(), calibrations=found)
    assert [(c.model, c.calibrated) for c in found] == [("claude-sonnet-4-5", False)]
    assert "report no input tokens" in (found[0].reason or "")
    assert {r["calibrated_share"] for r in costs["tools"]} == {0.0}


def test_too_few_turns_calibrate_nothing(db_path: str) -> None:
    run_known_ratio(db_path, traces=1, turns=3)
    with duckdb.connect(db_path, read_only=True) as con:
        c = calibration.calibrate(con)[0]
    assert not c.calibrated and c.turns == 3 and "5 needed" in (c.reason or "")


def test_calibrated_window_cost_is_in_the_models_tokens(db_path: str) -> None:
    run_known_ratio(db_path)
    with duckdb.connect(db_path, read_only=True) as con:
        costs = window_costs(con, prices.load())
        ratio = calibration.ratios(costs["calibrations"])["claude-sonnet-4-5"]
    for row in costs["tools"]:
        assert row["calibrated_share"] == 1.0
        assert row["provider_tokens"] == pytest.approx(row["window_cost_tokens"] * ratio, abs=1)


PRICES = {"taken": "2026-12-01", "models": {"claude-sonnet-4*": {"input": 3.0, "cache_read": 0.3, "cache_write": 3.75}}}


def test_money_with_and_without_the_cache_follows_the_price_table(db_path: str, tmp_path: Path) -> None:
    run_cached_and_cleared(db_path)
    table = tmp_path / "prices.json"
    table.write_text(json.dumps(PRICES))
    with duckdb.connect(db_path, read_only=True) as con:
        views = dict(con.execute("SELECT tool_name, view_tokens FROM tool_calls").fetchall())
        costs = window_costs(con, prices.load(table))
    by_tool = {r["tool"]: r for r in costs["tools"]}
    # (later reads, from the cache, written by the first reader) as test_window_cost finds them
    reads = {"a": (2, 1, True), "b": (3, 1, True), "c": (2, 0, False), "d": (1, 0, False)}
    for tool, (later, cached, written) in reads.items():
        v, w = views[tool], 1 if written else 0
        row = by_tool[tool]
        assert row["window_cost_tokens"] == v * later and row["cached_tokens"] == v * cached
        assert row["cost_without_cache"] == pytest.approx(v * later * 3.0 / 1e6)
        with_cache = ((later - cached - w) * 3.0 + cached * 0.3 + w * 3.75) * v / 1e6
        assert row["cost_with_cache"] == pytest.approx(with_cache)
        assert row["priced_share"] == 1.0 and row["calibrated_share"] == 0.0
    assert by_tool["a"]["cleared_calls"] == 1 and costs["prices"]["taken"] == "2026-12-01"


def test_a_model_without_a_price_has_no_money_figure(db_path: str, tmp_path: Path) -> None:
    run_cached_and_cleared(db_path)
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"taken": "2026-12-01", "models": {"gpt-4o*": {"input": 2.5}}}))
    with duckdb.connect(db_path, read_only=True) as con:
        costs = window_costs(con, prices.load(table))
    assert costs["unpriced_models"] == ["claude-sonnet-4-5"]
    assert all(r["cost_with_cache"] == 0 and r["priced_share"] == 0 for r in costs["tools"])


def test_price_tables_match_the_longest_pattern_and_name_bad_fields(tmp_path: Path) -> None:
    shipped = prices.load()
    assert shipped.taken and shipped.price("gpt-4o-mini-2024-07-18").input == 0.15  # type: ignore[union-attr]
    assert shipped.price("openai/gpt-4o-2024-08-06").input == 2.5  # type: ignore[union-attr]
    assert shipped.price("anthropic.claude-sonnet-4-5-20250929-v1:0").cache_read == 0.3  # type: ignore[union-attr]
    assert shipped.price("llama-3-70b") is None
    with pytest.raises(ConfigError, match=r'models\["x\*"\].cache_read must be a non-negative number'):
        prices.parse({"taken": "2026-01-01", "models": {"x*": {"input": 1, "cache_read": -1}}}, "p.json")
    with pytest.raises(ConfigError, match='"taken" must say the date'):
        prices.parse({"models": {"x*": {"input": 1}}}, "p.json")
    with pytest.raises(ConfigError, match="no such price file"):
        prices.load(tmp_path / "missing.json")


def test_run_sizes_and_their_spread_per_service(db_path: str) -> None:
    run_known_ratio(db_path, traces=3, turns=2)
    with duckdb.connect(db_path, read_only=True) as con:
        runs = run_sizes(con)
        spread = run_distribution(con)
        views = con.execute("SELECT trace_id, sum(view_tokens) FROM tool_calls GROUP BY 1").fetchall()
    assert sorted(r["result_tokens"] for r in runs) == sorted(int(v) for _, v in views)
    assert [s["runs"] for s in spread] == [3] and spread[0]["result_tokens_max"] == max(int(v) for _, v in views)
