"""Strands Agents with its built-in OpenTelemetry tracing, over its OpenAI model provider.

``StrandsTelemetry().setup_otlp_exporter()`` (the documented set-up) makes a TracerProvider,
sets it global and exports OTLP/HTTP protobuf to ``$OTEL_EXPORTER_OTLP_ENDPOINT``. The
conventions follow ``$OTEL_SEMCONV_STABILITY_OPT_IN`` (read by ``strands.telemetry.tracer``
when the agent's Tracer is made): unset = legacy per-message span events,
``gen_ai_latest_experimental`` = ``gen_ai.client.inference.operation.details`` span events
plus ``gen_ai.tool.call.result`` on tool spans, ``gen_ai_span_attributes_only`` = the latest
conventions' message content as span attributes instead of events. Content is always on
(Strands has no capture switch; only the opt-in ``gen_ai_unredacted_attributes=`` redaction).
"""

from __future__ import annotations

import os

import agentkit
from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry

telemetry = StrandsTelemetry().setup_otlp_exporter()


@tool(name="search_orders", description=agentkit.DESCRIPTIONS["search_orders"])
def search_orders(status: str) -> str:
    """Search orders by status.

    Args:
        status: The order status to search for.
    """
    return agentkit.returned("search_orders", agentkit.orders(status))


@tool(name="fetch_logs", description=agentkit.DESCRIPTIONS["fetch_logs"])
def fetch_logs(pod: str) -> str:
    """Fetch a pod's logs.

    Args:
        pod: The Kubernetes pod name.
    """
    return agentkit.returned("fetch_logs", agentkit.logs(pod))


@tool(name="get_status", description=agentkit.DESCRIPTIONS["get_status"])
def get_status(order_id: str) -> str:
    """Get one order's shipping status.

    Args:
        order_id: The order id.
    """
    return agentkit.returned("get_status", agentkit.status(order_id))


model = OpenAIModel(
    client_args={"base_url": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"]},
    model_id="gpt-4o-mini",
)
agent = Agent(
    model=model,
    tools=[search_orders, fetch_logs, get_status],
    system_prompt="You are a support analyst.",
    callback_handler=None,
)
result = agent(agentkit.PROMPT)
print("answer:", str(result).strip())
agentkit.write_results({"answer": str(result).strip()})
telemetry.tracer_provider.force_flush()
telemetry.tracer_provider.shutdown()
