"""Data out: `toolmeter export` round-trips the store's tables through Parquet, CSV and JSON lines."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from collector.cli import main
from tests.collector.test_cost import run_known_ratio
from tests.collector.test_window_cost import run_cached_and_cleared


@pytest.fixture
def store(db_path: str) -> str:
    run_cached_and_cleared(db_path)
    run_known_ratio(db_path, traces=2, turns=2)
    return db_path


@pytest.mark.parametrize("table", ["tool_calls", "llm_calls"])
def test_parquet_read_back_equals_the_table(store: str, tmp_path: Path, table: str) -> None:
    out = tmp_path / f"{table}.parquet"
    assert main(["export", "--db", store, "--table", table, "--out", str(out)]) == 0
    with duckdb.connect(store, read_only=True) as con:
        stored = con.execute(f"SELECT * FROM {table} ORDER BY start_ns, trace_id, span_id").fetchall()
        read = con.execute(f"SELECT * FROM read_parquet('{out}')").fetchall()
        kinds = con.execute(f"DESCRIBE {table}").fetchall()
        back = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{out}')").fetchall()
    assert read == stored and len(read) > 0
    assert [(c[0], c[1]) for c in back] == [(c[0], c[1]) for c in kinds]  # nested columns stay nested


def test_csv_and_json_lines_hold_every_row(store: str, tmp_path: Path) -> None:
    with duckdb.connect(store, read_only=True) as con:
        n, names = con.execute(
            "SELECT count(*), list(DISTINCT tool_name ORDER BY tool_name) FROM tool_calls"
        ).fetchone()  # type: ignore[misc]
    assert main(["export", "--db", store, "--format", "csv", "--out", str(tmp_path / "t.csv")]) == 0
    with duckdb.connect() as con:
        got = con.execute(
            f"SELECT count(*), list(DISTINCT tool_name ORDER BY tool_name) FROM read_csv('{tmp_path / 't.csv'}')"
        ).fetchone()
    assert got == (n, names)
    assert main(["export", "--db", store, "--format", "json", "--out", str(tmp_path / "t.jsonl")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(lines) == n and sorted({r["tool_name"] for r in lines}) == names


def test_the_ranking_as_top_prints_it_and_since(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--db", store, "--json"]) == 0
    top = json.loads(capsys.readouterr().out)
    assert (
        main(["export", "--db", store, "--table", "ranking", "--format", "json", "--out", str(tmp_path / "r.jsonl")])
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["calls"], r["window_cost_tokens"]) for r in rows] == [
        (r["tool"], r["calls"], r["window_cost_tokens"]) for r in top]  # fmt: skip
    assert main(["export", "--db", store, "--since", "2099-01-01", "--out", str(tmp_path / "none.parquet")]) == 0
    assert "0 row(s) of tool_calls" in capsys.readouterr().out


def test_a_missing_folder_is_an_error_naming_it(store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--db", store, "--out", str(tmp_path / "nope" / "t.parquet")]) == 2
    assert "does not exist" in capsys.readouterr().err


def cookbook() -> list[str]:
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split("### SQL cookbook", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```sql\n")[1:]]


def test_every_query_of_the_readme_cookbook_runs_on_the_sample_traces(tmp_path: Path) -> None:
    from tests.conftest import SAMPLE_TRACES

    db = str(tmp_path / "samples.duckdb")
    days = [str(SAMPLE_TRACES / f"traces-2026-11-{d}.json.gz") for d in (15, 16)]  # the schema change
    assert main(["ingest", *days, "--db", db, "--quiet", "--no-alerts"]) == 0
    queries = cookbook()
    assert len(queries) == 3
    with duckdb.connect(db, read_only=True) as con:
        top, by_day, diff = (con.execute(q).fetchall() for q in queries)
    assert top[0][0] == "search_orders" and sum(r[3] for r in top) == pytest.approx(100, abs=1)
    assert {r[0].isoformat() for r in by_day} == {"2026-11-15", "2026-11-16"}
    assert diff == [(["$[].raw_payload:string"], [])]
