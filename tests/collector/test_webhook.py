"""Webhook delivery of alerts against a real HTTP server on loopback (no HTTP mocks).

The server records every request and answers from a script of (status, headers, body,
delay); once the script is used up it answers 200.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import logging
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.alerts.webhook import DeliveryReport, alert_payload, deliver_pending
from collector.errors import ConfigError, StoreError
from collector.store.database import Store, read_connection

# --- a scripted webhook receiver ---------------------------------------------------------


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    delay_s: float = 0.0


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Hook:
    """A webhook receiver on 127.0.0.1, serving in a thread."""

    def __init__(self, script: list[Answer]) -> None:
        self.script = list(script)
        self.requests: list[Received] = []
        self.on_request: Callable[[Received], None] | None = None
        self._lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received = Received(self.command, self.path, dict(self.headers.items()), self.rfile.read(length))
                with hook._lock:
                    hook.requests.append(received)
                    answer = hook.script.pop(0) if hook.script else Answer()
                if hook.on_request is not None:
                    hook.on_request(received)
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            do_POST = _handle
            do_GET = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and left: expected in the timeout test

        self.server = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/B000/secret"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def hook() -> Iterator[Callable[..., Hook]]:
    started: list[Hook] = []

    def start(*script: Answer) -> Hook:
        h = Hook(list(script))
        started.append(h)
        return h

    yield start
    for h in started:
        h.stop()


@pytest.fixture
def store(tmp_path: Path) -> str:
    path = str(tmp_path / "toolmeter.duckdb")
    Store(path).ensure_schema()
    return path


class Sleeps(list[float]):
    """Stands in for time.sleep: records the waits instead of waiting."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


# --- alerts in the store, with plain SQL -------------------------------------------------

EVIDENCE = {
    "before": {"window": ["2025-02-22T12:00:00Z", "2025-03-01T11:00:00Z"], "calls": 412, "view_tokens_p99": 1200},
    "after": {"window": ["2025-03-01T11:00:00Z", "2025-03-01T12:00:00Z"], "calls": 57, "view_tokens_p99": 4800},
    "schema_diff": {"added": ["items[].body:string"], "removed": []},
    "examples": [{"trace_id": "0" * 32, "span_id": "1" * 16}],
}


def add_alert(db: str, alert_id: str, **columns: Any) -> None:
    row: dict[str, Any] = {
        "alert_id": alert_id,
        "tool_name": "search_docs",
        "kind": "growth",
        "state": "open",
        "detected_at": dt.datetime(2025, 3, 1, 12, 0, 0),
        "change_at": dt.datetime(2025, 3, 1, 11, 0, 0),
        "metric": "view_tokens_p99",
        "before_value": 1200.0,
        "after_value": 4800.0,
        "ratio": 4.0,
        "summary": "search_docs: view_tokens_p99 grew 4.0x (1200 -> 4800) since 2025-03-01 11:00 UTC",
        "evidence": json.dumps(EVIDENCE),
    }
    row.update(columns)
    names = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    import duckdb

    con = duckdb.connect(db)
    try:
        con.execute(f"INSERT INTO alerts ({names}) VALUES ({marks})", list(row.values()))
    finally:
        con.close()


def alert_row(db: str, alert_id: str) -> dict[str, Any]:
    with read_connection(db) as con:
        cur = con.execute("SELECT * FROM alerts WHERE alert_id = ?", [alert_id])
        row = cur.fetchone()
        assert row is not None
        return dict(zip([d[0] for d in cur.description], row, strict=True))


# --- (1) success, once -------------------------------------------------------------------


