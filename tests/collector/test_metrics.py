"""ToolMetrics: tool rows as OpenTelemetry metrics, read in memory and scraped by Prometheus."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, NumberDataPoint

from collector.measure.measurement import measure
from collector.metrics import (
    CALLS,
    DROPPED_SPANS,
    ERRORS,
    METER_NAME,
    OVER_BUDGET,
    RAW_TOKENS,
    TOKEN_BUCKETS,
    TRUNCATIONS,
    VIEW_TOKENS,
    ToolMetrics,
)
from collector.model import ToolCall

SEARCH = {"gen_ai.tool.name": "search_orders", "service.name": "shop-agent", "toolmeter.encoding": "o200k_base"}
LOGS = {"gen_ai.tool.name": "fetch_pod_logs", "toolmeter.encoding": "o200k_base"}  # service unknown


def row(tool: str, service: str | None, view: int | None, raw: int | None, **kw: Any) -> dict[str, Any]:
    """A tool row with the keys Pipeline.build_batch gives it (the ones metrics read, and a few others)."""
    base: dict[str, Any] = {
        "trace_id": "a" * 32,
        "span_id": "b" * 16,
        "tool_name": tool,
        "service_name": service,
        "agent_name": None,
        "encoding": "o200k_base",
        "view_tokens": view,
        "raw_tokens": raw,
        "view_bytes": None,
        "raw_bytes": None,
        "budget_tokens": None,
        "truncated": None,
        "over_budget": None,
        "status": "ok",
        "warnings": [],
    }
    base.update(kw)
    return base


def rows() -> list[dict[str, Any]]:
    return [
        # search_orders: three calls; one truncated and over budget
        row("search_orders", "shop-agent", 100, 50_000, truncated=True, over_budget=True, budget_tokens=25_000),
        row("search_orders", "shop-agent", 3_000, 3_000, truncated=False, over_budget=False, budget_tokens=25_000),
        row("search_orders", "shop-agent", 20_000, 20_000, status="unset"),
        # fetch_pod_logs: a megabyte log with no view count (joined later), and an error of exactly 16 tokens
        row("fetch_pod_logs", None, None, 1_200_000, truncated=True),
        row("fetch_pod_logs", None, 16, 16, status="error"),
    ]


def points(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[tuple[str, Any]], Any]]:
    """{metric name: {attributes: data point}} for the toolmeter meter."""
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[frozenset[tuple[str, Any]], Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            assert sm.scope.name == METER_NAME
            for metric in sm.metrics:
                by_attrs = out.setdefault(metric.name, {})
                for p in metric.data.data_points:
                    by_attrs[frozenset((p.attributes or {}).items())] = p
    return out


def key(attrs: dict[str, str]) -> frozenset[tuple[str, Any]]:
    return frozenset(attrs.items())


def buckets(**counts: int) -> list[int]:
    """Bucket counts for TOKEN_BUCKETS plus +Inf, from {"le_<bound>": n, "inf": n}."""
    out = [0] * (len(TOKEN_BUCKETS) + 1)
    for name, n in counts.items():
        out[len(TOKEN_BUCKETS) if name == "inf" else TOKEN_BUCKETS.index(int(name[3:]))] = n
    return out


class Sdk(NamedTuple):
    provider: MeterProvider
    reader: InMemoryMetricReader


@pytest.fixture
def sdk() -> Iterator[Sdk]:
    """An SDK MeterProvider read in memory; shut down after the test."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield Sdk(provider, reader)
    provider.shutdown()


