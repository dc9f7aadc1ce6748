"""Coverage: per service and dialect, how much of each tool call toolmeter could read.

Used by ``toolmeter doctor`` and the dashboard's Coverage page. One query
(:func:`coverage`) and one table of hints (:data:`HINTS`), each naming the setting of the
framework that would close a gap; a hint is shown only for a row that has that gap.

Keys of each row (``toolmeter doctor --json`` prints a list of these objects):

``service``, ``dialect``
    ``tool_calls.service_name`` and ``dialect`` (rows with LLM calls only have ``calls = 0``).
``calls``
    tool calls.
``raw_measured``, ``raw_rate``
    calls whose raw result was measured: ``raw_tokens IS NOT NULL AND raw_tokens_exact``, from a
    tool span or log (not ``origin = 'messages'``, whose raw is only the message the model got).
``raw_missing``
    calls from a span or log with no measured raw (none, estimated, or declared by the source).
``raw_estimated``
    calls whose raw tokens are an estimate (``raw_tokens_exact`` false: cut, or the source's figure).
``raw_cut``
    calls with a warning that the raw was cut at ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``.
``attributes_dropped``
    calls whose span lost attributes to ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``.
``view_found``, ``view_rate``, ``view_missing``
    calls with a view the model was shown, joined from its input messages or declared
    (``view_source`` in ``message``, ``view``, ``declared``, ``retained``); missing ones are
    ``raw`` (the model is assumed to have seen the raw), counted as missing only where a later
    model call read the result and the dialect could have said what it showed.
``view_not_needed``
    calls with no view that no later model call read (the last call of a run), and calls of
    toolmeter's own dialect, where no ``toolmeter.view`` means the model was shown the raw.
``call_id``, ``call_id_rate``
    calls with a ``tool_call_id``.
``no_view_no_call_id``
    calls with neither: nothing to join a view by but the conversation.
``joined_by_call_id``, ``joined_by_order_content``, ``joined_by_order``, ``joined_by_order_rate``
    how message views were joined (``view_join``); the rate is of ``calls``.
``from_messages``
    calls recorded from an LLM call's input messages: no tool span existed (``origin = 'messages'``).
``envelopes_removed``, ``wrapper_tokens``, ``envelope_kinds``
    raws with a framework envelope removed (``raw_wrapper``), the tokens those envelopes added,
    and their kinds.
``llm_calls``
    rows of ``llm_calls`` with that service and dialect (time and service filters apply).
``hints``
    the hints that apply to the row (strings; see :data:`HINTS`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import duckdb

from collector.errors import StoreError
from collector.query.ranking import Filters
from collector.store.database import rows_as_dicts

VIEW_SOURCES = ("message", "view", "declared", "retained")
"""``view_source`` values that mean a view was found; ``raw`` means none was."""

KEYS = (
    "service", "dialect", "calls", "raw_measured", "raw_rate", "raw_missing", "raw_estimated", "raw_cut",
    "attributes_dropped", "view_found", "view_rate", "view_missing", "view_not_needed", "call_id", "call_id_rate", "no_view_no_call_id",
    "joined_by_call_id", "joined_by_order_content", "joined_by_order", "joined_by_order_rate", "from_messages",
    "envelopes_removed", "wrapper_tokens", "envelope_kinds", "llm_calls", "hints",
)  # fmt: skip
"""The keys of every coverage row, in order."""

_OPTIONAL_COLUMNS = ("raw_wrapper", "wrapper_tokens", "view_join", "origin", "warnings")
"""Columns added after the first stores: read as NULL from a store that predates them."""


@dataclass(frozen=True)
class Hint:
    """A setting that would close a gap, for the dialects it applies to (empty: any)."""

    gap: str
    """``raw`` | ``view`` | ``no_call_id`` | ``order`` | ``messages`` | ``raw_cut`` |
    ``attributes_dropped`` | ``no_llm_calls`` | ``no_tool_calls``."""
    text: str
    dialects: tuple[str, ...] = ()


_GENAI_CONTENT = (
    "OpenTelemetry GenAI instrumentations gate content: set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true "
    "(openai-v2 and other contrib instrumentations; with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental "
    "use span_and_event or span_only). Strands: content is in span events by default (read), or set "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental. ADK: "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT (schema v2). "
    "OpenLLMetry: TRACELOOP_TRACE_CONTENT=true (the default)."
)
_CLAUDE_CODE = (
    "Claude Code's log events carry sizes only, no content: raw tokens cannot be counted and no view can be read "
    "(the model is assumed to have seen the raw). No setting adds results; OTEL_LOG_TOOL_DETAILS=1 adds arguments."
)
_PYDANTIC_AI = (
    "Pydantic AI: InstrumentationSettings(include_content=True) (the default) records tool results and messages."
)

HINTS: tuple[Hint, ...] = (
    Hint("raw", _GENAI_CONTENT, ("gen_ai",)),
    Hint("view", _GENAI_CONTENT, ("gen_ai",)),
    Hint(
        "raw",
        "OpenInference: OPENINFERENCE_HIDE_OUTPUTS must be unset or false (tool results are output.value).",
        ("openinference",),
    ),
    Hint(
        "view",
        "OpenInference: OPENINFERENCE_HIDE_INPUT_MESSAGES and OPENINFERENCE_HIDE_OUTPUT_MESSAGES must be "
        "unset or false (the model's input messages carry the views).",
        ("openinference",),
    ),
    Hint(
        "raw",
        "Traceloop/OpenLLMetry: TRACELOOP_TRACE_CONTENT=true (the default; or Traceloop.init(trace_content=True)).",
        ("traceloop",),
    ),
    Hint(
        "view",
        "Traceloop/OpenLLMetry: TRACELOOP_TRACE_CONTENT=true also records the prompts (gen_ai.prompt.*) "
        "the views are read from.",
        ("traceloop",),
    ),
    Hint(
        "raw",
        "Vercel AI SDK: telemetry recordOutputs must be true (the default) for ai.toolCall.result.",
        ("vercel_ai",),
    ),
    Hint(
        "view",
        "Vercel AI SDK: telemetry recordInputs must be true (the default) for the model calls' ai.prompt.messages.",
        ("vercel_ai",),
    ),
    Hint(
        "raw",
        "Langfuse: tool observations need their output (@observe(capture_output=True); "
        "LANGFUSE_OBSERVE_DECORATOR_IO_CAPTURE_ENABLED must not be false).",
        ("langfuse",),
    ),
    Hint(
        "view",
        "Langfuse: generation observations need their input (langfuse.observation.input; "
        "@observe(capture_input=True), LANGFUSE_OBSERVE_DECORATOR_IO_CAPTURE_ENABLED not false).",
        ("langfuse",),
    ),
    Hint(
        "raw",
        "MLflow: TOOL spans need their outputs (mlflow.spanOutputs): trace the tool with autolog or "
        "@mlflow.trace(span_type='TOOL').",
        ("mlflow",),
    ),
    Hint(
        "view",
        "MLflow: LLM / CHAT_MODEL spans need their inputs (mlflow.spanInputs): trace the model call with autolog.",
        ("mlflow",),
    ),
    Hint("raw", _PYDANTIC_AI, ("pydantic_ai",)),
    Hint("view", _PYDANTIC_AI, ("pydantic_ai",)),
    Hint("raw", _CLAUDE_CODE, ("claude_code",)),
    Hint("view", _CLAUDE_CODE, ("claude_code",)),
    Hint(
        "raw", "toolmeter: call collector.record_tool_result(raw=...) in the tool (sets toolmeter.raw).", ("toolmeter",)
    ),
    Hint(
        "view",
        "toolmeter: pass view=... to collector.record_tool_result when the model is shown something "
        "other than the raw.",
        ("toolmeter",),
    ),
    Hint(
        "no_call_id",
        "{no_view_no_call_id} call(s) have no view and no call id: the model's next LLM call must "
        "be traced with its input messages (the tool spans carry no call id, so views are joined by the "
        "conversation: tool name, order, content).",
    ),
    Hint(
        "no_llm_calls",
        "No LLM calls recorded for this service: views are read from the model calls' input "
        "messages, so the model calls must be traced too.",
    ),
    Hint(
        "order",
        "{joined_by_order} view(s) ({joined_by_order_pct}) joined by order only (the only call and "
        "response of that tool around the model call; no raw to confirm it): record the call id on the tool "
        "span (gen_ai.tool.call.id) or its result to make the join certain.",
    ),
    Hint(
        "messages",
        "{from_messages} call(s) recorded from the model's input messages: no tool span was "
        "exported, so their raw is the message the application sent, not what the tool returned. Export the "
        "framework's tool spans (or wrap the tool with collector.measured_tool).",
    ),
    Hint(
        "raw_cut",
        "{raw_cut} raw result(s) cut at OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: raise it (or unset it), or "
        "record results with collector.record_tool_result.",
    ),
    Hint(
        "attributes_dropped",
        "{attributes_dropped} span(s) lost attributes to OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT: raise it.",
    ),
    Hint(
        "no_tool_calls",
        "LLM calls but no tool calls: if the agent uses tools, neither their spans nor tool "
        "responses in the model calls' input messages were recorded (see the content settings above).",
    ),
)
"""Every hint, in the order shown. Texts may name row keys in braces; ``{joined_by_order_pct}``
is the order-only share as a percentage."""


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str] | None:
    rows = con.execute(
        "SELECT DISTINCT column_name FROM information_schema.columns WHERE table_name = ?", [table]
    ).fetchall()
    return {r[0] for r in rows} or None


def check_store(con: duckdb.DuckDBPyConnection, where: str = "the store") -> set[str]:
    """The columns of ``tool_calls``.

    Raises:
        StoreError: there is no ``tool_calls`` table: not a toolmeter store.
    """
    try:
        columns = _columns(con, "tool_calls")
    except duckdb.Error as e:
        raise StoreError(f"{where} cannot be read as a toolmeter store: {e}") from e
    if not columns:
        raise StoreError(
            f"{where} is not a toolmeter store (it has no tool_calls table). Give the --db that "
            "`toolmeter ingest`, `serve` or ToolResultProcessor writes to."
        )
    return columns


def _llm_where(filters: Filters) -> tuple[str, list[Any]]:
    """The filters that apply to ``llm_calls``: time range and services (it has no tool or encoding)."""
    return Filters(since=filters.since, until=filters.until, services=filters.services).where()


def coverage(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per service and dialect (keys: :data:`KEYS`), ordered by service then dialect.

    Raises:
        StoreError: the store has no ``tool_calls`` table.
    """
    filters = filters or Filters()
    columns = check_store(con)
    col = {c: (c if c in columns else "NULL") for c in _OPTIONAL_COLUMNS}
    views = ", ".join(f"'{v}'" for v in VIEW_SOURCES)
    where, params = filters.where()
    has_view = f"view_source IN ({views})"
    spanned = f"{col['origin']} IS DISTINCT FROM 'messages'"
    measured = "raw_tokens IS NOT NULL AND coalesce(raw_tokens_exact, FALSE)"
    warnings = f"coalesce(array_to_string({col['warnings']}, chr(10)), '')"
    tools = f"""
        SELECT service_name, dialect, count(*) AS calls,
            count(*) FILTER (WHERE {measured} AND {spanned}) AS raw_measured,
            count(*) FILTER (WHERE NOT ({measured}) AND {spanned}) AS raw_missing,
            count(*) FILTER (WHERE raw_tokens IS NOT NULL AND NOT coalesce(raw_tokens_exact, FALSE)) AS raw_estimated,
            count(*) FILTER (WHERE {warnings} LIKE '%OTEL\\_ATTRIBUTE\\_VALUE\\_LENGTH\\_LIMIT%' ESCAPE '\\') AS raw_cut,
            count(*) FILTER (WHERE {warnings} LIKE '%OTEL\\_SPAN\\_ATTRIBUTE\\_COUNT\\_LIMIT%' ESCAPE '\\')
                AS attributes_dropped,
            count(*) FILTER (WHERE {has_view}) AS view_found,
            count(*) FILTER (WHERE NOT coalesce({has_view}, FALSE)
                             AND (coalesce(later_llm_calls, 0) = 0 OR dialect = 'toolmeter')) AS view_not_needed,
            count(*) FILTER (WHERE tool_call_id IS NOT NULL) AS call_id,
            count(*) FILTER (WHERE NOT coalesce({has_view}, FALSE) AND tool_call_id IS NULL) AS no_view_no_call_id,
            count(*) FILTER (WHERE {col["view_join"]} = 'call_id') AS joined_by_call_id,
            count(*) FILTER (WHERE {col["view_join"]} = 'order_content') AS joined_by_order_content,
            count(*) FILTER (WHERE {col["view_join"]} = 'order') AS joined_by_order,
            count(*) FILTER (WHERE {col["origin"]} = 'messages') AS from_messages,
            count(*) FILTER (WHERE {col["raw_wrapper"]} IS NOT NULL) AS envelopes_removed,
            coalesce(sum({col["wrapper_tokens"]}) FILTER (WHERE {col["raw_wrapper"]} IS NOT NULL), 0) AS wrapper_tokens,
            coalesce(list(DISTINCT {col["raw_wrapper"]} ORDER BY {col["raw_wrapper"]})
                     FILTER (WHERE {col["raw_wrapper"]} IS NOT NULL), []) AS envelope_kinds
        FROM tool_calls WHERE {where} GROUP BY ALL
    """  # the interpolated names are ours; values are bound
    llm_sql = "SELECT NULL::VARCHAR AS service_name, NULL::VARCHAR AS dialect, 0 AS llm_calls WHERE FALSE"
    llm_params: list[Any] = []
    llm_columns = _columns(con, "llm_calls") or set()
    if {"service_name", "dialect", "start_time"} <= llm_columns:
        llm_where, llm_params = _llm_where(filters)
        llm_sql = f"SELECT service_name, dialect, count(*) AS llm_calls FROM llm_calls WHERE {llm_where} GROUP BY ALL"
    sql = f"""
        WITH t AS ({tools}), l AS ({llm_sql})
        SELECT coalesce(t.service_name, l.service_name) AS service, coalesce(t.dialect, l.dialect) AS dialect,
               coalesce(t.calls, 0) AS calls, t.* EXCLUDE (service_name, dialect, calls),
               coalesce(l.llm_calls, 0) AS llm_calls
        FROM t FULL OUTER JOIN l
          ON t.service_name IS NOT DISTINCT FROM l.service_name AND t.dialect IS NOT DISTINCT FROM l.dialect
        ORDER BY service NULLS LAST, dialect NULLS LAST
    """
    rows = rows_as_dicts(con.execute(sql, [*params, *llm_params]))
    return [_finish(r) for r in _with_service_llm_calls(rows)]


