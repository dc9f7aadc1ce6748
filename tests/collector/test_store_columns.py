"""The tool-call columns are defined once: the Arrow schemas the store inserts with agree with the DDL
(file and lake), and with the rows the measurer and the model produce."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from collector.measure.measurement import measure
from collector.measure.tokens import TokenCounter
from collector.model import LlmCall, ToolCall
from collector.store import columns
from collector.store.batch import Batch
from collector.store.connection import read_connection
from collector.store.database import Store
from collector.store.schema import lake_schema_sql, schema_sql

ADDED_BY_PIPELINE = {"redactions"}
"""Tool-call columns that measure() leaves out: the pipeline sets ``redactions`` when it
redacts the payloads for storage (collector/pipeline.py, _store_payloads), after measuring
the originals."""


def duckdb_type(t: pa.DataType) -> str:
    """The DuckDB column type an Arrow type is stored as."""
    if pa.types.is_list(t):
        return duckdb_type(t.value_type) + "[]"
    names = {
        pa.string(): "VARCHAR",
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
        pa.binary(): "BLOB",
    }
    return names[t]


def described(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return {name: ctype for name, ctype, *_ in con.execute(f"DESCRIBE {table}").fetchall()}


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]


@pytest.fixture
def file_con(tmp_path: Path):  # type: ignore[no-untyped-def]
    con = duckdb.connect(str(tmp_path / "schema.duckdb"))
    con.execute(schema_sql())
    yield con
    con.close()


@pytest.mark.parametrize("table", sorted(columns.TABLES))
def test_arrow_schema_matches_the_ddl_in_names_and_types(file_con: duckdb.DuckDBPyConnection, table: str) -> None:
    ddl = described(file_con, table)
    derived = set(columns.DERIVED_COLUMNS.get(table, ()))
    assert derived <= ddl.keys(), "a derived column the DDL does not have"
    arrow = {f.name: duckdb_type(f.type) for f in columns.TABLES[table]}
    assert arrow == {name: ctype for name, ctype in ddl.items() if name not in derived}


def test_the_store_fills_the_derived_columns(tmp_path: Path, counter: TokenCounter) -> None:
    db = str(tmp_path / "derived.duckdb")
    row = measure(ToolCall(trace_id="a" * 32, span_id="b" * 16, tool_name="t", dialect="gen_ai",
                           start_ns=10**18, end_ns=10**18 + 5, raw='{"a": 1}'), counter).row()  # fmt: skip
    row["redactions"] = 0
    llm = asdict(LlmCall(trace_id="a" * 32, span_id="c" * 16, start_ns=10**18 + 9, end_ns=10**18 + 20,
                         dialect="gen_ai"))  # fmt: skip
    Store(db).write(Batch(tool_rows=[row], llm_rows=[llm], issue_rows=[{"level": "warning", "message": "m"}]))
    with read_connection(db) as con:
        assert con.execute("SELECT start_time IS NOT NULL, later_llm_calls FROM tool_calls").fetchall() == [(True, 1)]
        assert con.execute("SELECT count(start_time) FROM llm_calls").fetchone() == (1,)
        assert con.execute("SELECT count(logged_at) FROM ingest_issues").fetchone() == (1,)


def test_measured_row_has_exactly_the_tool_columns(counter: TokenCounter) -> None:
    call = ToolCall(
        trace_id="a" * 32, span_id="b" * 16, tool_name="search", dialect="gen_ai", start_ns=1, end_ns=2,
        raw='{"items": [1, 2, 3], "next": null}', view='{"items": [1, 2]}', budget_tokens=100,
    )  # fmt: skip
    row = measure(call, counter).row()
    assert set(row) == set(columns.TOOL_CALLS.names) - ADDED_BY_PIPELINE
    row["redactions"] = 0
    table = pa.Table.from_pylist([row], schema=columns.TOOL_CALLS)  # every value fits its column's type
    assert table.num_rows == 1 and table.column("raw_bytes").to_pylist() == [len(call.raw or "")]


def test_llm_row_has_exactly_the_llm_columns() -> None:
    row = asdict(LlmCall(trace_id="a" * 32, span_id="b" * 16, start_ns=1, end_ns=2, dialect="gen_ai"))
    assert set(row) == set(columns.LLM_CALLS.names)


def test_lake_ddl_has_the_same_columns(file_con: duckdb.DuckDBPyConnection) -> None:
    # the lake DDL is the file DDL rewritten by regex (no keys, NOT NULL, defaults; JSON as
    # VARCHAR): it is plain DuckDB SQL, so it runs in memory and can be described the same way
    lake = duckdb.connect()
    try:
        lake.execute(lake_schema_sql())
        assert tables(lake) == tables(file_con)
        for table in tables(file_con):
            file_columns = described(file_con, table)
            lake_columns = described(lake, table)
            assert list(lake_columns) == list(file_columns), table
            json_columns = {n for n, t in file_columns.items() if t == "JSON"}
            assert {n: t for n, t in lake_columns.items() if n not in json_columns} == {
                n: t for n, t in file_columns.items() if n not in json_columns
            }, table
            assert all(lake_columns[n] == "VARCHAR" for n in json_columns)
        keys = lake.execute("SELECT count(*) FROM duckdb_constraints() WHERE constraint_type <> 'CHECK'").fetchone()
        assert keys == (0,), "the lake DDL still has keys or NOT NULL"
    finally:
        lake.close()


def test_a_packed_batch_reads_as_the_rows_it_was_made_of() -> None:
    from collector.store.batch import Batch

    rows = [{"trace_id": f"t{i}", "span_id": f"s{i}", "view_source": "raw" if i % 2 else "view", "start_ns": i,
             "warnings": ["w"], "extra_key": "left out"} for i in range(5)]  # fmt: skip
    payloads = [{"trace_id": "t0", "span_id": "s0", "kind": "raw", "inline": b"{}", "total_bytes": 2}]
    packed = Batch(tool_rows=[dict(r) for r in rows], payload_rows=[dict(p) for p in payloads])
    packed.pack()
    assert packed.tool_rows == [] and packed.payload_rows == [] and packed.tool_count == 5 and len(packed) == 5
    plain = Batch(tool_rows=[dict(r) for r in rows[:2]])
    plain.extend(packed)  # rows of the writer's own threads beside a measuring process's tables
    assert plain.tool_count == 7
    table = plain.arrow("tool_calls")
    assert table is not None and table.schema == columns.TOOL_CALLS and table.num_rows == 7
    assert table.column("span_id").to_pylist() == ["s0", "s1", "s0", "s1", "s2", "s3", "s4"]
    assert table.column("warnings").to_pylist()[0] == ["w"]
    assert plain.tool_traces("view_source", "raw") == {"t1", "t3"}  # from the rows and from the tables
    assert Batch(tool_rows=[{"trace_id": "t9", "view_source": None}]).tool_traces("view_source", "raw") == set()
    assert plain.tool_dicts("trace_id")[3] == {"trace_id": "t1"}
    loaded = plain.arrow("payloads")
    assert loaded is not None and loaded.column("inline").to_pylist() == [b"{}"]
    assert Batch().arrow("tool_calls") is None


def test_table_of_takes_whole_rows_and_rows_with_gaps_or_extras_alike() -> None:
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.list_(pa.string()))])
    whole = [{"a": 1, "b": "x", "c": ["p"]}, {"a": 2, "b": None, "c": []}]
    assert columns.table_of(whole, schema).to_pylist() == whole
    # a row without a column reads it as null; keys that are not columns are left out
    mixed = [*whole, {"a": 3, "extra": "ignored"}]
    assert columns.table_of(mixed, schema).to_pylist() == [*whole, {"a": 3, "b": None, "c": None}]
    assert columns.table_of([], schema).num_rows == 0
    assert columns.table_of([{"a": 5}], pa.schema([("a", pa.int64())])).to_pylist() == [{"a": 5}]
