"""Run in its own process by test_mcp.py: the example MCP server in-process behind the MCP SDK's
own client, traced by the OpenTelemetry SDK (the SDK's own ``tools/call`` spans) into toolmeter.

Usage: ``python tests/adapter/mcp_client.py DB [--wrapped]`` (prints what the client received, as
JSON). ``--wrapped`` calls each tool inside a tool span of the client's own, as an agent framework
does, carrying the text the client got back.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from collector import ToolResultProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def call_in_span(client: Any, name: str, args: dict[str, Any]) -> Any:
    """``client.call_tool``, inside a client-side tool span when ``--wrapped``."""

    async def call() -> Any:
        if "--wrapped" not in sys.argv:
            return await client.call_tool(name, args)
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        with trace.get_tracer("agent-framework").start_as_current_span(f"execute_tool {name}", attributes=attrs) as s:
            result = await client.call_tool(name, args)
            s.set_attribute("gen_ai.tool.call.result", result.content[0].text)
            return result

    return call()


async def session() -> dict[str, object]:
    from mcp import Client
    from mcp_orders_server import server

    tracer = trace.get_tracer("support-agent")
    with tracer.start_as_current_span("invoke_agent support"):
        async with Client(server) as client:
            listed = (await call_in_span(client, "list_orders", {"customer_id": "c-17"})).model_dump(
                by_alias=True, mode="json"
            )
            link = next(b for b in listed["content"] if b["type"] == "resource_link")
            handle = link["uri"].rsplit("/", 1)[1]
            shown = len(listed["structuredContent"]["items"])
            page = await call_in_span(client, "read_result", {"handle": handle, "offset": shown, "limit": 5})
            found = await call_in_span(
                client, "filter_result", {"handle": handle, "expr": "status == 'refund_pending'"}
            )
    with tracer.start_as_current_span("invoke_agent other"):  # another agent run
        async with Client(server) as other:
            refused = await call_in_span(other, "read_result", {"handle": handle})
    return {"listed": listed, "handle": handle, "page": page.model_dump(by_alias=True, mode="json"),
            "found": found.model_dump(by_alias=True, mode="json"),
            "refused": refused.model_dump(by_alias=True, mode="json")}  # fmt: skip


def main() -> None:
    provider = TracerProvider()
    processor = ToolResultProcessor(db=sys.argv[1])
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    out = asyncio.run(session())
    provider.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
