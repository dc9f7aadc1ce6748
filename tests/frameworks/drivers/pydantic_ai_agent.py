"""Pydantic AI agent over the fake OpenAI server, traced by Pydantic AI's built-in instrumentation.

``Agent.instrument_all(InstrumentationSettings(tracer_provider=...))`` with the default data format
(``version`` = ``DEFAULT_INSTRUMENTATION_VERSION``, 5 in pydantic-ai-slim 2.68.0) and
``include_content=True`` (the default): messages go on the span attributes
``gen_ai.input.messages`` / ``gen_ai.output.messages``, tool arguments and results on the
tool span (``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``). No log events.
"""

from __future__ import annotations

import asyncio
import os

import agentkit
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def main() -> None:
    provider = agentkit.otlp_tracer_provider()
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)
    model = OpenAIChatModel(
        "gpt-4o-mini",
        provider=OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]),
    )
    # 2.68.0's Agent() has no ``instrument=`` parameter any more (instrumentation is a capability);
    # ``instrument_all`` is the documented switch that injects it into every agent run.
    Agent.instrument_all(settings)
    agent = Agent(model, name="refund_agent")

    @agent.tool_plain(description=agentkit.DESCRIPTIONS["search_orders"])
    def search_orders(status: str) -> str:
        return agentkit.returned("search_orders", agentkit.orders(status))

    @agent.tool_plain(description=agentkit.DESCRIPTIONS["fetch_logs"])
    def fetch_logs(pod: str) -> str:
        return agentkit.returned("fetch_logs", agentkit.logs(pod))

    @agent.tool_plain(description=agentkit.DESCRIPTIONS["get_status"])
    def get_status(order_id: str) -> str:
        return agentkit.returned("get_status", agentkit.status(order_id))

    result = asyncio.run(agent.run(agentkit.PROMPT))
    print("output:", result.output)
    agentkit.write_results({"instrumentation_version": settings.version, "output": result.output})
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main()
