"""A hand-written tool loop over the ``anthropic`` client, its model calls traced by one of two
instrumentations, its tools by the loop itself (GenAI ``execute_tool`` spans).

``DRIVER_INSTRUMENTATION``: ``openinference`` (openinference-instrumentation-anthropic; the
response body as ``output.value``) or ``traceloop`` (OpenLLMetry's
opentelemetry-instrumentation-anthropic).

The loop: ``messages.create`` with the three tools; each ``tool_use`` block is run inside an
``execute_tool`` span carrying the result, answered with a ``tool_result`` block; again until
the model answers with text.
"""

from __future__ import annotations

import os

import agentkit
from anthropic import Anthropic

PARAMS = {"search_orders": "status", "fetch_logs": "pod", "get_status": "order_id"}
TOOLS = [
    {"name": name, "description": agentkit.DESCRIPTIONS[name],
     "input_schema": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}}
    for name, arg in PARAMS.items()
]  # fmt: skip


def run_loop(client: Anthropic, tracer: object) -> dict[str, object]:
    messages: list[dict[str, object]] = [{"role": "user", "content": agentkit.PROMPT}]
    call_ids: dict[str, list[str]] = {}
    for _ in range(6):
        resp = client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, tools=TOOLS,  # type: ignore[arg-type]
                                      system="You investigate refunds with the tools you have.",
                                      messages=messages)  # type: ignore[arg-type]  # fmt: skip
        uses = [b for b in resp.content if b.type == "tool_use"]
        if not uses:
            return {"final_output": resp.content[0].text, "call_ids": call_ids}  # type: ignore[union-attr]
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in resp.content]})
        results = []
        for use in uses:
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": use.name,
                "gen_ai.tool.call.id": use.id,
            }
            with tracer.start_as_current_span(f"execute_tool {use.name}", attributes=attrs) as span:  # type: ignore[attr-defined]
                result = agentkit.returned(use.name, agentkit.TOOLS[use.name](**use.input))  # type: ignore[arg-type]
                span.set_attribute("gen_ai.tool.call.result", result)
            call_ids.setdefault(use.name, []).append(use.id)
            results.append({"type": "tool_result", "tool_use_id": use.id, "content": result})
        messages.append({"role": "user", "content": results})
    raise RuntimeError("the model never stopped asking for tools")


def main() -> None:
    which = os.environ.get("DRIVER_INSTRUMENTATION", "openinference")
    provider = agentkit.otlp_tracer_provider()
    if which == "openinference":
        from openinference.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument(tracer_provider=provider)
    elif which == "traceloop":
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as TraceloopInstrumentor

        TraceloopInstrumentor().instrument(tracer_provider=provider)
    else:
        raise SystemExit(f"DRIVER_INSTRUMENTATION={which!r}: expected openinference or traceloop")
    with provider.get_tracer("anthropic-loop").start_as_current_span("invoke_agent refunds") as _:
        extra = run_loop(Anthropic(), provider.get_tracer("anthropic-loop"))  # ANTHROPIC_BASE_URL / _API_KEY
    provider.force_flush()
    provider.shutdown()
    agentkit.write_results({**extra, "instrumentation": which})


if __name__ == "__main__":
    main()
