"""An MCP server whose tool results are bounded by toolmeter's adapter.

``list_orders`` answers with an envelope that fits 1,500 tokens (a summary of every order,
the newest ones, the total, a handle and how to go on) and a ``resource_link`` to the whole
result; ``read_result`` and ``filter_result`` page and narrow it for the session that made
it (the agent run that made it, see ``_scope``). Each call is recorded on the MCP SDK's own ``tools/call`` span, so a tracer provider with
:class:`collector.ToolResultProcessor` stores it with its declared truncation.

Run it over stdio (``python examples/mcp_orders_server.py``) or import ``server`` and connect
in-process (``mcp.Client(server)``).
"""

from __future__ import annotations

import random
import uuid
from datetime import date, timedelta
from typing import Any

from mcp.server.mcpserver import Context, MCPServer, authenticated_principal
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from opentelemetry import trace

from collector import adapter
from collector.adapter.mcp import shape_call_result
from collector.errors import InputError

ORDERS = adapter.Policy(1500, "list", fields=("id", "date", "status", "amount"), sort_key="date", descending=True)
HANDLES = adapter.MemoryHandles()

server = MCPServer("orders")


def _scope(ctx: Context) -> adapter.Scope:
    """The run is the calling agent's trace (the MCP SDK carries its trace context in each
    request's ``_meta``), the principal the authenticated client: a handle made for one agent
    run is refused to another. Untraced, every call is its own run."""
    span_context = trace.get_current_span().get_span_context()
    run = f"{span_context.trace_id:032x}" if span_context.is_valid else uuid.uuid4().hex
    return adapter.Scope(run_id=run, principal=authenticated_principal(ctx.request_context) or "")


def customer_orders(customer_id: str, n: int = 312) -> list[dict[str, Any]]:
    """Made-up orders of one customer: one a day back from 2026-11-30, one refund pending."""
    rng = random.Random(customer_id)
    rows = [{"id": f"ord-{i:04d}", "date": str(date(2026, 11, 30) - timedelta(days=i)),
             "status": rng.choice(["paid", "shipped", "delivered"]), "amount": round(rng.uniform(5, 400), 2),
             "customer": customer_id, "notes": "left at the front desk"} for i in range(n)]  # fmt: skip
    rows[90]["status"] = "refund_pending"
    return rows


@server.tool()
def list_orders(customer_id: str, ctx: Context) -> CallToolResult:
    """The customer's orders, newest first, with a summary of all of them."""
    rows = customer_orders(customer_id)
    result = CallToolResult(content=[TextContent(type="text", text=str(rows))], structured_content={"orders": rows})
    shaped, _ = shape_call_result(result, ORDERS, _scope(ctx), store=HANDLES, tool_name="list_orders")
    return shaped


@server.tool()
def read_result(handle: str, ctx: Context, offset: int = 0, limit: int = 20) -> dict[str, Any]:
    """Items ``offset`` to ``offset + limit`` of a result behind a handle."""
    try:
        return adapter.read_result(HANDLES, handle, _scope(ctx), offset, limit)
    except (adapter.HandleError, InputError) as e:  # said to the model as it is: it can act on it
        raise ToolError(str(e)) from None


@server.tool()
def filter_result(handle: str, expr: str, ctx: Context) -> dict[str, Any]:
    """The items of a handle's result for which ``expr`` holds (``status == 'refund_pending'``)."""
    try:
        return adapter.filter_result(HANDLES, handle, _scope(ctx), expr)
    except (adapter.HandleError, InputError) as e:
        raise ToolError(str(e)) from None


if __name__ == "__main__":
    server.run("stdio")
