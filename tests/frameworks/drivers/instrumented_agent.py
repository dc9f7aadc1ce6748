"""The hand-written ``openai`` tool loop of ``openai_loop.py`` with no telemetry code at all: run
under ``opentelemetry-instrument``, which loads the openai instrumentor and the exporters named
in ``OTEL_TRACES_EXPORTER`` (``otlp,toolmeter``) by their entry points."""

from __future__ import annotations

import agentkit
from openai import OpenAI
from openai_loop import run_loop

if __name__ == "__main__":
    agentkit.write_results(run_loop(OpenAI()))
