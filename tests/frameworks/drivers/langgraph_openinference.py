"""LangGraph agent (``langchain.agents.create_agent``) over ChatOpenAI, traced by OpenInference.

``LangChainInstrumentor().instrument(tracer_provider=...)`` from
openinference-instrumentation-langchain. Content is captured by default (OpenInference
``TraceConfig``: ``OPENINFERENCE_HIDE_INPUTS`` / ``_HIDE_OUTPUTS`` / ``_HIDE_INPUT_MESSAGES`` ...
all default false); the driver passes an explicit all-visible ``TraceConfig()``. Spans only,
no log events. The agent is ``langgraph_agent.build_agent``.
"""

from __future__ import annotations

import agentkit
from langgraph_agent import build_agent
from openinference.instrumentation import TraceConfig
from openinference.instrumentation.langchain import LangChainInstrumentor


def main() -> None:
    provider = agentkit.otlp_tracer_provider()
    LangChainInstrumentor().instrument(tracer_provider=provider, config=TraceConfig())
    agent = build_agent()
    state = agent.invoke({"messages": [{"role": "user", "content": agentkit.PROMPT}]})
    final = state["messages"][-1].content
    print("output:", final)
    agentkit.write_results({"output": final, "messages": len(state["messages"])})
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main()
