"""The CI gate: compare a candidate run's tool envelopes with a baseline's (``toolmeter check``)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import datetime

import duckdb

from collector.alerts.detection import Envelope, compare, envelope, schema_diff, schema_fields
from collector.alerts.rules import Rules
from collector.errors import InputError
from collector.store.connection import read_connection
from collector.store.lake import is_lake


@dataclass(frozen=True)
class CheckRow:
    tool: str
    metric: str
    before: float
    after: float
    ratio: float | None
    threshold: str
    schema: dict[str, list[str]]


def _whole(con: duckdb.DuckDBPyConnection, tool: str) -> Envelope:
    return envelope(con, tool, datetime(1970, 1, 1), datetime(9999, 1, 1))


def _dominant(con: duckdb.DuckDBPyConnection, tool: str) -> str | None:
    row = con.execute(
        """SELECT schema_fingerprint FROM tool_calls WHERE tool_name = ? AND status <> 'error'
           AND schema_fingerprint IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1""",
        [tool],
    ).fetchone()
    return row[0] if row else None


def check(baseline_db: str, candidate_db: str, rules: Rules) -> tuple[list[CheckRow], list[str]]:
    """Compare two stores tool by tool. Returns the failures and notes (tools too small, new, gone)."""
    failures: list[CheckRow] = []
    notes: list[str] = []
    with read_connection(baseline_db) as base, read_connection(candidate_db) as cand:
        tools_b = {r[0] for r in base.execute("SELECT DISTINCT tool_name FROM tool_calls").fetchall()}
        tools_c = {r[0] for r in cand.execute("SELECT DISTINCT tool_name FROM tool_calls").fetchall()}
        for tool in sorted(tools_c - tools_b):
            notes.append(f"{tool}: new in the candidate (no baseline to compare)")
        for tool in sorted(tools_b - tools_c):
            notes.append(f"{tool}: not called in the candidate")
        for tool in sorted(tools_b & tools_c):
            rule = rules.for_tool(tool)
            before, after = _whole(base, tool), _whole(cand, tool)
            if before.calls < rule.min_calls or after.calls < rule.min_calls:
                notes.append(
                    f"{tool}: {before.calls} baseline / {after.calls} candidate calls, under min_calls={rule.min_calls}"
                )
                continue
            fb, fc = _dominant(base, tool), _dominant(cand, tool)
            diff = (
                schema_diff(schema_fields(base, tool, fb), schema_fields(cand, tool, fc))
                if fb and fc and fb != fc
                else {}
            )
            for f in compare(before, after, rule):
                failures.append(CheckRow(tool, f.metric, f.before, f.after, f.ratio, f.threshold, diff))
    return failures, notes


def store_for(path: str, workdir: str) -> str:
    """``path`` itself when it is a DuckDB or DuckLake store, else a store ingested from trace file(s)."""
    if is_lake(path):
        return path
    if os.path.isfile(path):
        with open(path, "rb") as f:
            head = f.read(16)
        if head[8:12] == b"DUCK":
            return path
    from collector.config import CollectorConfig
    from collector.ingest import ingest_files

    if not os.path.exists(path):
        raise InputError(f"{path}: no such store or trace file")
    db = os.path.join(workdir, f"check-{hashlib.sha256(path.encode()).hexdigest()[:8]}.duckdb")
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith((".json", ".json.gz", ".jsonl", ".pb"))
    )  # fmt: skip
    summary = ingest_files(files, CollectorConfig(db=db, store_payloads=False))
    if summary.failed_files:
        raise InputError(f"{path}: cannot read {', '.join(summary.failed_files)}")
    return db
