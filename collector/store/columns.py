"""The columns every insert hands the store, as Arrow schemas: defined here and nowhere else.

A batch's rows are dicts (built by :func:`collector.measure.measurement.measure` and the
pipeline); :class:`collector.store.database.Store` turns them into Arrow tables with these
schemas and inserts them ``BY NAME``. Their names and types must agree with the DDL in
``schema.sql``: ``tests/collector/test_store_columns.py`` creates the tables in a real
DuckDB file and compares, so a column added to one and not the other fails there rather
than as a NULL column in production.

Columns of the DDL that no insert carries are listed in :data:`DERIVED_COLUMNS`: the store
computes them while inserting.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Final

import pyarrow as pa

TOOL_CALLS: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("tool_name", pa.string()),
        ("service_name", pa.string()),
        ("agent_name", pa.string()),
        ("dialect", pa.string()),
        ("source", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ms", pa.float64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("encoding", pa.string()),
        ("raw_bytes", pa.int64()),
        ("raw_tokens", pa.int64()),
        ("raw_tokens_exact", pa.bool_()),
        ("view_bytes", pa.int64()),
        ("view_tokens", pa.int64()),
        ("view_tokens_exact", pa.bool_()),
        ("view_source", pa.string()),
        ("budget_tokens", pa.int64()),
        ("over_budget", pa.bool_()),
        ("view_over_budget", pa.bool_()),
        ("truncated", pa.bool_()),
        ("truncation_source", pa.string()),
        ("truncation_kind", pa.string()),
        ("retained_ranges", pa.list_(pa.list_(pa.int64()))),
        ("retained_source", pa.string()),
        ("retained_bytes", pa.int64()),
        ("omitted_bytes", pa.int64()),
        ("shape", pa.string()),
        ("shape_source", pa.string()),
        ("schema_fingerprint", pa.string()),
        ("schema_fields", pa.list_(pa.string())),
        ("arguments", pa.string()),
        ("warnings", pa.list_(pa.string())),
        ("redactions", pa.int32()),
        ("retained_coverage", pa.float64()),
        ("raw_wrapper", pa.string()),
        ("wrapper_bytes", pa.int64()),
        ("wrapper_tokens", pa.int64()),
        ("view_join", pa.string()),
        ("origin", pa.string()),
        ("token_counter", pa.string()),
        ("handle", pa.string()),
        ("items_total", pa.int64()),
        ("items_shown", pa.int64()),
        ("retained_items", pa.list_(pa.list_(pa.int64()))),
    ]
)
"""A row of ``tool_calls`` as the pipeline hands it over (one per measured tool call)."""

LLM_CALLS: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("service_name", pa.string()),
        ("dialect", pa.string()),
        ("source", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("model", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cache_read_tokens", pa.int64()),
        ("cache_write_tokens", pa.int64()),
        ("cleared_tool_uses", pa.int64()),
        ("cleared_input_tokens", pa.int64()),
        ("compacted", pa.bool_()),
        ("compaction_parts", pa.int64()),
    ]
)
"""A row of ``llm_calls``: the fields of :class:`collector.model.LlmCall`."""

PAYLOADS: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("kind", pa.string()),
        ("total_bytes", pa.int64()),
        ("sha256", pa.string()),
        ("cut", pa.bool_()),
        ("head_bytes", pa.int64()),
        ("tail_bytes", pa.int64()),
        ("blob_id", pa.string()),
        ("inline", pa.binary()),
        ("start_ns", pa.int64()),
        ("same_as", pa.string()),
        ("inline_codec", pa.string()),
    ]
)
"""A row of ``payloads``: where one raw or view payload of a tool call is kept."""

MESSAGE_VIEWS: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("llm_span_id", pa.string()),
        ("bytes", pa.int64()),
        ("tokens", pa.int64()),
        ("blob_id", pa.string()),
        ("inline", pa.binary()),
        ("tool_name", pa.string()),
        ("position", pa.int32()),
        ("llm_start_ns", pa.int64()),
        ("service_name", pa.string()),
        ("dialect", pa.string()),
    ]
)
"""A row of ``message_views``: a tool response as an LLM call's input carried it."""

TOOL_CALL_NAMES: Final = pa.schema(
    [
        ("trace_id", pa.string()),
        ("tool_call_id", pa.string()),
        ("tool_name", pa.string()),
        ("asked_ns", pa.int64()),
    ]
)
"""A row of ``tool_call_names``: the tool a model's messages named for a call id."""

INGEST_ISSUES: Final = pa.schema(
    [
        ("collector_id", pa.string()),
        ("level", pa.string()),
        ("source", pa.string()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("field", pa.string()),
        ("message", pa.string()),
    ]
)
"""A row of ``ingest_issues``: a problem met while reading a span."""

TABLES: Final = {
    "tool_calls": TOOL_CALLS,
    "llm_calls": LLM_CALLS,
    "payloads": PAYLOADS,
    "message_views": MESSAGE_VIEWS,
    "tool_call_names": TOOL_CALL_NAMES,
    "ingest_issues": INGEST_ISSUES,
}
"""The tables batches insert into, with the schema of their rows."""

DERIVED_COLUMNS: Final = {
    "tool_calls": (
        "start_time",
        "later_llm_calls",
        "cached_reads",
        "cache_written",
        "cleared_at_ns",
        "cleared_by",
        "read_by_model",
    ),
    "llm_calls": ("start_time",),
    "ingest_issues": ("logged_at",),
}
"""Columns of the DDL the store fills in itself: ``start_time`` from ``start_ns`` and
``logged_at`` from the clock as rows go in, ``later_llm_calls`` recounted after every write
(:mod:`collector.store.windowcost`)."""


def table_of(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """``rows`` as an Arrow table of ``schema``: keys of a row that are not columns are left out
    (rows read back for a late join carry extras), missing ones are null. Built a column at a
    time, which for the ~55 columns of a tool call is about 1.6x faster than
    ``pa.Table.from_pylist``."""
    try:
        # rows that have every column (the measured ones): one C call a row takes its values
        # and zip turns them into columns, ~2.5x faster than a .get per cell
        values = list(zip(*map(itemgetter(*schema.names), rows), strict=True)) if len(schema) > 1 else None
    except KeyError:
        values = None
    if values and len(values) == len(schema):
        arrays = [pa.array(column, type=f.type) for column, f in zip(values, schema, strict=True)]
    else:
        arrays = [pa.array([row.get(f.name) for row in rows], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
