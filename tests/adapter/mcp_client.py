"""Run in its own process by test_mcp.py: the example MCP server in-process behind the MCP SDK's
own client, traced by the OpenTelemetry SDK (the SDK's own ``tools/call`` spans) into toolmeter.

Usage: ``python tests/adapter/mcp_client.py DB`` (prints what the client received, as JSON).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from collector import ToolResultProcessor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


async def session() -> dict[str, object]:
    from mcp import Client
    from mcp_orders_server import server

    tracer = trace.get_tracer("support-agent")
    with tracer.start_as_current_span("invoke_agent support"):
        async with Client(server) as client:
            listed = (await client.call_tool("list_orders", {"customer_id": "c-17"})).model_dump(
                by_alias=True, mode="json"
            )
            link = next(b for b in listed["content"] if b["type"] == "resource_link")
            handle = link["uri"].rsplit("/", 1)[1]
            shown = len(listed["structuredContent"]["items"])
            page = await client.call_tool("read_result", {"handle": handle, "offset": shown, "limit": 5})
            found = await client.call_tool("filter_result", {"handle": handle, "expr": "status == 'refund_pending'"})
    with tracer.start_as_current_span("invoke_agent other"):  # another agent run
        async with Client(server) as other:
            refused = await other.call_tool("read_result", {"handle": handle})
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