def _with_service_llm_calls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    per_service: dict[Any, int] = defaultdict(int)
    for r in rows:
        per_service[r["service"]] += int(r["llm_calls"])
    for r in rows:
        r["_service_llm_calls"] = per_service[r["service"]]
    return rows


def _finish(r: dict[str, Any]) -> dict[str, Any]:
    calls = int(r["calls"])
    for key in KEYS:
        if key not in ("service", "dialect", "envelope_kinds", "hints") and not key.endswith("_rate"):
            r[key] = int(r.get(key) or 0)
    r["envelope_kinds"] = list(r.get("envelope_kinds") or [])

    def rate(n: int) -> float | None:
        return n / calls if calls else None

    # with no model call traced for the service, "no later model call" is the gap itself
    traced = r.get("_service_llm_calls", r["llm_calls"]) > 0
    r["view_missing"] = calls - r["view_found"] - (r["view_not_needed"] if traced else 0)
    r["raw_rate"], r["view_rate"] = rate(r["raw_measured"]), rate(r["view_found"])
    r["call_id_rate"], r["joined_by_order_rate"] = rate(r["call_id"]), rate(r["joined_by_order"])
    r["hints"] = hints_for(r)
    return {k: r[k] for k in KEYS}


def gaps(row: dict[str, Any]) -> set[str]:
    """The gaps a coverage row has (the ``gap`` values of :class:`Hint`)."""
    found = set()
    if row["calls"] == 0:
        return {"no_tool_calls"} if row["llm_calls"] else set()
    if row["raw_missing"]:
        found.add("raw")
    if row["view_missing"]:
        # with no model call traced at all, that comes first: the content settings cannot help yet
        no_llm = row.get("_service_llm_calls", row["llm_calls"]) == 0
        found.add("no_llm_calls" if no_llm else "view")
    for gap, key in (("no_call_id", "no_view_no_call_id"), ("order", "joined_by_order"),
                     ("messages", "from_messages"), ("raw_cut", "raw_cut"),
                     ("attributes_dropped", "attributes_dropped")):  # fmt: skip
        if row[key]:
            found.add(gap)
    return found


def hints_for(row: dict[str, Any]) -> list[str]:
    """The hints for the gaps of ``row``, each once, in :data:`HINTS` order."""
    have = gaps(row)
    values = {**row, "joined_by_order_pct": f"{(row.get('joined_by_order_rate') or 0) * 100:.0f}%"}
    out: list[str] = []
    for hint in HINTS:
        if hint.gap not in have or (hint.dialects and row["dialect"] not in hint.dialects):
            continue
        text = hint.text.format(**values)
        if text not in out:
            out.append(text)
    return out