def test_histograms_counters_and_attributes_per_tool(sdk: Sdk) -> None:
    metrics = ToolMetrics(meter_provider=sdk.provider)
    metrics.record_rows(rows()[:3])
    metrics.record_rows(rows()[3:])  # a second batch adds to the first
    metrics.record_dropped(3)
    metrics.record_dropped(0)  # nothing to add
    got = points(sdk.reader)

    view = got[VIEW_TOKENS]
    assert set(view) == {key(SEARCH), key(LOGS)}
    s = view[key(SEARCH)]
    assert isinstance(s, HistogramDataPoint)
    assert list(s.explicit_bounds) == list(TOKEN_BUCKETS)  # the advice applies with no View
    assert (s.count, s.sum, s.min, s.max) == (3, 23_100, 100, 20_000)
    # 100 in (64, 128], 3,000 in (2,048, 4,096], 20,000 in (16,384, 32,768]
    assert list(s.bucket_counts) == buckets(le_128=1, le_4096=1, le_32768=1)
    g = view[key(LOGS)]
    assert (g.count, g.sum) == (1, 16)  # the call with no view count is not in the histogram
    assert list(g.bucket_counts) == buckets(le_16=1)  # upper bounds are inclusive

    raw = got[RAW_TOKENS]
    assert (raw[key(SEARCH)].count, raw[key(SEARCH)].sum) == (3, 73_000)
    assert list(raw[key(SEARCH)].bucket_counts) == buckets(le_4096=1, le_32768=1, le_65536=1)
    assert (raw[key(LOGS)].count, raw[key(LOGS)].sum) == (2, 1_200_016)
    assert list(raw[key(LOGS)].bucket_counts) == buckets(le_16=1, inf=1)  # over 1,048,576: the +Inf bucket

    def value(name: str, attrs: dict[str, str]) -> int | float:
        p = got[name][key(attrs)]
        assert isinstance(p, NumberDataPoint)
        return p.value

    assert value(CALLS, SEARCH) == 3 and value(CALLS, LOGS) == 2
    assert value(TRUNCATIONS, SEARCH) == 1 and value(TRUNCATIONS, LOGS) == 1
    assert value(OVER_BUDGET, SEARCH) == 1 and key(LOGS) not in got[OVER_BUDGET]  # None is not over budget
    assert value(ERRORS, LOGS) == 1 and key(SEARCH) not in got[ERRORS]
    assert got[DROPPED_SPANS] == {frozenset(): got[DROPPED_SPANS][frozenset()]}  # no attributes
    assert value(DROPPED_SPANS, {}) == 3


def test_instrument_units_and_kinds(sdk: Sdk) -> None:
    metrics = ToolMetrics(meter_provider=sdk.provider)
    metrics.record_rows(rows())
    metrics.record_dropped(1)
    data = sdk.reader.get_metrics_data()
    assert data is not None
    found = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert set(found) == {VIEW_TOKENS, RAW_TOKENS, CALLS, TRUNCATIONS, OVER_BUDGET, ERRORS, DROPPED_SPANS}
    assert found[VIEW_TOKENS].unit == found[RAW_TOKENS].unit == "{token}"
    assert {found[n].unit for n in (CALLS, TRUNCATIONS, OVER_BUDGET, ERRORS)} == {"{call}"}
    assert found[DROPPED_SPANS].unit == "{span}"
    for name in (CALLS, TRUNCATIONS, OVER_BUDGET, ERRORS, DROPPED_SPANS):
        assert found[name].data.is_monotonic  # type: ignore[union-attr]


def test_dropped_total_records_the_growth(sdk: Sdk) -> None:
    metrics = ToolMetrics(meter_provider=sdk.provider)
    for total in (0, 5, 5, 12):  # Counters.dropped after successive writes
        metrics.record_dropped_total(total)
    assert points(sdk.reader)[DROPPED_SPANS][frozenset()].value == 12
    metrics.record_dropped_total(2)  # a smaller total: the collector started again from zero
    assert points(sdk.reader)[DROPPED_SPANS][frozenset()].value == 14
    metrics.record_dropped(-4)  # a negative delta is ignored, not raised
    assert points(sdk.reader)[DROPPED_SPANS][frozenset()].value == 14


