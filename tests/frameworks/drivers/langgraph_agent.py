"""The LangGraph agent both LangChain instrumentations' drivers run: ``langchain.agents.create_agent``
(the agent langgraph 1.x points to; ``langgraph.prebuilt.create_react_agent`` is deprecated since
langgraph 1.0) over ChatOpenAI, with the three tools. It returns a compiled LangGraph
``StateGraph`` (model node + ToolNode).
"""

from __future__ import annotations

import os

import agentkit


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
