"""OpenTelemetry metrics of tool results: what each tool puts into the context window.

:class:`ToolMetrics` turns the tool rows the collector writes into OpenTelemetry metrics,
so p99 tool-result sizes, truncations and errors can be charted and alerted on in any
metrics backend (Prometheus, an OpenTelemetry Collector, ...) next to the agent's other
metrics. It uses the OpenTelemetry metrics *API* only: the application chooses the SDK,
readers and exporters (the global ``MeterProvider`` unless one is passed in).

Instruments (meter ``toolmeter``)
---------------------------------

=====================================  =========  ===========  ==============================================
instrument                             kind       unit         recorded
=====================================  =========  ===========  ==============================================
``toolmeter.tool.view_tokens``         histogram  ``{token}``  per tool call: tokens the model was shown
``toolmeter.tool.raw_tokens``          histogram  ``{token}``  per tool call: tokens the tool produced
``toolmeter.tool.calls``               counter    ``{call}``   every tool call
``toolmeter.tool.truncations``         counter    ``{call}``   tool calls whose result was truncated
``toolmeter.tool.over_budget``         counter    ``{call}``   tool calls whose raw result exceeded the budget
``toolmeter.tool.errors``              counter    ``{call}``   tool calls with span status ``error``
``toolmeter.collector.dropped_spans``  counter    ``{span}``   spans dropped because the queue was full
=====================================  =========  ===========  ==============================================

The tool instruments carry these attributes; one that is unknown for a call (``None`` in
its row) is left out rather than recorded empty:

* ``gen_ai.tool.name``: the tool's name (the row's ``tool_name``);
* ``service.name``: the agent's service (``service_name``), when known; a data point
  attribute, since one receiver measures many agents (the resource's ``service.name`` is
  the process that records, e.g. ``toolmeter serve``);
* ``toolmeter.encoding``: the tiktoken encoding of the counts, ``o200k_base`` or ``cl100k_base``.

``toolmeter.collector.dropped_spans`` has no attributes. A histogram is not recorded for a
call whose count is unknown (Claude Code events carry bytes, not tokens; a view that is
joined later from an LLM call's input). Tool names become metric streams: a deployment
with thousands of distinct tool names meets the SDK's cardinality limit (2,000 streams
per instrument by default) and should filter the attribute with a View.

Histogram buckets
-----------------

Tool output is long-tailed, so the histograms advise explicit bucket boundaries at powers
of two from 16 to 1,048,576 tokens (:data:`TOKEN_BUCKETS`, through the API's
``explicit_bucket_boundaries_advisory``): every bucket spans a factor of two, so an
interpolated p99 is within a factor of two of the truth from a 16-token reply to a
megatoken page, where the SDK's default boundaries stop at 10,000. No View is needed; a
View with another ``ExplicitBucketHistogramAggregation`` still overrides the advice.

Prometheus
----------

With ``opentelemetry-exporter-prometheus`` (``PrometheusMetricReader``) the names become
(dots to underscores; the ``{token}``, ``{call}`` and ``{span}`` annotations add no unit
suffix; counters get ``_total``)::

    toolmeter_tool_view_tokens_bucket / _sum / _count
    toolmeter_tool_raw_tokens_bucket  / _sum / _count
    toolmeter_tool_calls_total
    toolmeter_tool_truncations_total
    toolmeter_tool_over_budget_total
    toolmeter_tool_errors_total
    toolmeter_collector_dropped_spans_total

with the labels ``gen_ai_tool_name``, ``service_name`` and ``toolmeter_encoding`` (plus the
exporter's ``otel_scope_name``, ``otel_scope_version`` and ``otel_scope_schema_url``).
p99 of view tokens per tool over five minutes::

    histogram_quantile(0.99, sum by (le, gen_ai_tool_name) (rate(toolmeter_tool_view_tokens_bucket[5m])))

and the share of calls truncated per tool::

    sum by (gen_ai_tool_name) (rate(toolmeter_tool_truncations_total[5m]))
      / sum by (gen_ai_tool_name) (rate(toolmeter_tool_calls_total[5m]))

Use
---

::

    metrics = ToolMetrics()                 # or ToolMetrics(meter_provider=provider)
    result = pipeline.write(batch)
    metrics.record_rows(batch.tool_rows)
    metrics.record_dropped_total(pipeline.counters.dropped)

Record each tool call once: the store skips a span it already holds (a duplicate), but
metrics cannot, so rows of a batch that is written again are counted again. The record
methods never raise: a failure is logged at debug level on the ``toolmeter`` logger and
the call returns, since the collector records after every write.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics

logger = logging.getLogger("toolmeter")

METER_NAME = "toolmeter"

VIEW_TOKENS = "toolmeter.tool.view_tokens"
RAW_TOKENS = "toolmeter.tool.raw_tokens"
CALLS = "toolmeter.tool.calls"
TRUNCATIONS = "toolmeter.tool.truncations"
OVER_BUDGET = "toolmeter.tool.over_budget"
ERRORS = "toolmeter.tool.errors"
DROPPED_SPANS = "toolmeter.collector.dropped_spans"

ATTR_TOOL_NAME = "gen_ai.tool.name"
ATTR_SERVICE_NAME = "service.name"
ATTR_ENCODING = "toolmeter.encoding"

TOKEN_BUCKETS: tuple[int, ...] = tuple(2**k for k in range(4, 21))
"""Histogram bucket boundaries in tokens: 16, 32, 64, ..., 524,288, 1,048,576."""

# row key -> attribute name
_ATTRIBUTE_KEYS = (
    ("tool_name", ATTR_TOOL_NAME),
    ("service_name", ATTR_SERVICE_NAME),
    ("encoding", ATTR_ENCODING),
)


METRIC_COLUMNS = ("tool_name", "service_name", "encoding", "view_tokens", "raw_tokens", "truncated", "over_budget",
                  "status")  # fmt: skip
"""The columns of a tool row that :meth:`ToolMetrics.record_rows` reads."""


def _version() -> str:
    try:
        return importlib.metadata.version("toolmeter")
    except Exception:  # run from a source tree that is not installed: the scope has no version
        return ""


def tool_attributes(row: Mapping[str, Any]) -> dict[str, Any]:
    """The metric attributes of one tool row; keys whose value is None are left out."""
    return {attr: row[key] for key, attr in _ATTRIBUTE_KEYS if row.get(key) is not None}


class ToolMetrics:
    """Records tool rows as OpenTelemetry metrics (see the module docstring for the instruments).

    Args:
        meter_provider: the provider to create the ``toolmeter`` meter with; the global
            provider when None (a no-op until the application sets one).
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        self._lock = threading.Lock()
        self._dropped_total_seen = 0
        try:
            self._create(metrics.get_meter(METER_NAME, _version(), meter_provider))
        except Exception:  # a broken provider must not stop the collector: record nothing
            logger.warning("toolmeter could not create its metrics; none will be recorded", exc_info=True)
            self._create(metrics.NoOpMeter(METER_NAME))

    def _create(self, meter: metrics.Meter) -> None:
        self.view_tokens = meter.create_histogram(
            VIEW_TOKENS,
            unit="{token}",
            description="Tokens of a tool result that the model was shown (the view).",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.raw_tokens = meter.create_histogram(
            RAW_TOKENS,
            unit="{token}",
            description="Tokens of a tool result as the tool produced it (the raw result).",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.calls = meter.create_counter(CALLS, unit="{call}", description="Tool calls measured.")
        self.truncations = meter.create_counter(
            TRUNCATIONS, unit="{call}", description="Tool calls whose result was truncated before the model saw it."
        )
        self.over_budget = meter.create_counter(
            OVER_BUDGET, unit="{call}", description="Tool calls whose raw result exceeded the tool's token budget."
        )
        self.errors = meter.create_counter(ERRORS, unit="{call}", description="Tool calls that ended in an error.")
        self.dropped_spans = meter.create_counter(
            DROPPED_SPANS,
            unit="{span}",
            description="Tool and LLM spans dropped because the collector's queue was full.",
        )

    @property
    def recording(self) -> bool:
        """False while the global meter provider is the API's placeholder (no metrics SDK set
        yet): every instrument would drop what it is given, so a batch's rows are not read for
        it. True as soon as an SDK is set, and whenever this can't tell (an explicit provider,
        another API version): then the rows are recorded as always."""
        return getattr(self.calls, "_real_instrument", self) is not None

    def record_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Record one batch of tool rows (as :meth:`collector.pipeline.Pipeline.build_batch` makes them).

        Each row counts one call; its token histograms are recorded when the count is
        known; truncation, over-budget and error are counted when true. Never raises: a
        row that cannot be recorded is skipped and logged at debug level.
        """
        try:
            for row in rows:
                try:
                    self._record_row(row)
                except Exception:
                    logger.debug("toolmeter could not record metrics for a tool row", exc_info=True)
        except Exception:  # e.g. ``rows`` is not iterable
            logger.debug("toolmeter could not record metrics for a batch of tool rows", exc_info=True)

    def _record_row(self, row: Mapping[str, Any]) -> None:
        attrs = tool_attributes(row)
        self.calls.add(1, attrs)
        view = row.get("view_tokens")
        if view is not None:
            self.view_tokens.record(view, attrs)
        raw = row.get("raw_tokens")
        if raw is not None:
            self.raw_tokens.record(raw, attrs)
        if row.get("truncated"):
            self.truncations.add(1, attrs)
        if row.get("over_budget"):
            self.over_budget.add(1, attrs)
        if row.get("status") == "error":
            self.errors.add(1, attrs)

    def record_dropped(self, n: int) -> None:
        """Count ``n`` more dropped spans (a delta; zero or less records nothing). Never raises."""
        try:
            if n > 0:
                self.dropped_spans.add(n)
        except Exception:
            logger.debug("toolmeter could not record dropped spans", exc_info=True)

    def record_dropped_total(self, total: int) -> None:
        """Record the collector's running total of dropped spans (``Counters.dropped``).

        Adds what the total grew by since the last call. A smaller total than last time
        (a forked child's collector starts again from zero) counts as a restart: the whole
        new total is added. Never raises.
        """
        try:
            with self._lock:
                delta = total - self._dropped_total_seen if total >= self._dropped_total_seen else total
                self._dropped_total_seen = total
            self.record_dropped(delta)
        except Exception:
            logger.debug("toolmeter could not record dropped spans", exc_info=True)
