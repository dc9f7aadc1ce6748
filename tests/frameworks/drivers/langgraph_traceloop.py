"""LangGraph agent (``langchain.agents.create_agent``) over ChatOpenAI, traced by OpenLLMetry.

``LangchainInstrumentor().instrument(tracer_provider=...)`` from
opentelemetry-instrumentation-langchain (Traceloop). Content capture: ``TRACELOOP_TRACE_CONTENT``
(read at every span, default ``"true"``; the driver sets it to ``true`` explicitly).

Two modes, by ``$TOOLMETER_TRACELOOP_MODE``:

* ``attributes`` (default, ``use_attributes=True``): prompts/completions as span attributes;
* ``events`` (``use_attributes=False``): prompts/completions as OTel log records
  (``gen_ai.<role>.message`` / ``gen_ai.choice``) through a LoggerProvider exporting OTLP/HTTP.

The agent is the same as ``langgraph_openinference.py``'s (no shared import: each driver stands alone).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")

import agentkit
from opentelemetry.instrumentation.langchain import LangchainInstrumentor


def build_agent():  # type: ignore[no-untyped-def]
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool("search_orders", description=agentkit.DESCRIPTIONS["search_orders"])
    def search_orders(status: str) -> str:
        return agentkit.returned("search_orders", agentkit.orders(status))

    @tool("fetch_logs", description=agentkit.DESCRIPTIONS["fetch_logs"])
    def fetch_logs(pod: str) -> str:
        return agentkit.returned("fetch_logs", agentkit.logs(pod))

    @tool("get_status", description=agentkit.DESCRIPTIONS["get_status"])
    def get_status(order_id: str) -> str:
        return agentkit.returned("get_status", agentkit.status(order_id))

    model = ChatOpenAI(model="gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"],
                       api_key=os.environ["OPENAI_API_KEY"], max_retries=0)  # fmt: skip
    return create_agent(model, [search_orders, fetch_logs, get_status], name="refund_agent")


def otlp_logger_provider():  # type: ignore[no-untyped-def]
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "agent")}))
    provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    return provider


def main() -> None:
    mode = os.environ.get("TOOLMETER_TRACELOOP_MODE", "attributes")
    provider = agentkit.otlp_tracer_provider()
    logs = None
    if mode == "events":
        logs = otlp_logger_provider()
        LangchainInstrumentor(use_attributes=False).instrument(tracer_provider=provider, logger_provider=logs)
    else:
        LangchainInstrumentor(use_attributes=True).instrument(tracer_provider=provider)
    agent = build_agent()
    state = agent.invoke({"messages": [{"role": "user", "content": agentkit.PROMPT}]})
    final = state["messages"][-1].content
    print("output:", final)
    agentkit.write_results({"output": final, "mode": mode, "messages": len(state["messages"])})
    provider.force_flush()
    provider.shutdown()
    if logs is not None:
        logs.force_flush()
        logs.shutdown()


if __name__ == "__main__":
    main()