def test_delivers_each_open_alert_once_with_its_evidence(hook: Callable[..., Hook], store: str) -> None:
    server = hook()
    add_alert(store, "a1")
    add_alert(store, "acked", state="acknowledged")
    add_alert(store, "resolved", state="resolved")
    add_alert(store, "sent", delivered_at=dt.datetime(2025, 3, 1, 12, 5))

    report = deliver_pending(store, server.url, sleep=Sleeps())

    assert report == DeliveryReport(delivered=1, failed=0, given_up=0, errors=[])
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.method == "POST" and request.path == "/hooks/T000/B000/secret"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Toolmeter-Alert-Id"] == "a1"
    body = request.json()
    assert set(body) == {"text", "alert", "evidence"}
    assert body["text"] == "search_docs: view_tokens_p99 grew 4.0x (1200 -&gt; 4800) since 2025-03-01 11:00 UTC"
    assert body["alert"]["tool_name"] == "search_docs"
    assert body["alert"]["alert_id"] == "a1"
    assert body["alert"]["detected_at"] == "2025-03-01T12:00:00+00:00"
    assert body["alert"]["change_at"] == "2025-03-01T11:00:00+00:00"
    assert body["alert"]["ratio"] == 4.0 and body["alert"]["delivered_at"] is None
    assert "evidence" not in body["alert"]
    assert body["evidence"] == EVIDENCE

    row = alert_row(store, "a1")
    assert isinstance(row["delivered_at"], dt.datetime)
    assert abs((dt.datetime.now(dt.UTC).replace(tzinfo=None) - row["delivered_at"]).total_seconds()) < 60
    assert row["delivery_attempts"] == 0 and row["delivery_error"] is None
    for other in ("acked", "resolved"):
        assert alert_row(store, other)["delivered_at"] is None

    again = deliver_pending(store, server.url, sleep=Sleeps())
    assert again == DeliveryReport(delivered=0, failed=0, given_up=0, errors=[])
    assert len(server.requests) == 1


def test_the_store_is_not_held_while_a_request_is_in_flight(hook: Callable[..., Hook], store: str) -> None:
    server = hook()
    add_alert(store, "a1")
    opened: list[subprocess.CompletedProcess[str]] = []
    probe = (
        "import sys, duckdb\n"
        "con = duckdb.connect(sys.argv[1], read_only=True)\n"
        "print(con.execute('SELECT count(*) FROM alerts').fetchone()[0])\n"
        "con.close()\n"
    )

    def open_from_another_process(_: Received) -> None:
        # DuckDB refuses a second process while one holds the file, even read-only
        opened.append(subprocess.run([sys.executable, "-c", probe, store], capture_output=True, text=True, timeout=60))

    server.on_request = open_from_another_process
    assert deliver_pending(store, server.url, sleep=Sleeps()).delivered == 1
    assert len(opened) == 1
    assert opened[0].returncode == 0, opened[0].stderr
    assert opened[0].stdout.strip() == "1"


# --- (2) retries -------------------------------------------------------------------------


def test_retries_503_with_exponential_backoff_then_delivers(hook: Callable[..., Hook], store: str) -> None:
    server = hook(Answer(503, body=b"busy"), Answer(503, body=b"still busy"), Answer(200))
    add_alert(store, "a1")
    sleeps = Sleeps()

    report = deliver_pending(store, server.url, backoff_s=0.5, sleep=sleeps)

    assert report.delivered == 1 and report.failed == 0 and report.given_up == 0
    assert len(server.requests) == 3
    assert [r.json()["alert"]["alert_id"] for r in server.requests] == ["a1"] * 3
    assert sleeps == [0.5, 1.0]
    assert report.errors == ["a1: HTTP 503 Service Unavailable: busy", "a1: HTTP 503 Service Unavailable: still busy"]
    row = alert_row(store, "a1")
    assert row["delivered_at"] is not None
    assert row["delivery_attempts"] == 2
    assert row["delivery_error"] is None  # shown only until delivered


def test_retry_after_is_honoured_and_capped(hook: Callable[..., Hook], store: str) -> None:
    in_30_s = email.utils.formatdate(time.time() + 30, usegmt=True)
    server = hook(
        Answer(429, {"Retry-After": "7"}),
        Answer(503, {"Retry-After": "3600"}),  # capped at 60
        Answer(502, {"Retry-After": in_30_s}),  # an HTTP date
        Answer(500),  # none: back to the backoff sequence
        Answer(200),
    )
    add_alert(store, "a1")
    sleeps = Sleeps()

    report = deliver_pending(store, server.url, backoff_s=0.25, sleep=sleeps)

    assert report.delivered == 1 and len(server.requests) == 5
    assert sleeps[:2] == [7.0, 60.0]
    assert 25 <= sleeps[2] <= 30
    assert sleeps[3] == 0.25 * 2**3
    assert [e.split(":")[1].split()[1] for e in report.errors] == ["429", "503", "502", "500"]
    assert alert_row(store, "a1")["delivery_attempts"] == 4


