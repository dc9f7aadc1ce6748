"""A hand-written tool loop over the ``openai`` client (no framework), instrumented by one of two packages.

``DRIVER_INSTRUMENTATION`` picks the instrumentation:

* ``openai-v2`` (default): opentelemetry-instrumentation-openai-v2's ``OpenAIInstrumentor``.
  Content only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true`` on the
  default v1.30 conventions, where content goes out as log records; ``span_only`` /
  ``event_only`` / ``span_and_event`` with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``).
  A LoggerProvider with the OTLP/HTTP log exporter is set up for those log records.
* ``openinference``: openinference-instrumentation-openai's ``OpenAIInstrumentor``
  (content captured by default).

The loop: ``chat.completions.create`` with the three tools, run every requested tool by
calling the function and appending ``{"role": "tool", "tool_call_id": ..., "content": result}``,
then call again until the model answers with text. The tools themselves are not traced.
"""

from __future__ import annotations

import json
import os

import agentkit
from openai import OpenAI

PARAMS = {"search_orders": "status", "fetch_logs": "pod", "get_status": "order_id"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": agentkit.DESCRIPTIONS[name],
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
        },
    }
    for name, arg in PARAMS.items()
]


def run_loop(client: OpenAI) -> dict[str, object]:
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You investigate refunds with the tools you have."},
        {"role": "user", "content": agentkit.PROMPT},
    ]
    call_ids: dict[str, list[str]] = {}
    for _ in range(5):
        resp = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        msg = resp.choices[0].message
        if not msg.tool_calls:
            return {"final_output": msg.content, "call_ids": call_ids}
        messages.append(msg.model_dump(exclude_none=True))
        for tc in msg.tool_calls:
            name = tc.function.name
            args = json.loads(tc.function.arguments or "{}")
            result = agentkit.returned(name, agentkit.TOOLS[name](**args))
            call_ids.setdefault(name, []).append(tc.id)
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": result})
    raise RuntimeError("the model never stopped asking for tools")


def main() -> None:
    which = os.environ.get("DRIVER_INSTRUMENTATION", "openai-v2")
    provider = agentkit.otlp_tracer_provider()
    logger_provider = None
    if which == "openai-v2":
        from opentelemetry._logs import set_logger_provider
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

        logger_provider = LoggerProvider(resource=provider.resource)
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        set_logger_provider(logger_provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logger_provider)
    elif which == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OIOpenAIInstrumentor

        OIOpenAIInstrumentor().instrument(tracer_provider=provider)
    else:
        raise SystemExit(f"DRIVER_INSTRUMENTATION={which!r}: expected openai-v2 or openinference")
    extra = run_loop(OpenAI())  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    provider.force_flush()
    provider.shutdown()
    if logger_provider is not None:
        logger_provider.force_flush()
        logger_provider.shutdown()
    agentkit.write_results({**extra, "instrumentation": which})


if __name__ == "__main__":
    main()
