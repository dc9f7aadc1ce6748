"""What every framework driver shares: the three tools' payloads and the OTLP exporter set-up.

Drivers run in a framework's own virtual environment (see ``tests/frameworks/conftest.py``),
not in toolmeter's: this module needs only the standard library (and, for
:func:`otlp_tracer_provider`, the OpenTelemetry SDK and OTLP/HTTP exporter the extras pin).

The three tools, as the issue describes a realistic agent's calls:

* ``search_orders(status)``: 300 JSON order rows, about 92 KB;
* ``fetch_logs(pod)``: a 2,000-line pod log;
* ``get_status(order_id)``: a one-line result.

Each returns a string: that string is "what the tool returned", and :func:`write_results`
records it for the test to count with tiktoken.
"""

from __future__ import annotations

import json
import os
from typing import Any

REGIONS = ("eu-west", "us-east", "ap-south")


def orders(status: str = "refunded") -> str:
    rows = []
    for i in range(300):
        rows.append({
            "order_id": f"A-{10001 + i}",
            "status": status,
            "customer": {"name": f"Customer {i:03d}", "email": f"customer{i:03d}@example.com"},
            "region": REGIONS[i % 3],
            "total": round(19.99 + (i * 7.31) % 480, 2),
            "currency": "EUR",
            "items": [{"sku": f"SKU-{(i * 13) % 997:04d}", "qty": 1 + i % 3, "title": "Trail running shoe, waterproof"}],
            "created_at": f"2026-11-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
            "refund_reason": "arrived damaged" if i % 2 else "wrong size",
        })  # fmt: skip
    return json.dumps(rows)


def logs(pod: str = "checkout-7d9f") -> str:
    lines = []
    for i in range(2000):
        level = "ERROR" if i % 97 == 0 else "WARN" if i % 31 == 0 else "INFO"
        lines.append(
            f"2026-11-20T10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z {level} {pod} "
            f"request_id=r{i:05d} path=/api/checkout status={500 if level == 'ERROR' else 200} latency_ms={(i * 37) % 900}"
        )
    return "\n".join(lines)


def status(order_id: str = "A-10001") -> str:
    return f"Order {order_id}: shipped on 2026-11-19 via DHL, tracking 00340434161234567890."


TOOLS = {"search_orders": orders, "fetch_logs": logs, "get_status": status}
DESCRIPTIONS = {
    "search_orders": "Search orders by status; returns the matching orders as JSON.",
    "fetch_logs": "Fetch the recent log lines of a Kubernetes pod.",
    "get_status": "Get the shipping status of one order.",
}
PROMPT = "Why are refunds up? Search refunded orders, fetch the checkout-7d9f logs and check order A-10001."

_returned: dict[str, list[str]] = {}


def returned(name: str, value: str) -> str:
    """Note what a tool returned (call from inside the tool) and pass it through."""
    _returned.setdefault(name, []).append(value)
    return value


def write_results(extra: dict[str, Any] | None = None) -> None:
    """Write what each tool returned to ``$TOOLMETER_FW_RESULTS`` (JSON), for the test."""
    path = os.environ["TOOLMETER_FW_RESULTS"]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"returned": _returned, **(extra or {})}, f)


def otlp_tracer_provider(service_name: str | None = None) -> Any:
    """A TracerProvider exporting OTLP/HTTP protobuf to ``$OTEL_EXPORTER_OTLP_ENDPOINT``, set as global."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = service_name or os.environ.get("OTEL_SERVICE_NAME", "framework-agent")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider
