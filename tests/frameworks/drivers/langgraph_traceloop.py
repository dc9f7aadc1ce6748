"""LangGraph agent (``langchain.agents.create_agent``) over ChatOpenAI, traced by OpenLLMetry.

``LangchainInstrumentor().instrument(tracer_provider=...)`` from
opentelemetry-instrumentation-langchain (Traceloop). Content capture: ``TRACELOOP_TRACE_CONTENT``
(read at every span, default ``"true"``; the driver sets it to ``true`` explicitly).

Two modes, by ``$TOOLMETER_TRACELOOP_MODE``:

* ``attributes`` (default, ``use_attributes=True``): prompts/completions as span attributes;
* ``events`` (``use_attributes=False``): prompts/completions as OTel log records
  (``gen_ai.<role>.message`` / ``gen_ai.choice``) through a LoggerProvider exporting OTLP/HTTP.

The agent is ``langgraph_agent.build_agent``, as for ``langgraph_openinference.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")

import agentkit
from langgraph_agent import build_agent
from opentelemetry.instrumentation.langchain import LangchainInstrumentor


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
