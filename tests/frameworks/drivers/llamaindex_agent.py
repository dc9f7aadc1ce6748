"""LlamaIndex: a FunctionAgent (agent workflow) with three FunctionTools over llama_index's OpenAI LLM.

Tracing: ``openinference-instrumentation-llama-index``'s ``LlamaIndexInstrumentor().instrument(
tracer_provider=...)`` (it hooks LlamaIndex's instrumentation dispatcher). Content is captured by
default (OpenInference's ``OPENINFERENCE_HIDE_*`` settings are all off unless set), so nothing
needs turning on.
"""

from __future__ import annotations

import asyncio
import os

import agentkit
import llama_index.core
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

# llama_index's memory tokenizer (cl100k_base) would try to download its encoding, and this
# machine has no internet: point tiktoken at the cache llama_index ships (what it uses itself
# when the variable is unset).
os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(os.path.dirname(llama_index.core.__file__), "_static", "tiktoken_cache")

tracer_provider = agentkit.otlp_tracer_provider()
LlamaIndexInstrumentor().instrument(tracer_provider=tracer_provider)

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.llms.openai import OpenAI  # noqa: E402


def search_orders(status: str) -> str:
    """Search orders by status; returns the matching orders as JSON."""
    return agentkit.returned("search_orders", agentkit.orders(status))


def fetch_logs(pod: str) -> str:
    """Fetch the recent log lines of a Kubernetes pod."""
    return agentkit.returned("fetch_logs", agentkit.logs(pod))


def get_status(order_id: str) -> str:
    """Get the shipping status of one order."""
    return agentkit.returned("get_status", agentkit.status(order_id))


tools = [FunctionTool.from_defaults(fn=fn, name=name, description=agentkit.DESCRIPTIONS[name])
         for name, fn in (("search_orders", search_orders), ("fetch_logs", fetch_logs), ("get_status", get_status))]  # fmt: skip


async def main() -> str:
    llm = OpenAI(model="gpt-4o-mini", api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    agent = FunctionAgent(name="support_analyst", description="Answers questions about refunds.", tools=tools,
                          llm=llm, system_prompt="You are a support analyst.")  # fmt: skip
    response = await agent.run(user_msg=agentkit.PROMPT)
    return str(response)


answer = asyncio.run(main())
print("answer:", answer.strip())
agentkit.write_results({"answer": answer.strip()})
tracer_provider.force_flush()
tracer_provider.shutdown()
