"""The ``toolmeter`` span exporter, for agents run under ``opentelemetry-instrument``.

``OTEL_TRACES_EXPORTER=otlp,toolmeter opentelemetry-instrument python agent.py`` loads it from
the ``opentelemetry_traces_exporter`` entry point (the SDK's configurator, with
``opentelemetry-distro``), beside the exporters the agent already has, so the instrumentors
it already runs (OpenInference, OpenLLMetry, the GenAI ones of opentelemetry-python-contrib)
have their tool calls measured without a line of code. Settings are the ``TOOLMETER_*``
variables: ``TOOLMETER_FORWARD_TO`` (and ``TOOLMETER_RECEIVER_TOKEN``) sends to a
``toolmeter serve``; unset, the spans are measured in the process and written to
``TOOLMETER_DB``.

The SDK wraps each exporter in a ``BatchSpanProcessor``, so :meth:`export` runs on that
processor's thread, never on the agent's: it hands every span to a
:class:`~collector.agent.processor.ToolResultProcessor` (``on_end`` only queues it), and the
processor's own worker measures, writes or forwards, as it does when added by hand.
"""

from __future__ import annotations

import atexit
import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from collector import config as config_module
from collector.agent.processor import ToolResultProcessor

logger = logging.getLogger("toolmeter")


def _flush_provider() -> None:
    try:
        provider = trace.get_tracer_provider()
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            flush()
    except Exception:  # at exit: say so, never raise into the interpreter's shutdown
        logger.debug("toolmeter: flushing the tracer provider at exit failed", exc_info=True)


class ToolmeterSpanExporter(SpanExporter):
    """Measures the spans it is given with a :class:`ToolResultProcessor` (see the module docstring)."""

    def __init__(self, **_: Any) -> None:
        forward = config_module.forward_to()
        self._processor = (
            ToolResultProcessor(forward_to=forward, forward_token=config_module.receiver_token())
            if forward
            else ToolResultProcessor()
        )
        # At exit, hooks run last-registered first: the processor's (registered just now) would
        # run before the tracer provider's, which flushes its BatchSpanProcessors into export(),
        # and the spans still queued there would reach a processor already shut down. This one,
        # registered after both, flushes the provider first.
        atexit.register(_flush_provider)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._processor.on_end(span)  # never raises, never blocks: it queues or counts a drop
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self._processor.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self._processor.shutdown()
