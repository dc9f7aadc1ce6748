"""OpenAI Agents SDK (openai-agents) traced by openinference-instrumentation-openai-agents.

The agent's model is ``OpenAIChatCompletionsModel`` over an ``AsyncOpenAI`` pointed at
``$OPENAI_BASE_URL`` (the fake chat-completions server), so nothing uses the Responses API.
``OpenAIAgentsInstrumentor().instrument(tracer_provider=...)`` registers OpenInference's
tracing processor *exclusively* (its default ``exclusive_processor=True``): it replaces the
SDK's own ``BatchTraceProcessor(BackendSpanExporter)``, so no trace goes to api.openai.com.
The driver checks that, and also sets an empty tracing export key as a second guard.
Content capture: OpenInference records inputs/outputs by default (``TraceConfig()``; the
``OPENINFERENCE_HIDE_*`` variables would hide them), nothing to switch on.
"""

from __future__ import annotations

import asyncio

import agentkit
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_export_api_key
from agents.tracing import get_trace_provider
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from openinference.instrumentation.openai_agents._processor import OpenInferenceTracingProcessor


@function_tool(description_override=agentkit.DESCRIPTIONS["search_orders"])
def search_orders(status: str) -> str:
    """Search orders by status."""
    return agentkit.returned("search_orders", agentkit.orders(status))


@function_tool(description_override=agentkit.DESCRIPTIONS["fetch_logs"])
def fetch_logs(pod: str) -> str:
    """Fetch pod logs."""
    return agentkit.returned("fetch_logs", agentkit.logs(pod))


@function_tool(description_override=agentkit.DESCRIPTIONS["get_status"])
def get_status(order_id: str) -> str:
    """Get an order's status."""
    return agentkit.returned("get_status", agentkit.status(order_id))


async def main() -> dict[str, object]:
    client = AsyncOpenAI()  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    agent = Agent(
        name="refund_investigator",
        instructions="You investigate refunds with the tools you have.",
        model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        tools=[search_orders, fetch_logs, get_status],
    )
    result = await Runner.run(agent, agentkit.PROMPT)
    return {"final_output": str(result.final_output)}


if __name__ == "__main__":
    provider = agentkit.otlp_tracer_provider()
    set_tracing_export_api_key("")  # the SDK's backend exporter, were it still registered, has no key
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    processors = get_trace_provider()._multi_processor._processors  # type: ignore[attr-defined]
    assert [type(p) for p in processors] == [OpenInferenceTracingProcessor], processors
    extra = asyncio.run(main())
    get_trace_provider().force_flush()
    provider.force_flush()
    provider.shutdown()
    agentkit.write_results({**extra, "trace_processors": [type(p).__name__ for p in processors]})