def test_rows_measured_by_the_pipeline_are_recorded(sdk: Sdk, counter) -> None:  # type: ignore[no-untyped-def]
    """The row keys metrics read are the ones measure() writes."""
    raw = "\n".join(f"line {i}: pod started" for i in range(2_000))
    view = raw[:400]
    call = ToolCall(
        trace_id="c" * 32,
        span_id="d" * 16,
        tool_name="fetch_pod_logs",
        dialect="gen_ai",
        start_ns=1,
        end_ns=2,
        service_name="sre-agent",
        status="error",
        raw=raw,
        view=view,
        budget_tokens=100,
    )
    measured = measure(call, counter).row()
    metrics = ToolMetrics(meter_provider=sdk.provider)
    metrics.record_rows([measured])
    got = points(sdk.reader)
    attrs = key({"gen_ai.tool.name": "fetch_pod_logs", "service.name": "sre-agent", "toolmeter.encoding": "o200k_base"})
    assert got[VIEW_TOKENS][attrs].sum == measured["view_tokens"] > 0
    assert got[RAW_TOKENS][attrs].sum == measured["raw_tokens"] > measured["view_tokens"]
    assert measured["truncated"] is True and measured["over_budget"] is True
    assert got[CALLS][attrs].value == got[TRUNCATIONS][attrs].value == got[OVER_BUDGET][attrs].value == 1
    assert got[ERRORS][attrs].value == 1


