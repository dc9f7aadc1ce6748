"""The Vercel AI SDK 7 (Node), traced by ``@ai-sdk/otel``, exporting OTLP/protobuf into toolmeter.

``tests/js/ai-sdk/agent.mjs`` runs ``generateText`` with the three tools against FakeOpenAI
through ``@ai-sdk/openai``'s chat-completions model, with one of the two integrations of
``@ai-sdk/otel`` registered: ``OpenTelemetry`` (GenAI conventions, ``gen_ai.*``) or
``LegacyOpenTelemetry`` (the AI SDK's own ``ai.*`` spans, the pre-v7 ``experimental_telemetry``
format). It is Node, not a Python venv: ``run_ai_sdk`` runs it through the same ``run_agent``
fixture as the Python drivers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NODE
from tests.conftest import node_project as install_node_project
from tests.frameworks.conftest import DRIVERS, Run
from tests.frameworks.expect import check_run, llm_count, tool_rows

pytestmark = pytest.mark.frameworks

JS = Path(__file__).resolve().parents[1] / "js" / "ai-sdk"
AGENT = JS / "agent.mjs"


@pytest.fixture(scope="module")
def node_project() -> Path:
    """``tests/js/ai-sdk`` with its locked packages installed (``npm ci`` once)."""
    return install_node_project(JS, "@ai-sdk/otel")


@pytest.fixture
def run_ai_sdk(run_agent: Any, node_project: Path) -> Any:
    """``run_ai_sdk(mode, name)``: run ``agent.mjs <mode>`` into a fresh store; returns a :class:`Run`."""

    def run(mode: str, name: str, timeout: float = 120) -> Run:
        return run_agent([str(NODE), str(AGENT), mode], name, timeout=timeout)  # type: ignore[no-any-return]

    return run


def python_payloads() -> dict[str, str]:
    import sys

    sys.path.insert(0, str(DRIVERS))
    try:
        import agentkit
    finally:
        sys.path.remove(str(DRIVERS))
    return {name: fn() for name, fn in agentkit.TOOLS.items()}


def test_js_payloads_are_agentkits(node_project: Path) -> None:
    """The JS port of agentkit.orders/logs/status returns the same strings, byte for byte."""
    out = subprocess.run([str(NODE), str(AGENT), "payloads"], capture_output=True, text=True, timeout=60, check=True)
    js = json.loads(out.stdout)
    py = python_payloads()
    assert set(js) == set(py)
    for name in py:
        assert js[name].encode() == py[name].encode(), name


def _common(run: Run) -> set[str]:
    py = python_payloads()
    # every tool ran once with the fake's arguments and returned agentkit's exact string
    assert run.returned == {name: [value] for name, value in py.items()}
    assert run.extra["steps"] == 2
    # two model calls: the parallel tool calls, then the answer with all three results fed back
    assert len(run.model_requests) == 2
    shown = {m["tool_call_id"]: m["content"] for m in run.model_requests[1]["messages"] if m["role"] == "tool"}
    assert sorted(shown.values()) == sorted(py.values())  # the model was shown the raw strings
    assert {r["tool_call_id"] for r in tool_rows(run.db)} == set(shown)  # the model's call ids, on every row
    return set(shown)


def test_ai_sdk_otel(run_ai_sdk, counter) -> None:  # type: ignore[no-untyped-def]
    """``OpenTelemetry`` integration: invoke_agent / step / chat / execute_tool spans, gen_ai.*."""
    run = run_ai_sdk("otel", "ai_sdk_otel")
    _common(run)
    # raw: gen_ai.tool.call.result is JSON.stringify(output), so a string result arrives JSON-quoted;
    # it matches because the collector unwraps that JSON-string wrapper (raw_wrapper 'json_string').
    # view: gen_ai.input.messages of the next chat span, parts {type: tool_call_response, id, response}.
    rows = check_run(run, counter, raw=True, view=True)
    assert len(rows) == 3
    assert llm_count(run.db) == len(run.model_requests)  # the two chat spans; invoke_agent is not counted


def test_ai_sdk_legacy(run_ai_sdk, counter) -> None:  # type: ignore[no-untyped-def]
    """``LegacyOpenTelemetry`` integration: ai.generateText / .doGenerate / ai.toolCall spans, ai.*."""
    run = run_ai_sdk("legacy", "ai_sdk_legacy")
    _common(run)
    # the model's input is in ai.prompt.messages of ai.generateText.doGenerate ({role: tool, content: [{type:
    # tool-result, toolCallId, toolName, output: {type: text, value}}]})
    rows = check_run(run, counter, raw=True, view=True)
    assert len(rows) == 3
    assert llm_count(run.db) == len(run.model_requests)  # the two doGenerate spans; ai.generateText is not counted
