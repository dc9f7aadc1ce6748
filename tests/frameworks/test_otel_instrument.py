"""Zero code: an agent run under the real ``opentelemetry-instrument`` with
``OTEL_TRACES_EXPORTER=otlp,toolmeter`` has its tool calls in the store, with exact counts.

The venv (``fw-otel-instrument``) holds ``opentelemetry-distro``, the openai client, the
OpenInference openai instrumentor and toolmeter; nothing in the agent's code mentions any of them
but the client. Its OTLP exporter goes to a receiver as every framework test's does; the
``toolmeter`` exporter measures in the agent's process into ``TOOLMETER_DB``. Both stores must
agree, and the test's usual checks hold on the one the entry point wrote.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks.conftest import DRIVERS, framework_python
from tests.frameworks.expect import check_run, llm_count, tool_rows

pytestmark = pytest.mark.frameworks


def test_opentelemetry_instrument_with_the_toolmeter_exporter(run_agent: Any, counter: Any, tmp_path: Path) -> None:
    python = framework_python("fw-otel-instrument", with_toolmeter=True)
    instrument = python.parent / "opentelemetry-instrument"
    db = tmp_path / "entry-point.duckdb"
    env = {"OTEL_TRACES_EXPORTER": "otlp,toolmeter", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "TOOLMETER_DB": str(db), "TOOLMETER_FLUSH_INTERVAL": "0.1"}  # fmt: skip
    run = run_agent([str(instrument), str(python), str(DRIVERS / "instrumented_agent.py")], "otel_instrument", env)
    assert db.exists(), "the toolmeter exporter wrote no store: was its entry point loaded?"
    via_receiver = check_run(run, counter, raw=True, view=True)
    in_process = check_run(dataclasses.replace(run, db=str(db)), counter, raw=True, view=True)
    key = ("tool_name", "tool_call_id", "raw_tokens", "view_tokens")
    assert sorted(tuple(r[k] for k in key) for r in in_process) == sorted(
        tuple(r[k] for k in key) for r in via_receiver
    )
    assert sorted(r["tool_name"] for r in tool_rows(str(db))) == sorted(run.returned)
    assert llm_count(str(db)) == len(run.model_requests) == 2