def test_never_raises_into_the_caller(sdk: Sdk, caplog: pytest.LogCaptureFixture) -> None:
    metrics = ToolMetrics(meter_provider=sdk.provider)
    caplog.set_level(logging.DEBUG, logger="toolmeter")
    metrics.record_rows(None)  # type: ignore[arg-type]
    metrics.record_rows([42, row("search_orders", "shop-agent", "many", 10)])  # type: ignore[list-item,arg-type]
    metrics.record_rows([row("search_orders", "shop-agent", 100, 200)])  # a good row after bad ones
    metrics.record_dropped("3")  # type: ignore[arg-type]
    metrics.record_dropped_total(None)  # type: ignore[arg-type]
    assert any("could not record" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
    got = points(sdk.reader)
    assert got[VIEW_TOKENS][key(SEARCH)].count == 1  # the bad view was skipped, the good one recorded


def test_a_broken_provider_records_nothing_and_raises_nothing() -> None:
    class Broken:
        def get_meter(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no meters today")

    metrics = ToolMetrics(meter_provider=Broken())  # type: ignore[arg-type]
    metrics.record_rows(rows())
    metrics.record_dropped(2)


def test_global_provider_when_none_is_given() -> None:
    # No global provider is set in the tests: the API's proxy takes the records and drops them.
    metrics = ToolMetrics()
    metrics.record_rows(rows())
    metrics.record_dropped_total(1)


GLOBAL_SET_LATER = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from collector.metrics import ToolMetrics
m = ToolMetrics()
print(m.recording)  # the API's placeholder: nothing would be kept
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
print(m.recording)  # an SDK set after the collector started: recorded from now on
m.record_rows([{"tool_name": "search", "view_tokens": 5, "raw_tokens": 9}])
found = reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
print(sorted(x.name for x in found))
"""


def test_rows_are_read_for_metrics_once_a_global_sdk_is_set_not_before() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", GLOBAL_SET_LATER], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[:2] == ["False", "True"]
    assert lines[2] == str(sorted([CALLS, RAW_TOKENS, VIEW_TOKENS]))
    assert ToolMetrics(MeterProvider()).recording  # an explicit provider: always recorded


# --- Prometheus -------------------------------------------------------------------------


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> tuple[Samples, str]:
    """({(sample name, labels without the exporter's otel_scope_*): value}, the exposition text)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        text = resp.read().decode("utf-8")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = frozenset((k, v) for k, v in s.labels.items() if not k.startswith("otel_scope_"))
            out[(s.name, labels)] = s.value
    return out, text


def test_prometheus_scrape_over_http() -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="needs opentelemetry-exporter-prometheus")
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()  # not the process-wide default registry
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)  # port 0: a free port
    try:
        metrics = ToolMetrics(meter_provider=provider)
        metrics.record_rows(rows())
        metrics.record_dropped_total(7)

        url = f"http://127.0.0.1:{server.server_port}/metrics"
        got, text = scrape(url)

        search = {("gen_ai_tool_name", "search_orders"), ("service_name", "shop-agent")}
        search |= {("toolmeter_encoding", "o200k_base")}
        logs = {("gen_ai_tool_name", "fetch_pod_logs"), ("toolmeter_encoding", "o200k_base")}

        def sample(name: str, labels: set[tuple[str, str]], le: str | None = None) -> float:
            full = labels | ({("le", le)} if le else set())
            if (name, frozenset(full)) not in got:  # a label unknown for this series is exported empty
                full |= {("service_name", "")}
            return got[(name, frozenset(full))]

        # view tokens of search_orders: 100, 3,000 and 20,000 (cumulative buckets)
        b = "toolmeter_tool_view_tokens_bucket"
        cumulative = {"64": 0, "128": 1, "2048": 1, "4096": 2, "16384": 2, "32768": 3, "1048576": 3, "+Inf": 3}
        for le, n in cumulative.items():
            assert sample(b, search, le) == n, le
        assert sample("toolmeter_tool_view_tokens_count", search) == 3
        assert sample("toolmeter_tool_view_tokens_sum", search) == 23_100
        assert sample(b, logs, "16") == sample(b, logs, "+Inf") == 1
        assert sample("toolmeter_tool_view_tokens_sum", logs) == 16
        # raw tokens of fetch_pod_logs: 16 and 1,200,000 (beyond the last bound)
        b = "toolmeter_tool_raw_tokens_bucket"
        assert sample(b, logs, "16") == 1 and sample(b, logs, "1048576") == 1 and sample(b, logs, "+Inf") == 2
        assert sample("toolmeter_tool_raw_tokens_count", logs) == 2
        assert sample("toolmeter_tool_raw_tokens_sum", logs) == 1_200_016
        assert sample("toolmeter_tool_raw_tokens_sum", search) == 73_000
        # every boundary is exported, as an integer
        les = {le for (name, labels), _ in got.items() if name == b for k, le in labels if k == "le"}
        assert les == {str(x) for x in TOKEN_BUCKETS} | {"+Inf"}

        assert sample("toolmeter_tool_calls_total", search) == 3
        assert sample("toolmeter_tool_calls_total", logs) == 2
        assert sample("toolmeter_tool_truncations_total", search) == 1
        assert sample("toolmeter_tool_truncations_total", logs) == 1
        assert sample("toolmeter_tool_over_budget_total", search) == 1
        assert sample("toolmeter_tool_errors_total", logs) == 1
        assert ("toolmeter_tool_errors_total", frozenset(search)) not in got
        assert got[("toolmeter_collector_dropped_spans_total", frozenset())] == 7

        # the names and labels as a Prometheus query writes them
        assert "# TYPE toolmeter_tool_view_tokens histogram" in text
        assert "# TYPE toolmeter_tool_calls_total counter" in text
        assert 'toolmeter_tool_view_tokens_bucket{gen_ai_tool_name="search_orders",le="128",' in text
        assert 'otel_scope_name="toolmeter"' in text

        metrics.record_rows([row("search_orders", "shop-agent", 50, 50)])  # a later scrape sees later calls
        assert scrape(url)[0][("toolmeter_tool_calls_total", frozenset(search))] == 4
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        provider.shutdown()
    assert not thread.is_alive()


def test_the_processor_records_per_tool_metrics(db_path: str) -> None:
    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from collector import ToolResultProcessor

    reader = InMemoryMetricReader()
    meters = SdkMeterProvider(metric_readers=[reader])
    processor = ToolResultProcessor(db=db_path, meter_provider=meters)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    for text in ("one two", "three four five"):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.result": text}
        with provider.get_tracer("t").start_as_current_span("execute_tool lookup", attributes=attrs):
            pass
    assert processor.force_flush()
    provider.shutdown()
    data = reader.get_metrics_data()
    points = {m.name: m.data.data_points for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    (hist,) = points["toolmeter.tool.view_tokens"]
    assert hist.count == 2 and hist.sum == 5 and hist.attributes["gen_ai.tool.name"] == "lookup"
    meters.shutdown()