def test_a_timeout_is_retried(hook: Callable[..., Hook], store: str) -> None:
    server = hook(Answer(200, delay_s=1.0), Answer(200))
    add_alert(store, "a1")
    sleeps = Sleeps()

    report = deliver_pending(store, server.url, timeout_s=0.2, backoff_s=0.1, sleep=sleeps)

    assert report.delivered == 1 and sleeps == [0.1]
    assert len(server.requests) == 2
    assert report.errors == ["a1: no answer within 0.2 s (timed out)"]


# --- (3) permanent failures --------------------------------------------------------------


def test_404_is_not_retried_and_is_recorded(
    hook: Callable[..., Hook], store: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = hook(Answer(404, body=b"no_such_hook\n" + b"x" * 500))
    add_alert(store, "a1")
    sleeps = Sleeps()

    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        report = deliver_pending(store, server.url, sleep=sleeps)

    assert len(server.requests) == 1 and sleeps == []
    assert report.delivered == 0 and report.failed == 1 and report.given_up == 0
    assert len(report.errors) == 1 and "404" in report.errors[0]
    row = alert_row(store, "a1")
    assert row["delivered_at"] is None
    assert row["delivery_attempts"] == 1
    error = row["delivery_error"]
    assert error.startswith("HTTP 404 Not Found: no_such_hook xxx")
    assert "\n" not in error
    assert error.endswith("x" * 10) and len(error) == len("HTTP 404 Not Found: ") + 200  # the body's first 200 chars
    assert "secret" not in error  # the URL's path (a Slack webhook's secret) is never recorded
    warnings = [r for r in caplog.records if r.name == "toolmeter" and r.levelno == logging.WARNING]
    assert any("a1" in r.getMessage() and "404" in r.getMessage() for r in warnings)
    assert all("secret" not in r.getMessage() for r in warnings)

    # the next run tries once more (the URL may have been fixed), until max_attempts in all
    server.script = [Answer(404), Answer(404)]
    report = deliver_pending(store, server.url, max_attempts=2, sleep=sleeps)
    assert report.given_up == 1 and report.failed == 1 and len(server.requests) == 2
    assert deliver_pending(store, server.url, max_attempts=2, sleep=sleeps) == DeliveryReport(0, 0, 0, [])
    assert len(server.requests) == 2 and alert_row(store, "a1")["delivery_attempts"] == 2


def test_a_redirect_is_a_failure_not_a_get(hook: Callable[..., Hook], store: str) -> None:
    server = hook(Answer(302, {"Location": "/elsewhere"}))
    add_alert(store, "a1")

    report = deliver_pending(store, server.url, sleep=Sleeps())

    assert [r.method for r in server.requests] == ["POST"]  # urllib would have re-sent it as a GET
    assert report.failed == 1 and report.delivered == 0
    row = alert_row(store, "a1")
    assert row["delivered_at"] is None
    assert "302" in row["delivery_error"] and "/elsewhere" in row["delivery_error"]


# --- (4) unreachable ---------------------------------------------------------------------


class Killed(Exception):
    """The process dying during a backoff wait."""


def test_an_unreachable_url_is_given_up_after_max_attempts_across_runs(
    store: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = closed_port_url()
    add_alert(store, "a1")

    # run 1 dies in its first backoff wait: the failed attempt is already recorded
    def die(_: float) -> None:
        raise Killed

    with pytest.raises(Killed):
        deliver_pending(store, url, max_attempts=3, backoff_s=0.5, sleep=die)
    row = alert_row(store, "a1")
    assert row["delivery_attempts"] == 1
    assert "cannot connect" in row["delivery_error"] and "refused" in row["delivery_error"].lower()

    # run 2 has two attempts left
    sleeps = Sleeps()
    with caplog.at_level(logging.WARNING, logger="toolmeter"):
        report = deliver_pending(store, url, max_attempts=3, backoff_s=0.5, sleep=sleeps)
    assert report.delivered == 0 and report.failed == 1 and report.given_up == 1
    assert len(report.errors) == 2 and all(e.startswith("a1: cannot connect") for e in report.errors)
    assert sleeps == [0.5]
    row = alert_row(store, "a1")
    assert row["delivery_attempts"] == 3 and row["delivered_at"] is None and row["delivery_error"]
    assert any("giving up on alert a1" in r.getMessage() for r in caplog.records)

    # run 3 sends nothing
    assert deliver_pending(store, url, max_attempts=3, sleep=sleeps) == DeliveryReport(0, 0, 0, [])
    assert alert_row(store, "a1")["delivery_attempts"] == 3


def test_one_alert_failing_does_not_stop_the_others(hook: Callable[..., Hook], store: str) -> None:
    server = hook(Answer(400, body=b"invalid_payload"), Answer(200))
    add_alert(store, "a1", detected_at=dt.datetime(2025, 3, 1, 12))
    add_alert(store, "a2", detected_at=dt.datetime(2025, 3, 1, 13))

    report = deliver_pending(store, server.url, sleep=Sleeps())

    assert [r.json()["alert"]["alert_id"] for r in server.requests] == ["a1", "a2"]
    assert report.delivered == 1 and report.failed == 1
    assert alert_row(store, "a1")["delivered_at"] is None
    assert alert_row(store, "a2")["delivered_at"] is not None


# --- one run at a time, and configuration ------------------------------------------------


def test_a_second_run_at_the_same_time_sends_nothing(hook: Callable[..., Hook], store: str) -> None:
    fcntl = pytest.importorskip("fcntl")
    server = hook()
    add_alert(store, "a1")
    with open(store + ".webhook.lock", "a+b") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        report = deliver_pending(store, server.url, sleep=Sleeps())
        fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    assert report.delivered == 0 and len(report.errors) == 1 and "another alert delivery run" in report.errors[0]
    assert server.requests == []
    assert deliver_pending(store, server.url, sleep=Sleeps()).delivered == 1


def test_bad_settings_and_a_missing_store_are_named(tmp_path: Path, store: str) -> None:
    with pytest.raises(ConfigError, match="http:// or https://"):
        deliver_pending(store, "hooks.slack.com/services/x")
    with pytest.raises(ConfigError, match="max_attempts"):
        deliver_pending(store, "http://127.0.0.1/hook", max_attempts=0)
    with pytest.raises(StoreError, match="no toolmeter store"):
        deliver_pending(str(tmp_path / "missing.duckdb"), "http://127.0.0.1/hook")


# --- the body, pure ----------------------------------------------------------------------


def test_alert_payload_is_strict_json_and_slack_safe() -> None:
    row = {
        "alert_id": "x",
        "tool_name": "read_file",
        "kind": "schema_change",
        "state": "open",
        "detected_at": dt.datetime(2025, 3, 1, 12, 0, 0, 250000),
        "change_at": None,
        "ratio": math.inf,
        "before_value": 0.0,
        "summary": "read_file <schema> changed & grew",
        "evidence": '{"schema_diff": {"added": ["a:string"]}}',
        "delivered_at": None,
        "delivery_attempts": 0,
        "delivery_error": None,
    }
    body = alert_payload(row)
    assert body["text"] == "read_file &lt;schema&gt; changed &amp; grew"
    assert body["alert"]["ratio"] is None and body["alert"]["before_value"] == 0.0
    assert body["alert"]["detected_at"] == "2025-03-01T12:00:00.250000+00:00"
    assert body["evidence"] == {"schema_diff": {"added": ["a:string"]}}
    json.dumps(body, allow_nan=False)
    assert row["ratio"] == math.inf  # the row is left alone

    bare = alert_payload({"alert_id": "y", "tool_name": "grep", "kind": "growth", "summary": None, "evidence": None})
    assert bare["text"] == "toolmeter: growth for tool grep" and bare["evidence"] is None
