"""Google ADK: an LlmAgent with three function tools over LiteLlm, run by InMemoryRunner.

ADK's built-in tracing writes to the global TracerProvider (and its content log records to
the global LoggerProvider), so both are set before ADK is imported. ADK's own
``maybe_set_otel_providers`` is not used: it would also add an OTLP metrics exporter, and the
receiver serves only traces and logs.

Content capture: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_AND_EVENT`` (ADK's
default schema v2 / experimental semconv puts content on spans only in SPAN_ONLY or
SPAN_AND_EVENT; the legacy ``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS`` only gates schema v1).
The model is ``LiteLlm("openai/gpt-4o-mini", api_base=<fake>)``; LiteLLM's cost map is read
locally (``LITELLM_LOCAL_MODEL_COST_MAP=True``, set by the harness).
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_AND_EVENT")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("GOOGLE_GENAI_USE_VERTEXAI", "0")

import agentkit
from opentelemetry import _logs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource

tracer_provider = agentkit.otlp_tracer_provider()
logger_provider = LoggerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "adk")}))
logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
_logs.set_logger_provider(logger_provider)

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.lite_llm import LiteLlm  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402


def search_orders(status: str) -> str:
    """Search orders by status; returns the matching orders as JSON.

    Args:
        status: The order status to search for.
    """
    return agentkit.returned("search_orders", agentkit.orders(status))


def fetch_logs(pod: str) -> str:
    """Fetch the recent log lines of a Kubernetes pod.

    Args:
        pod: The Kubernetes pod name.
    """
    return agentkit.returned("fetch_logs", agentkit.logs(pod))


def get_status(order_id: str) -> str:
    """Get the shipping status of one order.

    Args:
        order_id: The order id.
    """
    return agentkit.returned("get_status", agentkit.status(order_id))


async def main() -> str:
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=os.environ["OPENAI_BASE_URL"],
                    api_key=os.environ["OPENAI_API_KEY"])  # fmt: skip
    agent = LlmAgent(name="support_analyst", model=model, instruction="You are a support analyst.",
                     description="Answers questions about refunds.",
                     tools=[search_orders, fetch_logs, get_status])  # fmt: skip
    runner = InMemoryRunner(agent=agent, app_name="toolmeter")
    session = await runner.session_service.create_session(app_name="toolmeter", user_id="u1")
    answer = ""
    message = types.Content(role="user", parts=[types.Part(text=agentkit.PROMPT)])
    async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
        if event.content and event.content.parts and event.is_final_response():
            answer = "".join(p.text or "" for p in event.content.parts)
    await runner.close()
    return answer


answer = asyncio.run(main())
print("answer:", answer.strip())
agentkit.write_results({"answer": answer.strip()})
tracer_provider.force_flush()
logger_provider.force_flush()
tracer_provider.shutdown()
logger_provider.shutdown()
